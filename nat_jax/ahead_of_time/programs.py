"""The programs a recipe runs, built abstractly for a target's devices: nothing is allocated, every
argument is a ShapeDtypeStruct carrying the sharding training or decoding would give it.

  train   the recipe's gradient step for each batch shape (its buckets, or the packed shape) and the
          optimizer step, exactly the jitted functions nat_jax.train runs (`compile_steps`), with the
          train state from the same logical axis rules (`state_shardings`)
  eval    the validation loss step at the largest batch shape
  decode  every chosen decoder at each batch size, sources of the recipe's longest width, rows over
          `data` (nat_jax.decode.decode_program: the function translate jits)
  unit    one sequential call of a decoder family, compiled alone for costing, because XLA's cost
          analysis counts a loop body once whatever its trip count: a left-to-right step over a
          cache, a verification pass over 4 and 8 slots, the encoder, a mask-predict / HRT fill pass.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import ml_collections
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from nat_jax import decode
from nat_jax.ahead_of_time.targets import Target, shard_bytes
from nat_jax.core.packing import PACKING_KEYS
from nat_jax.core.tokens import decode_length_bound
from nat_jax.data.batching import bucket_shapes, packed_shape
from nat_jax.errors import ConfigError
from nat_jax.methods import get_method
from nat_jax.parallel import sharding
from nat_jax.run.train_state import dummy_batch, make_optimizer, state_shardings
from nat_jax.run.workdir import inference_config
from nat_jax.training.steps import compile_steps
from nat_jax.views import HybridScorer, LeftToRightScorer, MaskPredictor, WindowDrafter

UNIT_CACHE_SLOTS = 64  # cache slots a costed step attends over: holds the ~37-token outputs of the Acts test set


@dataclasses.dataclass
class Program:
  name: str           # e.g. 'train grad 128x256', 'decode greedy b=64', 'unit step b=1'
  kind: str           # 'train' | 'eval' | 'decode' | 'unit'
  fn: Callable        # a jitted function
  args: tuple         # its abstract arguments (ShapeDtypeStructs with shardings)
  resident: int = 0   # per-device bytes that stay allocated beside the program's own (optimizer state
                      # and the gradient accumulator while a micro-batch's gradients are computed)
  note: str = ''


@dataclasses.dataclass
class Setup:
  """A recipe's method, optimizer and abstract train state on a target's mesh."""
  config: ml_collections.ConfigDict
  target: Target
  mesh: Any
  method: Any
  tx: Any
  state: Any          # abstract TrainState, every leaf with its sharding

  @property
  def params(self):
    return self.state.params


def make_setup(config: ml_collections.ConfigDict, target: Target, model_parallel: int = 1,
               dtype: Optional[str] = None, quantization: str = 'none') -> Setup:
  """The recipe on `target`'s devices as a (data, model) mesh with `model_parallel` devices per model
  replica (ConfigError when it does not divide the device count). `dtype` ('bfloat16', ...; None: the recipe's)
  and `quantization` ('int8'): parameters and activations as `load_run(..., dtype, quantization)` decodes (int8:
  the model's int8 layout, weight matrices int8 with their scales, XLA's dot; decoding programs only)."""
  mesh = sharding.make_mesh(model_parallel, target.devices)
  if dtype or quantization != 'none':
    config = inference_config(config, dtype or config.model.dtype, quantization, int8_kernel='xla')
  method = get_method(config, config.vocab_size)
  tx = make_optimizer(config)
  state, _ = state_shardings(method, tx, dummy_batch(), mesh)
  if dtype and quantization == 'none':  # quantized: the quantized model's own layout already
    to = jnp.dtype(dtype)
    state = state.replace(params=jax.tree_util.tree_map(
        lambda x: abstract(x.shape, to if jnp.issubdtype(x.dtype, jnp.floating) else x.dtype, x.sharding),
        state.params))
  return Setup(config, target, mesh, method, tx, state)


def per_device_bytes(tree) -> int:
  return sum(shard_bytes(x) for x in jax.tree_util.tree_leaves(tree))


def abstract(shape, dtype, spec: NamedSharding) -> jax.ShapeDtypeStruct:
  return jax.ShapeDtypeStruct(tuple(shape), dtype, sharding=spec)


def with_rows_sharding(tree, mesh, rows: int):
  """Abstract leaves of `tree` (eval_shape output) with their leading axis over `data` where it is the
  batch (`rows` long and divisible), else replicated."""
  def place(x):
    spec = P('data') if x.ndim and x.shape[0] == rows and rows % mesh.shape['data'] == 0 else P()
    return abstract(x.shape, x.dtype, NamedSharding(mesh, spec))
  return jax.tree_util.tree_map(place, tree)


def batch_shapes(setup: Setup) -> list[tuple[int, int]]:
  """(rows, length) of every training batch shape: the recipe's buckets (rows a multiple of the
  mesh's data axis) or its one packed shape."""
  c, data = setup.config, setup.mesh.shape['data']
  if setup.method.max_segments:
    return [packed_shape(c.max_len, c.tokens_per_batch, data)]
  return bucket_shapes(c.max_len, c.tokens_per_batch, c.num_buckets, row_multiple=data)


def train_batch(setup: Setup, rows: int, length: int) -> dict:
  keys = ('source', 'target') + (PACKING_KEYS if setup.method.max_segments else ())
  spec = sharding.batch_sharding(setup.mesh)
  return {k: abstract((rows, length), jnp.int32, spec) for k in keys}


def train_programs(setup: Setup, largest_only: bool = False) -> list[Program]:
  """The gradient step per batch shape, the optimizer step, and the evaluation step (largest shape)."""
  c, mesh = setup.config, setup.mesh
  _, shardings = state_shardings(setup.method, setup.tx, dummy_batch(), mesh)
  grad_fn, apply_fn, eval_fn = compile_steps(setup.method, setup.tx, mesh, shardings)
  repl = sharding.replicated(mesh)
  rng = abstract((2,), jnp.uint32, repl)
  step = abstract((), jnp.int32, repl)
  shapes = batch_shapes(setup)
  if largest_only:
    shapes = [max(shapes, key=lambda s: s[0] * s[1] * s[1])]  # the most attention / graph work
  accum = c.grad_accum_steps
  resident = per_device_bytes(setup.state.opt_state) + (per_device_bytes(setup.params) if accum > 1 else 0)
  programs = []
  for rows, length in shapes:
    batch = train_batch(setup, rows, length)
    programs.append(Program(f'train grad {rows}x{length}', 'train', grad_fn, (setup.params, batch, rng, step),
                            resident, f'{rows // mesh.shape["data"]} rows per device; x{accum} per update'))
  grads, sums = jax.eval_shape(grad_fn, setup.params, train_batch(setup, *shapes[-1]), rng, step)
  grads = jax.tree_util.tree_map(lambda g, p: abstract(g.shape, g.dtype, p.sharding), grads, setup.params)
  sums = jax.tree_util.tree_map(lambda s: abstract(s.shape, s.dtype, repl), sums)
  programs.append(Program('train apply', 'train', apply_fn, (setup.state, grads, sums)))
  rows, length = max(shapes, key=lambda s: s[0] * s[1])
  programs.append(Program(f'eval {rows}x{length}', 'eval', eval_fn, (setup.params, train_batch(setup, rows, length))))
  return programs


def source(setup: Setup, rows: int, width: Optional[int] = None) -> jax.ShapeDtypeStruct:
  """Abstract source batch i32[rows, width] (default: the recipe's longest source), rows over `data`."""
  return abstract((rows, width or setup.config.max_len), jnp.int32, sharding.rows_sharding(setup.mesh, rows))


def default_decoders(method, config) -> list[str]:
  """The decoders a recipe decodes with: its validation and test decoders."""
  return list(dict.fromkeys([config.eval_decoder, config.test_decoder]))


def decoder_names(setup: Setup, choice: str) -> list[str]:
  """'default' (the recipe's), 'all' (every decoder the method runs with default options) or names."""
  if choice == 'default':
    return default_decoders(setup.method, setup.config)
  if choice == 'all':
    return decode.decoders_for(setup.method)
  names = [n.strip() for n in choice.split(',') if n.strip()]
  unknown = [n for n in names if n not in decode.DECODERS]
  if unknown:
    raise ConfigError(f'--decoders: unknown {unknown}; registered: {sorted(decode.DECODERS)}.')
  return names


def decoder_overrides(names: Sequence[str], overrides: dict[str, str]) -> dict[str, dict[str, str]]:
  """`--decoder.<opt>=<v>` overrides per decoder: each option goes to the chosen decoders that have it;
  ConfigError for one that none of them has."""
  unused = [k for k in overrides if not any(k in decode.DECODERS[n].option_names for n in names)]
  if unused:
    raise ConfigError(f'--decoder.{unused[0]}: none of the decoders {list(names)} has that option.')
  return {n: {k: v for k, v in overrides.items() if k in decode.DECODERS[n].option_names} for n in names}


def decode_programs(setup: Setup, names: Sequence[str], batch_sizes: Sequence[int],
                    overrides: Optional[dict[str, str]] = None, load_run: Optional[Callable] = None,
                    width: Optional[int] = None) -> list[Program]:
  """Each decoder (options: defaults, with `overrides`, `--decoder.<opt>` strings, where it has them) at
  each batch size, for the target's platform (dag_beam's `search=auto` is the device search on an
  accelerator). `load_run` builds the runs a decoder loads (drafted's drafter) abstractly. Sources are
  `width` tokens wide (default: the recipe's longest)."""
  from nat_jax.run.resources import Resources  # as abstract_run_loader's Run: loaded when decoders compile
  programs = []
  per_decoder = decoder_overrides(names, overrides or {})
  for name in names:
    options = decode.parse_options(name, per_decoder[name])
    decode.check_decoder(setup.method, name, options)
    fn, extra = decode.decode_program(setup.method, name, options, Resources(None, load_run) if load_run else None,
                                     setup.target.platform)
    for rows in batch_sizes:
      programs.append(Program(f'decode {name} b={rows}', 'decode', jax.jit(fn), (setup.params, extra,
                                                                                 source(setup, rows, width))))
  return programs


# --- units: one sequential call each, for costing -------------------------------------------------
def _left_to_right_units(setup: Setup, build: Callable, rows: int, width: Optional[int] = None) -> list[Program]:
  """encode, one step of z slots over a UNIT_CACHE_SLOTS cache, a pass over 3, 4 and 8 steps' slots."""
  params, src = setup.params, source(setup, rows, width)
  enc = with_rows_sharding(jax.eval_shape(lambda p, s: build(p).encode(s), params, src), setup.mesh, rows)
  z = int(build(params).tokens_per_step)  # a static attribute of the view
  cache = with_rows_sharding(jax.eval_shape(lambda p, e: build(p).init_cache(e, UNIT_CACHE_SLOTS * z), params, enc),
                             setup.mesh, rows)
  repl = sharding.replicated(setup.mesh)
  out = [Program(f'unit encode b={rows}', 'unit', jax.jit(lambda p, s: build(p).encode(s)), (params, src))]
  for steps, label in ((1, 'step'), (3, 'pass3'), (4, 'pass4'), (8, 'pass8')):
    tokens = abstract((rows, steps * z), jnp.int32, sharding.rows_sharding(setup.mesh, rows))
    fn = jax.jit(lambda p, e, c, t, s: build(p).step_logits(e, c, t, s))
    out.append(Program(f'unit {label} b={rows}', 'unit', fn, (params, enc, cache, tokens,
                                                                      abstract((), jnp.int32, repl)),
                       note=f'{steps * z} slots over a {UNIT_CACHE_SLOTS * z}-slot cache'))
  return out


def _fill_unit(setup: Setup, encode: Callable, fill: Callable, rows: int, slots: int, label: str,
               sentences: int, width: Optional[int] = None) -> list[Program]:
  """One fill pass (fill_logits) over `rows` rows of `slots` slots, named per `sentences`."""
  params, src = setup.params, source(setup, rows, width)
  enc = with_rows_sharding(jax.eval_shape(encode, params, src), setup.mesh, rows)
  tokens = abstract((rows, slots), jnp.int32, sharding.rows_sharding(setup.mesh, rows))
  return [Program(f'unit {label} b={sentences}', 'unit', jax.jit(fill), (params, enc, tokens),
                  note=f'{rows // sentences} rows per sentence, {slots} slots')]


def _draft_unit(setup: Setup, scorer: Callable, drafter: Callable, rows: int, width: Optional[int] = None) -> Program:
  """One call of a draft head (WindowDrafter.draft) after a verification pass of its window."""
  params, src = setup.params, source(setup, rows, width)
  spec = sharding.rows_sharding(setup.mesh, rows)
  enc = jax.eval_shape(lambda p, s: scorer(p).encode(s), params, src)
  window = int(drafter(params).window)
  state = with_rows_sharding(jax.eval_shape(lambda p, e: drafter(p).start(e, UNIT_CACHE_SLOTS), params, enc),
                             setup.mesh, rows)
  encoded = enc['encoded']
  args = (params, state, abstract((rows, window, encoded.shape[-1]), encoded.dtype, spec),
          abstract((rows,), jnp.int32, spec), abstract((rows,), jnp.int32, spec),
          abstract((rows, UNIT_CACHE_SLOTS), jnp.int32, spec))
  fn = jax.jit(lambda p, h, states, starts, fixed, tokens: drafter(p).draft(h, states, starts, fixed, tokens))
  return Program(f'unit draft head b={rows}', 'unit', fn, args, note=f'{window} tokens drafted')


def unit_programs(setup: Setup, rows: int, width: Optional[int] = None) -> list[Program]:
  """The sequential calls of the method's decoding families at `rows` sentences of `width` source
  tokens (default: the recipe's longest) (module docstring). A fill pass covers the output bound of
  that width."""
  views, c = setup.method.views(), setup.config
  bound = decode_length_bound(c.max_decode_len, width or c.max_len)  # the decoders' output bound
  out = []
  if LeftToRightScorer in views:
    build = views[LeftToRightScorer]
    out += _left_to_right_units(setup, build, rows, width)
    step = next(p for p in _left_to_right_units(setup, build, rows * 4, width) if p.name.startswith('unit step '))
    out.append(dataclasses.replace(step, name=f'unit beam4 step b={rows}',
                                   note=f'4 hypotheses per sentence, {step.note}'))
  if MaskPredictor in views:
    build = views[MaskPredictor]
    out += _fill_unit(setup, lambda p, s: build(p).encode(s), lambda p, e, t: build(p).fill_logits(e, t),
                      rows * 5, bound, 'fill(5 lengths)', rows, width)
    out.append(Program(f'unit encode+length b={rows}', 'unit',
                       jax.jit(lambda p, s: build(p).length_log_probs(build(p).encode(s))),
                       (setup.params, source(setup, rows, width))))
  if WindowDrafter in views:
    out.append(_draft_unit(setup, views[LeftToRightScorer], views[WindowDrafter], rows, width))
  if HybridScorer in views:
    build = views[HybridScorer]
    out += _fill_unit(setup, lambda p, s: build(p).skip_scorer(build(p).chunk).encode(s),
                      lambda p, e, t: build(p).fill_logits(e, t), rows, bound, 'fill', rows, width)
  return out


def unit_label(program_name: str) -> str:
  """'unit beam4 step b=64' -> 'beam4 step'; 'decode dag_lookahead b=1' -> 'decode dag_lookahead'."""
  head = program_name.rsplit(' b=', 1)[0]
  return head[len('unit '):] if head.startswith('unit ') else head


def abstract_run_loader(config_for: Callable[[str], ml_collections.ConfigDict], mesh) -> Callable:
  """load_run(spec) for decoders that load another run (drafted's drafter) while compiling: the run of
  recipe `config_for(spec)` with abstract parameters (replicated over `mesh`), as nat_jax.run.workdir.Run."""
  from nat_jax.run.workdir import Run

  @functools.lru_cache(maxsize=None)
  def load(spec: str):
    config = config_for(spec)
    method = get_method(config, config.vocab_size)
    state, _ = state_shardings(method, make_optimizer(config), dummy_batch(), mesh)
    return Run(config, None, method, state.params, [], mesh)
  return load
