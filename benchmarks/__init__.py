"""Benchmarks (python -m benchmarks.<name>); importing nat_jax first gives them the CLIs' allocator setting."""
import nat_jax  # noqa: F401  (re-executes `python -m benchmarks.<name>` like nat_jax's own commands)
