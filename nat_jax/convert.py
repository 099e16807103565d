"""`python -m nat_jax.convert` and `nat-jax-convert`: the command line of nat_jax/commands/convert.py."""
from nat_jax.commands.launch import launch


def console():
  launch('convert')


if __name__ == '__main__':
  console()
