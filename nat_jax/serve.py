"""`python -m nat_jax.serve` and `nat-jax-serve`: the command line of nat_jax/commands/serve.py."""
from nat_jax.commands.launch import launch


def console():
  launch('serve')


if __name__ == '__main__':
  console()
