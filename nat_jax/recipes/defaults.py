"""A recipe's settings, declared once: each a field with its default, help and rule (nat_jax.settings.setting), in
a frozen dataclass per section. A recipe in configs/ starts from `base_config()` and overrides what differs.

  RunSettings     the top level: training length, batches, optimizer, evaluation, checkpoints, decoders
  ModelSettings   config.model: the encoder-decoder every method builds on (nat_jax.models.transformer reads it)
  DataSettings    config.data: the corpus and how training reads it
  MeshSettings    config.mesh: how the devices are split

A method with settings of its own declares their section beside its code (`nat_jax.methods.dag.DatSettings`,
registered with the method) and the recipe adds it by name: `c.dat = section(DatSettings)` (configs/dat_bible_tiny.py).
The config object itself is an ml_collections ConfigDict (so `--config.<key>=<value>` overrides work); `check_config`
holds every value to its field's rule, and `with_defaults` gives a run's config.json written before a setting
existed that setting's default.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping

import ml_collections

from nat_jax.errors import ConfigError
from nat_jax.models.int8 import PRODUCTS
from nat_jax.models.layers import ACTIVATIONS, POSITION_TIMESCALES
from nat_jax.models.transformer import DTYPES, QUANTIZATIONS
from nat_jax.settings import setting, setting_problem

MAX_LEN = 4096  # tokens per side: attention over more does not fit a batch row's memory
PROBABILITY = dict(low=0, high=1, below=True)  # a rate in [0, 1)


@dataclasses.dataclass(frozen=True)
class ModelSettings:
  method: str = setting('at', 'a name in nat_jax.methods.METHODS; its own settings: the section config.<method>')
  d_model: int = setting(512, 'width of the embeddings and of every layer', low=1)
  num_heads: int = setting(8, 'attention heads (d_model a multiple of it)', low=1)
  d_ff: int = setting(2048, 'inner width of the feed-forward blocks', low=1)
  enc_layers: int = setting(6, 'encoder layers', low=1)
  dec_layers: int = setting(6, 'decoder layers', low=0)
  dropout: float = setting(0.1, 'dropout after attention and feed-forward blocks', **PROBABILITY)
  attention_dropout: float = setting(0.0, 'dropout of the attention weights', **PROBABILITY)
  pre_norm: bool = setting(True, 'LayerNorm before each block (else after it, as Marian)')
  relative_window: int = setting(0, 'key-only relative positions in decoder self-attention within this distance '
                                    '(HRT: 16)', low=1, zero='none')
  dtype: str = setting('float32', 'precision of the activations; parameters and softmax statistics stay float32',
                       choices=tuple(DTYPES))
  quantization: str = setting('none', "of the weight matrices: 'none' to train; a trained run decodes with int8 by "
                                      '--quantization', choices=tuple(QUANTIZATIONS))
  int8_kernel: str = setting('xla', "quantization int8's product, chosen at load (--int8_kernel; "
                                    'nat_jax.kernels.onednn.resolve)', choices=PRODUCTS)
  # What a converted Marian / OPUS-MT teacher sets (python -m nat_jax.convert); these values are every model
  # trained here.
  activation: str = setting('relu', 'of the feed-forward blocks', choices=tuple(ACTIVATIONS))
  position_timescales: str = setting('tensor2tensor', "the sinusoid frequencies: tensor2tensor's, or the "
                                                      "Transformer paper's (vaswani)",
                                     choices=tuple(POSITION_TIMESCALES))
  scale_embedding: bool = setting(True, 'token embeddings times sqrt(d_model)')
  attention_bias: bool = setting(False, 'biases on the attention projections')
  output_bias: bool = setting(False, 'a bias on the output logits')
  layer_norm_epsilon: float = setting(1e-6, "LayerNorm's epsilon (Marian: 1e-5)", low=0)


@dataclasses.dataclass(frozen=True)
class DataSettings:
  source: str = setting('bible', "'bible' (the built-in corpus), 'files' or 'tfds' (nat_jax.data.sources)")
  pair: str = setting('en-de', "the Bible corpus's language pair")
  train_files: str = setting('', "source 'files': the training pairs")
  validation_files: str = setting('', "source 'files': the validation pairs")
  test_files: str = setting('', "source 'files': the test pairs")
  tfds_name: str = setting('', "source 'tfds': the dataset's name")
  source_lang: str = setting('en', 'the source side of a files or tfds corpus')
  target_lang: str = setting('de', 'the target side of a files or tfds corpus')
  tfds_data_dir: str = setting('', "source 'tfds': where the prepared dataset is")
  max_examples: int = setting(0, 'the first N training pairs', low=1, zero='all')
  distill_dir: str = setting('', 'a `python -m nat_jax.distill --out` directory: train on its teacher translations')
  raw_prob: float = setting(0.0, 'with distill_dir: the probability that a pair keeps its raw reference (per use)',
                            low=0, high=1)
  pack: int = setting(0, 'training rows hold up to this many pairs (segment ids; AT, CMLM, HRT, IBDecoder)', low=1,
                      zero='one pair per row')


@dataclasses.dataclass(frozen=True)
class MeshSettings:
  model_parallel: int = setting(1, "devices per model replica (the mesh's model axis)", low=1)


@dataclasses.dataclass(frozen=True)
class RunSettings:
  seed: int = setting(0, 'of the initialisation, dropout and the batch order', low=0)
  total_steps: int = setting(10_000, 'updates', low=1)
  init_from: str = setting('', 'workdir of a trained run: start from its latest params (same tokenizer), fresh '
                               'optimizer')
  tokenizer_from: str = setting('', "workdir of a run whose tokenizer this one uses (e.g. a converted OPUS-MT "
                                    "teacher's)")
  vocab_size: int = setting(8000, 'sentencepiece pieces', low=16)
  max_len: int = setting(128, 'tokens per side incl. EOS; longer training pairs are dropped (and counted)', low=8,
                         high=MAX_LEN)
  max_decode_len: int = setting(256, 'decoder cache bound (per batch: min(this, 1.5 x source width + 10))', low=1,
                                high=MAX_LEN)
  tokens_per_batch: int = setting(4096, 'global batch budget (rows x padded length), at least max_len', low=8)
  num_buckets: int = setting(4, 'compiled (rows, length) shapes', low=1)
  grad_accum_steps: int = setting(1, 'micro-batches per update', low=1)
  learning_rate: float = setting(5e-4, "peak learning rate (0: frozen; Adam's steps are about this size, so a "
                                       'larger one diverges)', low=0, high=1)
  warmup_steps: int = setting(4000, 'linear warm-up, then inverse square root decay', low=0)
  cooldown_steps: int = setting(0, 'the learning rate decays linearly to 0 over the last N updates', low=1,
                                zero='none')
  adam_b1: float = setting(0.9, "Adam's beta1", **PROBABILITY)
  adam_b2: float = setting(0.98, "Adam's beta2", **PROBABILITY)
  weight_decay: float = setting(0.0, 'decoupled weight decay', low=0, high=1)
  clip_norm: float = setting(1.0, 'global gradient-norm clip (0: none)', low=0)
  label_smoothing: float = setting(0.1, "of the token-level cross-entropy (the DAG losses of 'dat' have none)",
                                   **PROBABILITY)
  log_every: int = setting(50, 'updates between metric lines', low=1)
  eval_every: int = setting(1000, 'updates between validation BLEU', low=1)
  checkpoint_every: int = setting(1000, 'updates between checkpoints', low=1)
  keep_checkpoints: int = setting(3, 'latest checkpoints kept', low=1)
  keep_best: int = setting(1, 'best-BLEU checkpoints kept', low=1)
  eval_decoder: str = setting('greedy', 'the decoder of validation BLEU')
  eval_max_sentences: int = setting(0, 'validation BLEU on the first N sentences', low=1, zero='all')
  test_decoder: str = setting('beam', 'the decoder of the final test evaluation')
  default_decoder: str = setting('', "what translate / serve / Translator use without --decoder ('': greedy where "
                                     'the method decodes left to right, else test_decoder)')
  decoder_defaults: Mapping = dataclasses.field(default_factory=dict, metadata={
      'help': "{decoder: {option: value}}: this run's option defaults (a converted OPUS-MT run's generation "
              'settings)'})
  test_average: int = setting(1, 'average the last N checkpoints for the final test evaluation', low=1)
  decode_batch_size: int = setting(64, 'sentences per batch of validation and test decoding', low=1)
  num_samples: int = setting(5, 'validation translations printed at each evaluation', low=0)
  compilation_cache_dir: str = setting('~/.cache/nat_jax/jax', "JAX's persistent compilation cache ('': none)")


SECTIONS = {'model': ModelSettings, 'data': DataSettings, 'mesh': MeshSettings}  # config.<name>; the rest: RunSettings


def defaults(declared: type) -> dict:
  """{setting: its default} of a settings dataclass."""
  return dataclasses.asdict(declared())


def section(declared: type) -> ml_collections.ConfigDict:
  """The defaults of a settings dataclass as a config section."""
  return ml_collections.ConfigDict(defaults(declared))


def base_config() -> ml_collections.ConfigDict:
  """Every recipe's starting point: each declared setting at its default."""
  c = section(RunSettings)
  for name, declared in SECTIONS.items():
    c[name] = section(declared)
  return c


def check_section(values: Mapping, declared: type, where: str = ''):
  """ConfigError naming `config.<where><key>` for a key `declared` lacks or misses, or a value that breaks its
  rule."""
  fields = {f.name: f for f in dataclasses.fields(declared)}
  unknown, missing = sorted(set(values.keys()) - set(fields)), sorted(set(fields) - set(values.keys()))
  if unknown or missing:
    raise ConfigError(f'config{"." + where.rstrip(".") if where else ""}: unknown keys {unknown}, missing keys '
                      f'{missing}; its keys are those of {declared.__module__}.{declared.__name__}: {sorted(fields)}.')
  for name, field in fields.items():
    problem = 'rule' in field.metadata and setting_problem(f'config.{where}{name}', values[name], field)
    if problem:
      raise ConfigError(problem)


def check_config(config, method_sections: Mapping[str, type] = {}):
  """Every value of `config` held to its declared rule (the top level, model, data, mesh and the method sections
  named in `method_sections`, {name: dataclass}); ConfigError naming the first that breaks one."""
  top = {k: v for k, v in config.items() if k not in SECTIONS and k not in method_sections}
  check_section(top, RunSettings)
  for name, declared in {**SECTIONS, **method_sections}.items():
    if name in config:
      check_section(config[name], declared, f'{name}.')


def with_defaults(raw: dict, method_sections: Mapping[str, type] = {}) -> dict:
  """A parsed config.json with each declared setting it lacks (written before that setting existed) at its
  default; the keys it has as they are."""
  out = {**defaults(RunSettings), **raw}
  for name, declared in {**SECTIONS, **method_sections}.items():
    if isinstance(raw.get(name), dict):
      out[name] = {**defaults(declared), **raw[name]}
  return out
