"""Flax modules: shared layers and the encoder-decoder Transformer."""
from nat_jax.models.layers import NEG_INF, sinusoidal_positions
from nat_jax.models.transformer import Transformer, TransformerConfig
