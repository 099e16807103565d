"""`python -m nat_jax.aot` and `nat-jax-aot`: the command line of nat_jax/commands/aot.py."""
from nat_jax.commands.launch import launch


def console():
  launch('aot')


if __name__ == '__main__':
  console()
