"""A trained run: its directory (workdir: config, tokenizer, checkpoints; `load_run`), its checkpoints
(checkpoint), the train state and its sharding over a mesh (train_state), what decoders need from outside a
model (resources), what the process holds compiled (compiled), batched translation of text (translation), and
the public `Translator` (translator; `from nat_jax import Translator`)."""
