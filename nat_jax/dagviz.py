"""`python -m nat_jax.dagviz` and `nat-jax-dagviz`: the command line of nat_jax/commands/dagviz.py."""
from nat_jax.commands.launch import launch


def console():
  launch('dagviz')


if __name__ == '__main__':
  console()
