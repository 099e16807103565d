"""`python -m nat_jax.aot`; the command lives in nat_jax/commands/aot.py (this package's library stays
import-free, so the command chooses JAX's platform before JAX loads)."""
from nat_jax.commands.aot import console

if __name__ == '__main__':
  console()
