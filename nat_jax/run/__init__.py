"""A trained run: its directory (workdir: config, tokenizer, checkpoints; `load_run`), checkpoints, the
train state and its sharding over a mesh, TensorBoard summaries, batched translation of text, and the
public `Translator` (`from nat_jax import Translator`)."""
