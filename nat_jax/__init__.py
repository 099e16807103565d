"""nat_jax: fast machine translation in JAX/Flax."""
import sys

if sys.argv[:1] == ['-m']:  # Python is locating a `python -m nat_jax.<command>` (or benchmarks.<name>) module
  from nat_jax import hugepages
  hugepages.reexec_command_line()  # returns only when the process keeps running as started
  del sys.modules['nat_jax.hugepages']  # `python -m nat_jax.hugepages` then runs as a fresh __main__
