"""Leaf primitives every layer shares: special token ids and output lengths (`tokens`), attention
masks (`masks`), the DA-Transformer graph primitives (`graph`), per-row windows of batched arrays
(`rows`), the argmax the decoders take every step (`reduce`). Nothing here imports from nat_jax,
so data, models, losses, methods and decoders all import downward from it."""
