"""`python -m nat_jax.ddgviz` and `nat-jax-ddgviz`: the command line of nat_jax/commands/ddgviz.py."""
from nat_jax.commands.launch import launch


def console():
  launch('ddgviz')


if __name__ == '__main__':
  console()
