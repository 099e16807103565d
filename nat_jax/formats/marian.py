"""Marian / OPUS-MT checkpoints in the Hugging Face layout -> nat_jax runs (python -m nat_jax.convert).

A snapshot folder holds `config.json` (a MarianConfig), the weights (`flax_model.msgpack`,
`model.safetensors`, or `pytorch_model.bin` where torch is installed), `vocab.json` (piece -> id, one
vocabulary for both sides), `source.spm` / `target.spm` (they only split text into pieces) and
optionally `generation_config.json`. The converted run is an 'at' run that every command takes: its
config sets the model options Marian differs in (post-norm without a final norm, the FFN activation,
the Transformer paper's sinusoid frequencies, attention and output biases, LayerNorm epsilon 1e-5),
its tokenizer is a `PieceTokenizer`, and its checkpoint is a step-0 train state.

Ids: nat_jax fixes pad 0, eos 1, bos 2, unk 3, mask 4 (nat_jax.core.tokens); Marian puts its specials
anywhere (opus-mt-en-de: eos 0, unk 1, pad 58,100 = its decoder start). The vocabulary is reordered
so that ours hold: our id j is Marian's id ORDER[j]. Our BOS (the decoder's start) takes the row of
Marian's decoder start token, our MASK a copy of it (a teacher never reads one); the tokens Marian
never generates (its pad / decoder start, generation_config's bad words and suppressed tokens, and our
BOS and MASK) get an output bias of NEVER (-1e9: probability exactly 0 in float32), as generate's
-inf. The embedding, the output bias and every other weight are otherwise copied unchanged.
"""
from __future__ import annotations

import json
import math
import os
import struct
from typing import Any, Optional

import flax.linen as nn
import jax
import ml_collections
import numpy as np
from flax import serialization
from flax.traverse_util import flatten_dict

from nat_jax.core.tokens import BOS_ID, EOS_ID, MASK_ID, PAD_ID, UNK_ID
from nat_jax.data.tokenizer import write_piece_tokenizer
from nat_jax.errors import ConfigError
from nat_jax.files import write_atomic
from nat_jax.methods import get_method
from nat_jax.parallel.sharding import make_mesh
from nat_jax.recipes.defaults import base_config
from nat_jax.run.checkpoint import Checkpointer
from nat_jax.run.train_state import create_train_state, dummy_batch, make_optimizer
from nat_jax.run.workdir import CONFIG_FILE

CONFIG, GENERATION, VOCAB = 'config.json', 'generation_config.json', 'vocab.json'
SOURCE_SPM, TARGET_SPM = 'source.spm', 'target.spm'
WEIGHT_FILES = ('flax_model.msgpack', 'model.safetensors', 'pytorch_model.bin')
NEVER = -1e9  # the output bias of a token that is never generated
ACTIVATIONS = {'relu': 'relu', 'swish': 'swish', 'silu': 'swish', 'gelu': 'gelu'}  # Marian's name -> ours
# What a Marian layer calls its parts -> ours (nat_jax.models.transformer).
ENCODER_PARTS = {'self_attn': 'self_attention', 'self_attn_layer_norm': 'norm_attention', 'fc1': 'ffn/wi',
                 'fc2': 'ffn/wo', 'final_layer_norm': 'norm_ffn'}
DECODER_PARTS = {'self_attn': 'self_attention', 'self_attn_layer_norm': 'norm_self', 'encoder_attn': 'cross_attention',
                 'encoder_attn_layer_norm': 'norm_cross', 'fc1': 'ffn/wi', 'fc2': 'ffn/wo',
                 'final_layer_norm': 'norm_ffn'}
PROJECTIONS = {'q_proj': 'query', 'k_proj': 'key', 'v_proj': 'value', 'out_proj': 'out'}
SAFETENSORS_DTYPES = {'F32': np.float32, 'F16': np.float16, 'F64': np.float64}


# --- reading a snapshot ------------------------------------------------------------------------------
def read_json(folder: str, name: str, required: bool = True) -> Optional[dict]:
  path = os.path.join(folder, name)
  if not os.path.exists(path):
    if required:
      raise ConfigError(f'{folder} has no {name}: --from must be a Hugging Face snapshot of a Marian model '
                        f'(config.json, vocab.json, source.spm, target.spm and the weights).')
    return None
  try:
    with open(path, encoding='utf-8') as f:
      return json.load(f)
  except (ValueError, UnicodeDecodeError) as e:
    raise ConfigError(f'{path} is not valid JSON ({e}).') from None


def architecture_problem(hf: dict) -> Optional[str]:
  """Why a config.json describes a model nat_jax cannot represent exactly, or None."""
  if hf.get('model_type') != 'marian':
    return f'model_type is {hf.get("model_type")!r}; only Marian (OPUS-MT) models convert'
  checks = [
      (hf.get('normalize_before', False), 'pre-norm layers (normalize_before)'),
      (hf.get('add_layernorm_embedding', False), 'a LayerNorm on the embeddings'),
      (hf.get('separate_vocabs', False) or not hf.get('share_encoder_decoder_embeddings', True),
       'separate source and target vocabularies'),
      (hf.get('encoder_attention_heads') != hf.get('decoder_attention_heads'), 'different encoder and decoder heads'),
      (hf.get('encoder_ffn_dim') != hf.get('decoder_ffn_dim'), 'different encoder and decoder FFN widths'),
      (hf.get('activation_function', 'swish') not in ACTIVATIONS,
       f'the activation {hf.get("activation_function")!r} (nat_jax has {sorted(ACTIVATIONS)})'),
      (not hf.get('static_position_embeddings', True), 'learned positions'),
  ]
  found = [what for bad, what in checks if bad]
  return f'it has {", ".join(found)}' if found else None


def read_safetensors(path: str) -> dict[str, np.ndarray]:
  """{name: array} of a .safetensors file (the format: an 8-byte little-endian header size, a JSON header
  of dtype / shape / data_offsets per tensor, the raw data), read without the safetensors package."""
  import ml_dtypes  # a dependency of jax
  dtypes = {**SAFETENSORS_DTYPES, 'BF16': ml_dtypes.bfloat16}
  with open(path, 'rb') as f:
    size = struct.unpack('<Q', f.read(8))[0]
    header = json.loads(f.read(size))
    data = f.read()
  out = {}
  for name, spec in header.items():
    if name == '__metadata__':
      continue
    if spec['dtype'] not in dtypes:
      raise ConfigError(f'{path}: tensor {name} has dtype {spec["dtype"]}, which a Marian model does not use.')
    start, end = spec['data_offsets']
    out[name] = np.frombuffer(data[start:end], dtypes[spec['dtype']]).reshape(spec['shape']).astype(np.float32)
  return out


def torch_to_flax(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """torch state-dict names and layouts ('model.encoder.layers.0.fc1.weight' [out, in]) -> the Flax ones
  ('model/encoder/layers/0/fc1/kernel' [in, out])."""
  out = {}
  for name, value in tensors.items():
    parts = name.split('.')
    if parts[0] == 'lm_head' or 'embed_positions' in parts or parts[-2:] == ['embed_tokens', 'weight']:
      continue  # tied to the shared embedding / static sinusoids
    if parts[-2:] == ['shared', 'weight']:
      out['model/shared/embedding'] = value
    elif parts[-1] == 'weight' and value.ndim == 2:
      out['/'.join(parts[:-1] + ['kernel'])] = value.T
    elif parts[-1] == 'weight':  # a LayerNorm's
      out['/'.join(parts[:-1] + ['scale'])] = value
    else:
      out['/'.join(parts)] = value
  return out


def read_weights(folder: str) -> dict[str, np.ndarray]:
  """{'model/encoder/layers/0/fc1/kernel': array, ...} in the Flax layout, from the first weight file found."""
  found = [name for name in WEIGHT_FILES if os.path.exists(os.path.join(folder, name))]
  if not found:
    raise ConfigError(f'{folder} holds no weights ({", ".join(WEIGHT_FILES)}).')
  path = os.path.join(folder, found[0])
  if found[0] == 'flax_model.msgpack':
    with open(path, 'rb') as f:
      tree = serialization.msgpack_restore(f.read())
    tree = tree.get('params', tree)
    return {'/'.join(k): np.asarray(v, np.float32) for k, v in flatten_dict(tree).items()}
  if found[0] == 'model.safetensors':
    return torch_to_flax(read_safetensors(path))
  try:
    import torch
  except ImportError:
    raise ConfigError(f'{path} is a torch pickle and torch is not installed: install torch, or use a snapshot '
                      'with model.safetensors or flax_model.msgpack.') from None
  state = torch.load(path, map_location='cpu', weights_only=True)
  return torch_to_flax({k: v.float().numpy() for k, v in state.items()})


# --- the vocabulary ----------------------------------------------------------------------------------
def vocabulary_order(vocab: dict[str, int], pad: int, eos: int) -> tuple[list[str], np.ndarray]:
  """(our pieces in id order, ORDER i64[V+2]: the Marian id each of our ids takes its rows from).

  Ours: pad, eos, bos (Marian's decoder start = its pad), unk, mask (a copy of it), then every other Marian
  piece in Marian's order."""
  by_id = {i: p for p, i in vocab.items()}
  if len(by_id) != len(vocab) or sorted(by_id) != list(range(len(vocab))):
    raise ConfigError('vocab.json does not number its pieces 0 .. V-1 once each.')
  if '<unk>' not in vocab:
    raise ConfigError('vocab.json has no <unk> piece.')
  unk = vocab['<unk>']
  if len({pad, eos, unk}) != 3:
    raise ConfigError(f'config.json gives pad {pad} and eos {eos}, and vocab.json <unk> {unk}: they must differ.')
  taken = set(vocab)
  fresh = lambda piece: piece if piece not in taken else f'<nat_jax:{piece.strip("<>")}>'
  specials = {PAD_ID: (by_id[pad], pad), EOS_ID: (by_id[eos], eos), BOS_ID: (fresh('<s>'), pad),
              UNK_ID: (by_id[unk], unk), MASK_ID: (fresh('<mask>'), pad)}
  pieces, order = [specials[i][0] for i in range(5)], [specials[i][1] for i in range(5)]
  for i in range(len(vocab)):
    if i not in (pad, eos, unk):
      pieces.append(by_id[i])
      order.append(i)
  return pieces, np.asarray(order, np.int64)


def language_prefix(vocab: dict[str, int], target_language: str) -> str:
  """The `>>xx<<` tag put before every source, '' for a single-target model; ConfigError when a
  multi-target model is converted without --target_language or with one it lacks."""
  tags = sorted(p for p in vocab if p.startswith('>>') and p.endswith('<<'))
  if not tags:
    if target_language:
      raise ConfigError(f'--target_language={target_language}: this model has one target language (no >>xx<< '
                        'tags in vocab.json); leave it empty.')
    return ''
  tag = f'>>{target_language}<<'
  if tag not in tags:
    raise ConfigError(f'this model translates into several languages: set --target_language to one of '
                      f'{[t[2:-2] for t in tags]} (got {target_language!r}).')
  return tag


# --- parameters --------------------------------------------------------------------------------------
def take(weights: dict[str, np.ndarray], name: str) -> np.ndarray:
  if name not in weights:
    raise ConfigError(f'the weights have no {name}: not a complete Marian model.')
  return weights[name]


def convert_layer(weights: dict, prefix: str, parts: dict[str, str], heads: int) -> dict[str, Any]:
  """One Marian layer (names under `prefix`) -> our layer's parameter tree."""
  layer: dict[str, Any] = {}
  for theirs, ours in parts.items():
    node = layer
    for key in ours.split('/'):
      node = node.setdefault(key, {})
    if theirs.endswith('attn'):
      for proj, name in PROJECTIONS.items():
        kernel = take(weights, f'{prefix}/{theirs}/{proj}/kernel')  # [D_in, D_out]
        bias = take(weights, f'{prefix}/{theirs}/{proj}/bias')  # [D_out]
        d = kernel.shape[0]
        if name == 'out':
          node[name] = {'kernel': kernel.reshape(heads, d // heads, d), 'bias': bias}  # [H, Dh, D]
        else:
          node[name] = {'kernel': kernel.reshape(d, heads, d // heads), 'bias': bias.reshape(heads, d // heads)}
    elif theirs.endswith('layer_norm'):
      node.update(scale=take(weights, f'{prefix}/{theirs}/scale'), bias=take(weights, f'{prefix}/{theirs}/bias'))
    else:
      node.update(kernel=take(weights, f'{prefix}/{theirs}/kernel'), bias=take(weights, f'{prefix}/{theirs}/bias'))
  return layer


def convert_params(weights: dict[str, np.ndarray], hf: dict, order: np.ndarray, never: list[int]) -> dict[str, Any]:
  """Our 'at' model's parameter tree from Marian's weights (Flax layout), the vocabulary reordered by `order`."""
  heads = hf['encoder_attention_heads']
  embedding = take(weights, 'model/shared/embedding')  # [V_marian, D]
  if embedding.shape[0] != hf['vocab_size']:
    raise ConfigError(f'the embedding has {embedding.shape[0]} rows, config.json vocab_size {hf["vocab_size"]}.')
  bias = weights.get('final_logits_bias', np.zeros((1, embedding.shape[0]), np.float32)).reshape(-1)[order].copy()
  bias[never] = NEVER
  params: dict[str, Any] = {'embed': {'embedding': embedding[order]}, 'output_bias': bias}
  for i in range(hf['encoder_layers']):
    params[f'encoder_{i}'] = convert_layer(weights, f'model/encoder/layers/{i}', ENCODER_PARTS, heads)
  for i in range(hf['decoder_layers']):
    params[f'decoder_{i}'] = convert_layer(weights, f'model/decoder/layers/{i}', DECODER_PARTS, heads)
  return params


def never_generated(hf: dict, generation: dict, ours_of: dict[int, int]) -> list[int]:
  """Our ids of the tokens generate never produces: our pad, bos and mask, Marian's decoder start / pad, and
  generation_config's single-token bad words and suppressed tokens."""
  never = {PAD_ID, BOS_ID, MASK_ID}
  banned = [ids[0] for ids in (generation.get('bad_words_ids') or []) if len(ids) == 1]
  banned += list(generation.get('suppress_tokens') or [])
  banned += [hf.get('decoder_start_token_id', hf['pad_token_id'])]
  never.update(ours_of[i] for i in banned if i in ours_of)
  return sorted(never)


# --- the run's config --------------------------------------------------------------------------------
def decoding_defaults(hf: dict, generation: dict) -> tuple[int, str, dict[str, dict[str, str]]]:
  """(max_decode_len, default decoder, per-decoder option defaults) from the generation settings (a
  generation_config.json, else config.json's): generate_beam with num_beams, the length penalty as generate divides
  by (length ** length_penalty), generate's stopping (early_stopping)."""
  get = lambda key, default: generation.get(key, hf.get(key, default))  # defaults: GenerationConfig's
  max_length = int(get('max_length', 20) or 20)
  beams = int(get('num_beams', 1) or 1)
  length_penalty = float(get('length_penalty', 1.0))
  if not math.isfinite(length_penalty):
    raise ConfigError(f'the generation config has length_penalty {length_penalty}; a finite number is needed.')
  early = get('early_stopping', False)
  beam = {'beam_size': str(max(beams, 1)), 'alpha': repr(length_penalty),
          'early_stopping': {True: 'true', False: 'false', 'never': 'never'}.get(early, 'false')}
  # generate counts the decoder start token in max_length and forces EOS as the last token: at most
  # max_length - 2 words, then EOS (generate_beam forces it after max_len tokens; greedy's text stops
  # there either way). Flax's generate adds one when max_length is passed as an argument.
  return max(max_length - 2, 1), ('generate_beam' if beams > 1 else 'greedy'), {'generate_beam': beam}


def run_config(hf: dict, generation: dict, vocab_size: int) -> ml_collections.ConfigDict:
  """The converted run's config.json: an 'at' run with Marian's architecture and decoding defaults (the
  training settings are base_config's, for fine-tuning it)."""
  c = base_config()
  d, heads = hf['d_model'], hf['encoder_attention_heads']
  if d % heads:
    raise ConfigError(f'd_model {d} is not divisible by {heads} heads.')
  c.model.update(method='at', d_model=d, num_heads=heads, d_ff=hf['encoder_ffn_dim'], enc_layers=hf['encoder_layers'],
                 dec_layers=hf['decoder_layers'], dropout=float(hf.get('dropout', 0.1)),
                 attention_dropout=float(hf.get('attention_dropout', 0.0)), pre_norm=False, relative_window=0,
                 dtype='float32', activation=ACTIVATIONS[hf.get('activation_function', 'swish')],
                 position_timescales='vaswani', scale_embedding=bool(hf.get('scale_embedding', False)),
                 attention_bias=True, output_bias=True, layer_norm_epsilon=1e-5)
  max_decode_len, default, options = decoding_defaults(hf, generation)
  c.vocab_size = vocab_size
  c.max_len = int(hf.get('max_position_embeddings', 512))
  c.max_decode_len = min(max_decode_len, c.max_len)
  c.default_decoder = default
  c.test_decoder = default
  c.decoder_defaults = options
  return c


# --- converting --------------------------------------------------------------------------------------
def read_snapshot(folder: str, target_language: str = ''):
  """(config, vocabulary pieces, language prefix, params) of the Marian snapshot in `folder`, checked."""
  if not os.path.isdir(folder):
    raise ConfigError(f'--from={folder}: no such folder (a Hugging Face snapshot of a Marian model, e.g. '
                      '`huggingface-cli download Helsinki-NLP/opus-mt-en-de --local-dir DIR`).')
  hf = read_json(folder, CONFIG)
  problem = architecture_problem(hf)
  if problem:
    raise ConfigError(f'{os.path.join(folder, CONFIG)} describes a model nat_jax cannot represent: {problem}.')
  generation = read_json(folder, GENERATION, required=False) or {}
  vocab = read_json(folder, VOCAB)
  for name in (SOURCE_SPM, TARGET_SPM):
    if not os.path.exists(os.path.join(folder, name)):
      raise ConfigError(f'{folder} has no {name} (the sentencepiece model that splits the '
                        f'{name.split(".")[0]} text).')
  if len(vocab) != hf['vocab_size']:
    raise ConfigError(f'vocab.json has {len(vocab)} pieces, config.json vocab_size {hf["vocab_size"]}.')
  pieces, order = vocabulary_order(vocab, hf['pad_token_id'], hf['eos_token_id'])
  prefix = language_prefix(vocab, target_language)
  ours_of = {int(m): j for j, m in enumerate(order) if j not in (BOS_ID, MASK_ID)}
  params = convert_params(read_weights(folder), hf, order, never_generated(hf, generation, ours_of))
  return run_config(hf, generation, len(pieces)), pieces, prefix, params


def check_shapes(params: dict, like) -> None:
  """ConfigError naming the first parameter whose name or shape differs from the model `like` describes."""
  have = {'/'.join(k): np.shape(v) for k, v in flatten_dict(params).items()}
  want = {'/'.join(k): tuple(v.shape) for k, v in flatten_dict(like).items()}
  for name in sorted(set(have) | set(want)):
    if have.get(name) != want.get(name):
      raise ConfigError(f'the converted parameter {name} has shape {have.get(name)}, the model needs '
                        f'{want.get(name)}: not a Marian model nat_jax can represent.')


def write_run(workdir: str, config, pieces: list[str], prefix: str, params: dict, folder: str) -> None:
  """The converted run in `workdir` (new or empty): tokenizer, config.json, a step-0 checkpoint."""

  method = get_method(config, len(pieces))
  like = nn.meta.unbox(jax.eval_shape(method.init_params, jax.random.PRNGKey(0), dummy_batch()))
  check_shapes(params, like)
  os.makedirs(workdir, exist_ok=True)
  write_piece_tokenizer(workdir, pieces, prefix, os.path.join(folder, SOURCE_SPM), os.path.join(folder, TARGET_SPM))
  write_atomic(os.path.join(workdir, CONFIG_FILE), json.dumps(json.loads(config.to_json_best_effort()), indent=2,
                                                               sort_keys=True))
  state = create_train_state(method, make_optimizer(config), dummy_batch(), make_mesh(1), jax.random.PRNGKey(0))
  converted = jax.tree_util.tree_map(lambda old, new: jax.device_put(np.asarray(new, np.float32), old.sharding),
                                     state.params, params)
  checkpointer = Checkpointer(workdir, keep=1)
  checkpointer.save(0, state.replace(params=converted), {'step': 0, 'seed': 0, 'data_position': 0,
                                                         'converted_from': os.path.abspath(folder)})
  checkpointer.close()
