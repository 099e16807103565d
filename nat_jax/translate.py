"""`python -m nat_jax.translate` and `nat-jax-translate`: the command line of nat_jax/commands/translate.py."""
from nat_jax.commands.launch import launch


def console():
  launch('translate')


if __name__ == '__main__':
  console()
