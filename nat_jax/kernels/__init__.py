"""Native kernels that XLA calls through `jax.ffi`, each with the pure-JAX computation it equals beside its
caller: onednn (int8 matrix products on x86-64 CPUs, nat_jax/kernels/int8_onednn.cc)."""
