"""Ahead-of-time compilation for accelerators we do not have (the library of `python -m nat_jax.aot`).

The TPU compiler (libtpu) and the GPU compiler (the CUDA PJRT plugin) run on a CPU machine against
compile-only devices of a TPU slice or a GPU node, so every program a recipe runs (its train step,
evaluation step and decoders) can be compiled for them, with the compiler's own per-device memory,
cost and collective figures (which benchmarks/projection/roofline.py projects onto the chip's roofline). Install the
compilers with `pip install -e ".[aot]"`.

  targets.py   target names -> compile-only devices and chip figures (memory, peak FLOP/s, bandwidth)
  programs.py  a recipe's programs built abstractly on a target's mesh (train, eval, decode, units)
  analysis.py  compile one program; memory, cost, collectives, host callbacks and transfers
  report.py    compile a recipe's programs, search a batch that fits, tables and JSON
  (the command line: nat_jax/commands/aot.py, run as `python -m nat_jax.aot` by nat_jax/aot.py)

This package imports nothing at import time, so `python -m nat_jax.aot` can choose JAX's platform
before JAX loads.
"""
