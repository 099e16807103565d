"""`python -m nat_jax.train`: the command line; it lives in nat_jax/commands/train.py."""
from nat_jax.commands.train import console

if __name__ == '__main__':
  console()
