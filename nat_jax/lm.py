"""`python -m nat_jax.lm` and `nat-jax-lm`: the command line of nat_jax/commands/lm.py."""
from nat_jax.commands.launch import launch


def console():
  launch('lm')


if __name__ == '__main__':
  console()
