"""`python -m nat_jax.train` and `nat-jax-train`: the command line of nat_jax/commands/train.py."""
from nat_jax.commands.launch import launch


def console():
  launch('train')


if __name__ == '__main__':
  console()
