"""`python -m nat_jax.ddgviz`: the command line; it lives in nat_jax/commands/ddgviz.py."""
from nat_jax.commands.ddgviz import console

if __name__ == '__main__':
  console()
