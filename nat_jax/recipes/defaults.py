"""Defaults shared by every recipe in configs/; a recipe overrides what differs.

Only what every method shares lives here. A method with options of its own (e.g. 'dat') has a
section named after it whose defaults come from its module (`nat_jax.methods.dag.default_config`);
the recipe copies that section in (`c.dat = dag.default_config()`), see configs/dat_bible_tiny.py.
"""
from __future__ import annotations

import ml_collections


def base_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.total_steps = 10_000

  c.model = ml_collections.ConfigDict(dict(  # the encoder-decoder every method builds on
      method='at',                # a name in nat_jax.methods.METHODS; its own options: the section c.<method>
      d_model=512, num_heads=8, d_ff=2048, enc_layers=6, dec_layers=6, dropout=0.1,
      attention_dropout=0.0, pre_norm=True, relative_window=0,
      dtype='float32',      # of the activations (float32, bfloat16, float16); parameters stay float32
      quantization='none',  # of the weight matrices: 'none' to train; a trained run decodes with int8 by --quantization
      # What a converted Marian / OPUS-MT teacher sets (python -m nat_jax.convert); these values are every
      # model trained here: nat_jax.models.transformer.TransformerConfig says what each one means.
      activation='relu', position_timescales='tensor2tensor', scale_embedding=True, attention_bias=False,
      output_bias=False, layer_norm_epsilon=1e-6))
  c.init_from = ''           # workdir of a trained run: start from its latest params (same tokenizer), fresh optimizer
  c.tokenizer_from = ''      # workdir of a run whose tokenizer this one uses (e.g. a converted OPUS-MT teacher's)

  c.data = ml_collections.ConfigDict(dict(
      source='bible', pair='en-de', train_files='', validation_files='', test_files='', tfds_name='',
      source_lang='en', target_lang='de', tfds_data_dir='', max_examples=0,
      distill_dir='',   # a `python -m nat_jax.distill --out` directory: train on its teacher translations
      raw_prob=0.0,     # with distill_dir: probability that a pair keeps its raw reference (per use)
      pack=0))          # >0: training rows hold up to this many pairs (segment ids; AT, CMLM, HRT, IBDecoder)
  c.vocab_size = 8000
  c.max_len = 128            # tokens per side incl. EOS; longer training pairs are dropped (and counted)
  c.max_decode_len = 256     # decoder cache bound (per batch: min(this, 1.5 * source width + 10))
  c.tokens_per_batch = 4096  # global batch budget (rows * padded length)
  c.num_buckets = 4          # compiled (rows, length) shapes
  c.grad_accum_steps = 1

  c.learning_rate = 5e-4
  c.warmup_steps = 4000
  c.cooldown_steps = 0       # >0: lr decays linearly to 0 over the last cooldown_steps of total_steps
  c.adam_b1 = 0.9
  c.adam_b2 = 0.98
  c.weight_decay = 0.0
  c.clip_norm = 1.0
  c.label_smoothing = 0.1     # of the token-level cross-entropy (the DAG losses of 'dat' have none)

  c.mesh = ml_collections.ConfigDict(dict(model_parallel=1))
  c.log_every = 50
  c.eval_every = 1000
  c.checkpoint_every = 1000
  c.keep_checkpoints = 3
  c.keep_best = 1
  c.eval_decoder = 'greedy'
  c.eval_max_sentences = 0   # validation BLEU on the first N sentences (0 = all)
  c.test_decoder = 'beam'
  c.default_decoder = ''     # what translate / serve / Translator use without --decoder ('': greedy where the method
                             # decodes left to right, else test_decoder)
  c.decoder_defaults = ml_collections.ConfigDict()  # {decoder: {option: value}}: this run's option defaults
  c.test_average = 1         # average the last N checkpoints for the final test evaluation
  c.decode_batch_size = 64
  c.num_samples = 5
  c.compilation_cache_dir = '~/.cache/nat_jax/jax'  # '' disables JAX's persistent compilation cache
  return c
