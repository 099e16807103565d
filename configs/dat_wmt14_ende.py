"""DA-Transformer on WMT14 En-De, the papers' setting (docs/methods/dat.md): NLL pre-training with glancing.

  python -m nat_jax.train --config=configs/dat_wmt14_ende.py --workdir=runs/dat_wmt14_ende

Needs tfds' wmt14_translate/de-en prepared once (network) as array_record in data.tfds_data_dir.
6+6 layers, d=512, graph of 8 x source length, lr 5e-4 with 10k inverse-sqrt warm-up, clip-norm
0.1, weight decay 0.01, dropout 0.1, ~64k tokens per update, 300k updates, glancing 0.5 -> 0.1.
Reported (raw data): DA-Transformer lookahead 26.57 BLEU at 13.9x AT-beam speed.
Then: configs/fadat_wmt14_ende.py.
"""
from nat_jax.methods import dag
from nat_jax.recipes.defaults import base_config, section


def get_config():
  c = base_config()
  c.model.update(method='dat', d_model=512, num_heads=8, d_ff=2048, enc_layers=6, dec_layers=6, dropout=0.1,
                 dtype='bfloat16')
  c.dat = section(dag.DatSettings)
  c.dat.update(upsample_scale=8.0, loss='nll', glance_start=0.5, glance_end=0.1, glance_steps=0)
  c.data.update(source='tfds', tfds_name='wmt14_translate/de-en', source_lang='en', target_lang='de')
  c.vocab_size = 32000
  c.max_len = 128
  c.max_decode_len = 256
  c.tokens_per_batch = 16384
  c.grad_accum_steps = 4     # 4 x 16k = ~64k tokens per update
  c.num_buckets = 4
  c.learning_rate = 5e-4
  c.warmup_steps = 10_000
  c.total_steps = 300_000
  c.clip_norm = 0.1
  c.weight_decay = 0.01
  c.eval_every = 5000
  c.checkpoint_every = 5000
  c.eval_max_sentences = 1000
  c.eval_decoder = 'dag_lookahead'
  c.test_decoder = 'dag_lookahead'
  c.test_average = 5
  return c
