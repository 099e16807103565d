"""`python -m nat_jax.dagviz`: the command line; it lives in nat_jax/commands/dagviz.py."""
from nat_jax.commands.dagviz import console

if __name__ == '__main__':
  console()
