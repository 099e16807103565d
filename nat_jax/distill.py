"""`python -m nat_jax.distill` and `nat-jax-distill`: the command line of nat_jax/commands/distill.py."""
from nat_jax.commands.launch import launch


def console():
  launch('distill')


if __name__ == '__main__':
  console()
