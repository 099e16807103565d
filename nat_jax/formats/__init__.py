"""Other projects' model formats: a Marian / OPUS-MT model in (marian.py: a Hugging Face snapshot becomes a nat_jax
run) and CTranslate2 out (ct2.py: an autoregressive run exported, and decoded by CTranslate2 for the benchmark)."""
