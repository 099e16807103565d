"""`python -m nat_jax.benchmark` and `nat-jax-benchmark`: the command line of nat_jax/commands/benchmark.py."""
from nat_jax.commands.launch import launch


def console():
  launch('benchmark')


if __name__ == '__main__':
  console()
