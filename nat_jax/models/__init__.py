"""Flax modules: shared layers, the encoder-decoder Transformer and the DA-Transformer."""
from nat_jax.models.layers import sinusoidal_positions
from nat_jax.models.transformer import DTYPES, Transformer, TransformerConfig, transformer_config
