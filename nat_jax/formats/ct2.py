"""CTranslate2 models of our autoregressive runs: the conversion (`export_ctranslate2`, the command
line is nat_jax.export) and decoding with an exported model (`Ct2Translator`, the benchmark's peer rows).

Needs the `ct2` extra (pip install -e .[ct2]). Only method 'at' maps: a standard encoder-decoder
left-to-right Transformer (pre- or post-norm; trained here, or an OPUS-MT model converted by
nat_jax.convert); every other method is a ConfigError naming what has no CTranslate2 counterpart
(`check_exportable`). --out must not exist or be an empty directory; the model is written to a
temporary directory next to it, loaded once by ctranslate2.Translator, and only then renamed to
--out, so a failed export leaves nothing behind. --out then holds:

  model.bin, config.json, shared_vocabulary.json   CTranslate2's files (TransformerSpec)
  spm.model                                        the run's sentencepiece model (a converted run:
                                                   vocabulary.json, source.spm, target.spm)
  nat_jax_export.json                              what nat_jax knows about the run (bounds, options)

How the model maps (every choice is checked token for token against our decoders, tests/integration/test_export.py):
- One vocabulary, ids one to one: the tokenizer's pieces in id order (PAD 0, EOS 1, BOS 2, UNK 3,
  MASK 4, ...); unk/bos/eos are our pieces, the decoder starts from BOS (a converted run's BOS is
  Marian's decoder start).
- The source is ids + EOS, truncated to config.max_len keeping EOS last (translation.encode_sources):
  config.add_source_eos = true, so translate pieces *without* EOS and pass
  max_input_length=config.max_len.
- Embeddings scaled by sqrt(d_model) (model.scale_embedding); positions from an explicit table of our
  `sinusoidal_positions` with the run's model.position_timescales (rows 0 .. POSITION_ROWS - 1;
  CTranslate2's built-in sinusoids start at position 1, ours at 0); the output projection is the
  embedding matrix, with model.output_bias where the run has one; the FFN's activation
  (model.activation: relu, swish or erf-gelu) with biases; attention projections (ours are
  [D, H, Dh] kernels: fused q|k|v for self-attention, q and fused k|v for cross-attention, heads
  contiguous as in ours) with biases where model.attention_bias; the run's layer-norm epsilon;
  pre-norm with the final encoder/decoder norms, or post-norm without them.
- Decoding options that reproduce ours: min_decoding_length=0 (CTranslate2's default 1 forbids EOS
  first), max_decoding_length = our bound for the padded source width S,
  min(config.max_decode_len, 1.5 S + 10) (core.tokens.decode_length_bound), return_end_token=True.
  Greedy (beam_size=1) equals our `greedy`; beam with length_penalty=0 equals our `beam` with
  alpha=0 (CTranslate2 scores logp / L^length_penalty, our GNMT penalty ((5 + L) / 6)^alpha has no
  counterpart for alpha > 0). One difference remains at the length bound: when a beam search
  reaches it, CTranslate2 ranks the unfinished hypotheses with the finished ones, ours prefers a
  finished one.

Library use (the benchmark): `Ct2Translator(out_dir)` decodes our inference batches (src i32[B, S],
as translation.translate_texts makes them) into our output format, and `Ct2Translator.decode_fn`
is a drop-in `(params, src) -> DecodeOutput` for translate_texts and the benchmark's timing.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
from typing import Any, Callable, Optional

import numpy as np

from nat_jax.core.tokens import BOS_ID, EOS_ID, LENGTH_MARGIN, LENGTH_RATIO, UNK_ID, decode_length_bound
from nat_jax.decode import options as options_lib
from nat_jax.decode.options import Options, Rule, choice, hypotheses, option
from nat_jax.errors import ConfigError
from nat_jax.files import write_atomic
from nat_jax.run.workdir import CONFIG_FILE, read_run_config
from nat_jax.views import DecodeOutput

FORMATS = ('ctranslate2',)
# CTranslate2's weight types, less bfloat16 and int8_bfloat16 (its converter needs torch for those).
QUANTIZATIONS = ('float32', 'int8', 'int8_float32', 'int8_float16', 'int16', 'float16')
METADATA_FILE = 'nat_jax_export.json'
POSITION_ROWS = 1024  # rows of the position table: CTranslate2's default max_input_length (at least the run's bounds)
INSTALL_HINT = 'pip install -e .[ct2] (or pip install "ctranslate2>=4.5")'

# Why each method other than 'at' has no CTranslate2 model, and what to do instead.
UNSUPPORTED = {
    'dat': ("a DA-Transformer decodes a directed acyclic graph: upsampled vertex queries, a transition "
            "(link) head between vertices and a path search over the graph; CTranslate2 has only "
            "left-to-right token decoders"),
    'cmlm': ("a CMLM predicts the target length with a length head, then fills masked slots with a "
             "non-causal decoder over several Mask-Predict passes; CTranslate2 has only left-to-right "
             "token decoders"),
    'hrt': ("HRT's decoder self-attention adds key-only relative position tables to absolute sinusoidal "
            "positions (CTranslate2's relative positions replace absolute ones and carry key and value "
            "tables), starts Skip-AT from the input-only token <B_k> and fills chunks with a Skip-CMLM pass"),
    'ibdecoder': ("the IBDecoder family writes z = h x c interleaved slots per step (block-causal "
                  "self-attention, slot positions counted from both ends, direction embeddings for h > 2) "
                  "and reorders them into text; CTranslate2 writes one token per step left to right"),
    'selfdraft': ("a self-drafting run adds a draft head to a frozen AT verifier; CTranslate2 has no "
                  "drafted decoding"),
}
ADVICE = {
    'selfdraft': 'export the AT run it was trained from (its config.init_from), whose parameters its verifier keeps',
}
DEFAULT_ADVICE = ("train (or distill into) an autoregressive run (model.method='at', e.g. "
                  "--config=at_bible_tiny) and export that")


# --- what maps -------------------------------------------------------------------------------------
def unsupported_reason(config) -> Optional[str]:
  """Why the run of `config` (its ConfigDict) has no CTranslate2 model, or None when it maps."""
  method = config.model.method
  if method != 'at':
    reason = UNSUPPORTED.get(method, 'only method \'at\' (a left-to-right Transformer) maps to CTranslate2')
    return (f'cannot export model.method={method!r} to CTranslate2: {reason}. What to do: '
            f'{ADVICE.get(method, DEFAULT_ADVICE)}.')
  if config.model.relative_window:
    return (f'cannot export this run to CTranslate2: model.relative_window={config.model.relative_window} adds '
            'key-only relative position tables to the absolute sinusoidal positions in decoder self-attention; '
            'CTranslate2\'s relative positions replace absolute ones and carry key and value tables. What to do: '
            'export a run trained with model.relative_window=0.')
  return None


def check_exportable(config):
  """ConfigError (what does not map, what to do) unless the run of `config` exports to CTranslate2."""
  reason = unsupported_reason(config)
  if reason:
    raise ConfigError(reason)


def require_ctranslate2():
  """The ctranslate2 module, or a ConfigError saying how to install it."""
  try:
    import ctranslate2
  except ImportError as e:
    raise ConfigError(f'exporting to CTranslate2 needs the ctranslate2 package ({e}): {INSTALL_HINT}.') from None
  return ctranslate2


def vocabulary_pieces(tokenizer) -> list[str]:
  """The pieces of a run's tokenizer in id order (its joint sentencepiece model's, or a converted run's
  vocabulary): CTranslate2's vocabulary, ids one to one."""
  pieces = list(tokenizer.pieces)
  if len(set(pieces)) != len(pieces):
    raise ConfigError(f'the tokenizer {tokenizer.model_path!r} has repeated pieces; its ids cannot map '
                      'one to one to a CTranslate2 vocabulary.')
  return pieces


def sinusoid_table(rows: int, dim: int, timescales: str) -> np.ndarray:
  """f32[rows, dim]: our sinusoidal embedding of positions 0 .. rows - 1 (models.layers.sinusoidal_positions)."""
  import jax.numpy as jnp

  from nat_jax.models.layers import sinusoidal_positions
  return np.asarray(sinusoidal_positions(jnp.arange(rows), dim, timescales), np.float32)


def _f32(x) -> np.ndarray:
  """A writable float32 copy (ctranslate2 quantizes in place; arrays from JAX are read-only)."""
  return np.array(x, np.float32, order='C')


def _heads_in(kernel) -> np.ndarray:
  """A q/k/v kernel [D, H, Dh] -> CTranslate2's weight [H*Dh, D] (output rows head after head)."""
  kernel = np.asarray(kernel, np.float32)
  return _f32(kernel.reshape(kernel.shape[0], -1).T)


def _heads_out(kernel) -> np.ndarray:
  """An output kernel [H, Dh, D] -> CTranslate2's weight [D, H*Dh]."""
  kernel = np.asarray(kernel, np.float32)
  return _f32(kernel.reshape(-1, kernel.shape[-1]).T)


def _layer_norm(spec, p):
  spec.gamma, spec.beta = _f32(p['scale']), _f32(p['bias'])


def _ffn(spec, p, norm):
  _layer_norm(spec.layer_norm, norm)
  spec.linear_0.weight, spec.linear_0.bias = _f32(_f32(p['wi']['kernel']).T), _f32(p['wi']['bias'])  # [F, D]
  spec.linear_1.weight, spec.linear_1.bias = _f32(_f32(p['wo']['kernel']).T), _f32(p['wo']['bias'])  # [D, F]


def _projections(linear, p, groups):
  """CTranslate2's attention linears from ours: `groups` ((our projection names fused into one linear), ...),
  the output projection last; biases where the run has them (model.attention_bias: a converted Marian)."""
  for spec, names in zip(linear, groups):
    if names == ('out',):
      spec.weight = _heads_out(p['out']['kernel'])  # [D, H*Dh]
    else:
      spec.weight = np.concatenate([_heads_in(p[k]['kernel']) for k in names])  # [len(names) * D, D]
    if 'bias' in p[names[0]]:
      spec.bias = _f32(np.concatenate([np.reshape(p[k]['bias'], -1) for k in names]))


def _self_attention(spec, p, norm):
  _layer_norm(spec.layer_norm, norm)
  _projections(spec.linear, p, (('query', 'key', 'value'), ('out',)))


def _cross_attention(spec, p, norm):
  _layer_norm(spec.layer_norm, norm)
  _projections(spec.linear, p, (('query',), ('key', 'value'), ('out',)))


def transformer_spec(params, model_cfg, pieces: list[str], position_rows: int = POSITION_ROWS):
  """A ctranslate2 TransformerSpec holding an AT's parameters (unboxed, as load_run gives them).

  model_cfg: the run's nat_jax.models.transformer.TransformerConfig (method.model.cfg)."""
  from ctranslate2.specs import common_spec
  from ctranslate2.specs import transformer_spec as ts
  c = model_cfg
  activation = {'relu': common_spec.Activation.RELU, 'swish': common_spec.Activation.SWISH,
                'gelu': common_spec.Activation.GELU}[c.activation]  # GELU: the erf form, as ours
  spec = ts.TransformerSpec.from_config((c.enc_layers, c.dec_layers), c.num_heads, pre_norm=c.pre_norm,
                                        activation=activation)
  spec.config.layer_norm_epsilon = c.layer_norm_epsilon
  spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = pieces[UNK_ID], pieces[BOS_ID], pieces[EOS_ID]
  spec.config.decoder_start_token = pieces[BOS_ID]
  spec.config.add_source_bos, spec.config.add_source_eos = False, True  # our sources: ids + EOS

  embedding = _f32(params['embed']['embedding'])  # [V, D]: input embeddings of both sides and the output projection
  positions = sinusoid_table(max(position_rows, 1), c.d_model, c.position_timescales)  # [rows, D]
  enc, dec = spec.encoder, spec.decoder
  # Each variable its own copy (ctranslate2 quantizes in place); spec.optimize stores the equal ones once.
  enc.embeddings[0].weight, enc.position_encodings.encodings = _f32(embedding), _f32(positions)
  dec.embeddings.weight, dec.position_encodings.encodings = _f32(embedding), _f32(positions)
  dec.projection.weight = _f32(embedding)  # tied
  if c.output_bias:
    dec.projection.bias = _f32(params['output_bias'])  # [V]
  enc.scale_embeddings = dec.scale_embeddings = c.scale_embedding  # x sqrt(d_model), as models.layers.Embed
  if c.pre_norm:
    _layer_norm(enc.layer_norm, params['encoder_norm'])
    _layer_norm(dec.layer_norm, params['decoder_norm'])
  for i, layer in enumerate(enc.layer):
    p = params[f'encoder_{i}']
    _self_attention(layer.self_attention, p['self_attention'], p['norm_attention'])
    _ffn(layer.ffn, p['ffn'], p['norm_ffn'])
  for i, layer in enumerate(dec.layer):
    p = params[f'decoder_{i}']
    _self_attention(layer.self_attention, p['self_attention'], p['norm_self'])
    _cross_attention(layer.attention, p['cross_attention'], p['norm_cross'])
    _ffn(layer.ffn, p['ffn'], p['norm_ffn'])
  spec.register_source_vocabulary(pieces)
  spec.register_target_vocabulary(pieces)
  return spec


def export_ctranslate2(run, out_dir: str, quantization: str = 'float32', source: str = '') -> str:
  """Write `run` (a nat_jax.run.workdir.Run, or any object with config, method, params, tokenizer, meta) as a
  CTranslate2 model directory `out_dir` (must not exist, or be empty); returns out_dir.

  Built in `<out_dir>.tmp<pid>`, loaded once by ctranslate2.Translator, then renamed: a failure leaves
  nothing at out_dir. `source` (the workdir) is recorded in nat_jax_export.json."""
  ctranslate2 = require_ctranslate2()
  check_exportable(run.config)
  check_out_dir(out_dir)
  if quantization not in QUANTIZATIONS:
    raise ConfigError(f'--quantization={quantization}: one of {list(QUANTIZATIONS)}.')
  from flax import linen as nn
  params = nn.meta.unbox(run.params)
  pieces = vocabulary_pieces(run.tokenizer)
  model_cfg = run.method.model.cfg
  if len(pieces) != np.shape(params['embed']['embedding'])[0]:
    raise ConfigError(f'the tokenizer has {len(pieces)} pieces but the model embeds '
                      f'{np.shape(params["embed"]["embedding"])[0]} tokens; export needs the run\'s own tokenizer.')
  cfg = run.config
  rows = max(POSITION_ROWS, cfg.max_len, cfg.max_decode_len)
  spec = transformer_spec(params, model_cfg, pieces, rows)
  for path in run.tokenizer.files:
    spec.register_file(path, os.path.basename(path))
  spec.validate()
  spec.optimize(quantization=quantization)

  out_dir = os.path.abspath(out_dir)
  tmp = f'{out_dir}.tmp{os.getpid()}'
  shutil.rmtree(tmp, ignore_errors=True)
  try:
    os.makedirs(tmp)
    spec.save(tmp)
    meta = run.meta[0] if run.meta else {}
    metadata = {
        'format': 'ctranslate2', 'ctranslate2_version': ctranslate2.__version__, 'quantization': quantization,
        'workdir': os.path.abspath(source) if source else '', 'step': (meta or {}).get('step'),
        'method': cfg.model.method, 'vocab_size': len(pieces),
        'tokenizer': [os.path.basename(path) for path in run.tokenizer.files],
        'max_len': int(cfg.max_len), 'max_decode_len': int(cfg.max_decode_len),
        'length_bound': f'min(max_decode_len, int({LENGTH_RATIO} * padded source width) + {LENGTH_MARGIN})',
        'position_rows': rows,
        'translate_options': {'min_decoding_length': 0, 'max_input_length': int(cfg.max_len),
                              'max_decoding_length': 'length_bound', 'return_end_token': True,
                              'length_penalty': '0 with beam_size > 1 (= our beam with alpha=0)'},
        'source_pieces': ('sentencepiece pieces of the text without EOS (config.json add_source_eos adds it); a '
                          'converted run: source.spm\'s pieces after the vocabulary.json prefix (a language tag)'),
    }
    write_atomic(os.path.join(tmp, METADATA_FILE), json.dumps(metadata, indent=2, default=str) + '\n')
    ctranslate2.Translator(tmp, device='cpu')  # it loads: a broken export never lands at out_dir
    if os.path.isdir(out_dir):
      os.rmdir(out_dir)  # empty (check_out_dir)
    os.makedirs(os.path.dirname(out_dir), exist_ok=True)
    os.rename(tmp, out_dir)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  return out_dir


def check_out_dir(out_dir: str):
  """ConfigError unless `out_dir` is absent or an empty directory."""
  if os.path.exists(out_dir) and not os.path.isdir(out_dir):
    raise ConfigError(f'--out={out_dir} is a file; give a new (or empty) directory.')
  if os.path.isdir(out_dir) and os.listdir(out_dir):
    raise ConfigError(f'--out={out_dir} exists and is not empty; give a new directory (or remove it first).')


def run_config(workdir: str):
  """The run's config from its config.json, or None when there is none (load_run says why)."""
  path = os.path.join(workdir, CONFIG_FILE)
  return read_run_config(path) if os.path.isfile(path) else None


# --- decoding with an exported model -------------------------------------------------------------
class Ct2Translator:
  """An exported model decoding our inference batches, in our output format.

    fn = Ct2Translator('exports/at_ct2', compute_type='int8', intra_threads=2)
    tokens = fn(src)                      # src i32[B, S] -> i32[B, T], T = the length bound for S
    translate_texts(run, texts, fn.decode_fn(), rows)  # drop-in for our (params, src) -> DecodeOutput

  src rows are as translation.encode_sources / inference_batches make them: ids + EOS, then 0; the
  final EOS is dropped before CTranslate2 sees the pieces (its config adds it back); rows without
  tokens (batch padding) give all-zero outputs and are not decoded. Output rows: text ids, EOS, then 0
  (no EOS where the bound was reached). beam_size 1 is greedy; length_penalty is CTranslate2's
  (logp / L^lp; 0 = our beam with alpha=0); max_len > 0 replaces the bound (as our decoders' max_len).
  """

  def __init__(self, model_dir: str, *, device: str = 'cpu', compute_type: str = 'default',
               intra_threads: int = 0, inter_threads: int = 1, beam_size: int = 1, length_penalty: float = 0.0,
               max_len: int = 0, length_bound: Optional[Callable[[int], int]] = None):
    ctranslate2 = require_ctranslate2()
    with open(os.path.join(model_dir, 'shared_vocabulary.json'), encoding='utf-8') as f:
      self.pieces: list[str] = json.load(f)  # id -> piece
    self.ids = {p: i for i, p in enumerate(self.pieces)}  # piece -> id
    meta_path = os.path.join(model_dir, METADATA_FILE)
    if not os.path.isfile(meta_path):
      raise ConfigError(f'{model_dir!r} has no {METADATA_FILE}: not written by nat_jax.export.')
    with open(meta_path, encoding='utf-8') as f:
      self.metadata: dict[str, Any] = json.load(f)
    self.translator = ctranslate2.Translator(model_dir, device=device, compute_type=compute_type,
                                             intra_threads=intra_threads, inter_threads=inter_threads)
    self.beam_size, self.length_penalty, self.max_len = beam_size, length_penalty, max_len
    max_decode_len = self.metadata['max_decode_len']
    self.length_bound = length_bound or (lambda width: decode_length_bound(max_decode_len, width))

  def __call__(self, src) -> np.ndarray:
    """src i32[B, S] (ids + EOS, 0-padded) -> tokens i32[B, T]: text ids, EOS, then 0."""
    src = np.asarray(src)
    bound = self.max_len if self.max_len > 0 else self.length_bound(src.shape[1])
    out = np.zeros((src.shape[0], bound), np.int32)  # [B, T]
    lengths = np.sum(src > 0, axis=1)  # [B]
    rows = [r for r in range(src.shape[0]) if lengths[r]]
    if not rows:
      return out
    batch = []
    for r in rows:
      ids = src[r, :lengths[r]]
      if ids[-1] == EOS_ID:
        ids = ids[:-1]
      batch.append([self.pieces[i] for i in ids])
    results = self.translator.translate_batch(
        batch, beam_size=self.beam_size, length_penalty=self.length_penalty, num_hypotheses=1,
        max_input_length=0, max_decoding_length=bound, min_decoding_length=0, return_end_token=True)
    for r, result in zip(rows, results):
      ids = [self.ids[p] for p in result.hypotheses[0]][:bound]
      out[r, :len(ids)] = ids
    return out

  def decode_fn(self) -> Callable[[Any, Any], DecodeOutput]:
    """(params (ignored), src i32[B, S]) -> DecodeOutput(tokens i32[B, T], scores f32[B] zeros,
    aux {'steps': i32[B] tokens incl. EOS}): what translation.translate_texts and the benchmark call."""
    def fn(params, src):
      tokens = self(src)
      steps = np.sum(tokens > 0, axis=1).astype(np.int32)
      return DecodeOutput(tokens, np.zeros(tokens.shape[0], np.float32), {'steps': steps})
    return fn


def ct2_decode_fn(model_dir: str, beam_size: int = 1, *, compute_type: str = 'default', intra_threads: int = 0,
                  device: str = 'cpu', length_penalty: float = 0.0, max_len: int = 0,
                  length_bound: Optional[Callable[[int], int]] = None) -> Callable[[Any, Any], DecodeOutput]:
  """(params, src i32[B, S]) -> DecodeOutput of the exported model in `model_dir` (Ct2Translator.decode_fn):
  the same call as a decoder from nat_jax.decode.build_decoder, so the benchmark times and scores it alike."""
  return Ct2Translator(model_dir, device=device, compute_type=compute_type, intra_threads=intra_threads,
                       beam_size=beam_size, length_penalty=length_penalty, max_len=max_len,
                       length_bound=length_bound).decode_fn()


# --- peer rows of the benchmark: the run served by CTranslate2 ------------------------------------
@dataclasses.dataclass(frozen=True)
class PeerOptions(Options):
  quantization: str = choice('float32', "the export's weight type (compute type: CTranslate2's default for it on the "
                                        'device)', QUANTIZATIONS)
  threads: int = option(0, "CTranslate2's intra_threads",
                        Rule(1, zero='every core', words='0 (every core) or a number of threads'))


@dataclasses.dataclass(frozen=True)
class PeerBeamOptions(PeerOptions):
  beam_size: int = hypotheses(4, 'hypotheses kept per sentence')


# ct2_beam scores as our `beam` with alpha=0 does (length_penalty 0; our GNMT alpha > 0 has no CTranslate2
# counterpart).
PEERS: dict[str, type] = {'ct2_greedy': PeerOptions, 'ct2_beam': PeerBeamOptions}


def peer_options(name: str, overrides: dict[str, str]) -> PeerOptions:
  """Typed options of peer `name` from string overrides; ConfigError for unknown ones or bad values."""
  return options_lib.parse(name, PEERS[name](), overrides)


def peer_decode_fn(run, workdir: str, options: PeerOptions, scratch: str) -> Callable[[Any, Any], DecodeOutput]:
  """(params (ignored), src) -> DecodeOutput of `run` exported to CTranslate2 with `options` (peer_options):
  exported once per quantization into `scratch`, decoded with intra_threads = threads (0: every core)."""
  model_dir = os.path.join(scratch, options.quantization)
  if not os.path.isdir(model_dir):
    export_ctranslate2(run, model_dir, options.quantization, source=workdir)
  return ct2_decode_fn(model_dir, beam_size=options.beam_size if isinstance(options, PeerBeamOptions) else 1,
                       intra_threads=options.threads or os.cpu_count() or 1)
