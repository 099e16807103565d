"""`python -m nat_jax.translate`: the command line; it lives in nat_jax/commands/translate.py."""
from nat_jax.commands.translate import console

if __name__ == '__main__':
  console()
