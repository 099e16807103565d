"""`python -m nat_jax.export` and `nat-jax-export`: the command line of nat_jax/commands/export.py."""
from nat_jax.commands.launch import launch


def console():
  launch('export')


if __name__ == '__main__':
  console()
