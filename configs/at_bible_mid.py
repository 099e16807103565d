"""Mid-size autoregressive teacher on the Bible corpus (en -> de): d=256, 6 encoder / 2 decoder layers.

  python -m nat_jax.train --config=configs/at_bible_mid.py --workdir=runs/at_bible_mid

The largest teacher measured to train on 2 CPU cores within about 2 CPU-hours
(docs/lab-notes/2026-11-26-speed-at-size.md): d=256 (4 heads, d_ff 1024), the depth in the encoder as
RoyalFlush recommends (deep encoder, shallow decoder: the encoder runs once per sentence, the decoder
once per output token), the tiny recipe's vocabulary (4,000 pieces), batches (4,096 tokens) and
buckets. Test decoding: beam 4 over the average of the last 3 checkpoints. Smoke run: add --config.total_steps=30.
"""
from nat_jax.configs import at_bible_tiny


def get_config():
  c = at_bible_tiny.get_config()
  c.model.update(d_model=256, num_heads=4, d_ff=1024, enc_layers=6, dec_layers=2, dropout=0.1)
  c.learning_rate = 1e-3
  c.warmup_steps = 300
  c.total_steps = 1800
  c.cooldown_steps = 720
  c.eval_every = 600
  c.checkpoint_every = 100
  return c
