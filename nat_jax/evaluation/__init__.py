"""Measuring runs: BLEU/chrF scoring, the timing helpers every benchmark uses (warm-up, repeats,
median, block_until_ready) and the benchmark library behind `nat_jax.benchmark` / `nat_jax.evaluate`."""
