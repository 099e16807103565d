"""`python -m nat_jax.evaluate` and `nat-jax-evaluate`: the command line of nat_jax/commands/evaluate.py."""
from nat_jax.commands.launch import launch


def console():
  launch('evaluate')


if __name__ == '__main__':
  console()
