"""`python -m nat_jax.benchmark`: the command line; it lives in nat_jax/commands/benchmark.py."""
from nat_jax.commands.benchmark import console

if __name__ == '__main__':
  console()
