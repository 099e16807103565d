"""Decoder registry: `--decoder=<name> [--decoder.<opt>=<v>]` -> a jitted (params, src) -> DecodeOutput.

A decoder registers with the Protocol its view must implement and its options, a frozen dataclass whose
fields carry their defaults, rules and help (nat_jax.decode.options), so an unknown or mistyped option is
an error naming the valid ones. Option values are checked before any work (the fields' rules, and a
decoder's own `check` of what depends on the method, e.g. HRT's chunk size); every problem is a
ConfigError naming the option. Which decoders a method supports follows from the views it offers and
those checks; no method lists decoder names.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional

import jax
import jax.numpy as jnp

from nat_jax.core.tokens import row_length_bounds
from nat_jax.decode import options as options_lib
from nat_jax.decode.options import Options, fixed_length
from nat_jax.errors import ConfigError
from nat_jax.views import DecodeOutput

# XLA:CPU options of every decoding program. Copy insertion by region analysis lets a decoding loop write its
# KV cache in place: with the default analysis a batch-1 loop copies every layer's keys and values at every
# step (docs/lab-notes/2026-12-04-int8-kernel.md).
CPU_COMPILER_OPTIONS = {'xla_cpu_copy_insertion_use_region_analysis': True}


def jit_decoding(fn: Callable) -> Callable:
  """jax.jit of a decoding program, with CPU_COMPILER_OPTIONS where the default backend is the CPU."""
  return jax.jit(fn, compiler_options=CPU_COMPILER_OPTIONS if jax.default_backend() == 'cpu' else None)


@dataclasses.dataclass(frozen=True)
class Decoder:
  name: str
  fn: Callable[..., DecodeOutput]  # fn(view, src i32[B, S], **options.kwargs())
  needs: type                      # the Protocol (nat_jax.views) its view implements
  options: type                    # its options: a frozen dataclass of nat_jax.decode.options.Options
  check: Optional[Callable[[Any, Options], None]] = None  # check(method, options): ConfigError if they cannot work
  # prepare(method, options, resources, platform) -> (extra_fn, extra_params, fn_kwargs), run once when
  # the decoder is built, for decoders that need another model (drafted: the drafter run; dag_beam: an n-gram LM;
  # both loaded by the run layer, `resources`: nat_jax.views.RunResources) or choose by the platform they run on:
  # fn gets **extra_fn(extra_params, src) inside the same jit, and fn_kwargs instead of the options.
  prepare: Optional[Callable[[Any, Options, Any, str], tuple[Callable, Any, dict]]] = None
  # Its output cut at any length is what it decodes with that length bound (greedy and what equals it, the DAG
  # decoders, which cut their path's text): each row is cut at its own width's bound (`cuts_rows`), so a
  # batch may mix source widths and a sentence's translation still never depends on its batch-mates.
  row_bounds: bool = False
  about: str = ''  # what it does, for users (the decoding page and --help are generated from it)

  @property
  def option_names(self) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(self.options))


DECODERS: dict[str, Decoder] = {}


def register_decoder(name: str, needs: type, options: type = Options,
                     check: Optional[Callable[[Any, Options], None]] = None, prepare: Optional[Callable] = None,
                     row_bounds: bool = False, about: str = ''):
  """Registers `fn(view, src, **options)` as decoder `name` with its `options` dataclass (each field's
  default, rule and help: nat_jax.decode.options); `about` says what it does (the decoding page and --help
  are generated from it and the fields)."""
  def wrap(fn):
    DECODERS[name] = Decoder(name, fn, needs, options, check, prepare, row_bounds, about)
    return fn
  return wrap


def cuts_rows(method, name: str, options: Options) -> bool:
  """Whether decoder `name` with `options` bounds each row by its own source width (Decoder.row_bounds, one
  token per step, no fixed max_len): then batches may mix source widths (nat_jax.data.inference_batches)."""
  return DECODERS[name].row_bounds and not fixed_length(options) and method.tokens_per_step == 1


def cut_to_row_bounds(view, out: DecodeOutput, src: jax.Array) -> DecodeOutput:
  """`out` with each row's tokens past its own bound (core.tokens.row_length_bounds of the view's
  max_decode_len) zeroed and its `steps` statistic capped there."""
  bounds = row_length_bounds(view.max_decode_len, src)  # [B]
  keep = jnp.arange(out.tokens.shape[1])[None, :] < bounds[:, None]  # [B, T]
  aux = {**out.aux, **({'steps': jnp.minimum(out.aux['steps'], bounds)} if 'steps' in out.aux else {})}
  return out._replace(tokens=jnp.where(keep, out.tokens, 0), aux=aux)


def decoder(name: str) -> Decoder:
  """The registered decoder `name`; ConfigError naming the registered ones."""
  if name not in DECODERS:
    raise ConfigError(f'Unknown decoder {name!r}; available: {sorted(DECODERS)}.')
  return DECODERS[name]


def parse_options(name: str, given: Mapping[str, Any], base: Optional[Options] = None) -> Options:
  """Typed options of decoder `name`: `given` (strings, or values read as their string form) laid over
  `base` (default: the decoder's defaults); ConfigError for an unknown decoder or option and for a value
  that breaks its rule."""
  return options_lib.parse(name, base if base is not None else decoder(name).options(), given)


def run_options(method, name: str, given: Optional[Mapping[str, Any]] = None) -> Options:
  """Typed options of decoder `name` for a run of `method`: the run's own defaults
  (method.decoder_defaults: a converted OPUS-MT run's generation settings), `given` laid over them."""
  return parse_options(name, {**method.decoder_defaults.get(name, {}), **(given or {})})


def check_decoder(method, name: str, options: Options):
  """ConfigError unless decoder `name` with `options` runs on `method`: the options are its own and keep
  their rules, the method offers its view, `max_len` fits the run's decoder bound (config.max_decode_len),
  and the decoder's own check passes."""
  found = decoder(name)
  if type(options) is not found.options:
    raise ConfigError(f'Decoder {name!r} takes {found.options.__name__}, got {type(options).__name__}.')
  options_lib.check(name, options)
  method_view(method, found.needs, f'Decoder {name!r}')
  bound, fixed = method.max_target_len, fixed_length(options)
  if fixed > bound:
    raise ConfigError(f'--decoder.max_len={fixed}: this run decodes at most {bound} tokens '
                      f'(its config.max_decode_len); use 0 (the bound for each source) or a value <= {bound}.')
  if found.check is not None:
    found.check(method, options)


def option_help(name: str, option: str) -> str:
  """What `option` of decoder `name` sets."""
  return options_lib.spec(DECODERS[name].options, option).metadata['help']


def option_rule(name: str, option: str) -> str:
  """What a value of `option` of decoder `name` must be, or '' when any value of its type will do."""
  field = options_lib.spec(DECODERS[name].options, option)
  return options_lib.rule_words(field) if field.metadata['rule'] is not None else ''


def describe_options() -> str:
  """Every decoder's options with their defaults and what each must be, for `--help`: the same rules the
  options are checked against before any work."""
  lines = ['Decoders and their options, --decoder.<option>=<value> (default; what it must be):']
  for name in sorted(DECODERS):
    defaults = DECODERS[name].options()
    options = [f'{key}={defaults.__dict__[key]!r}' + (f' ({rule})' if (rule := option_rule(name, key)) else '')
               for key in sorted(DECODERS[name].option_names)]
    lines.append(f'  {name}: ' + ('; '.join(options) if options else 'no options'))
  lines.append('  (max_len: at most the run\'s config.max_decode_len; a block longer than that decodes as one block '
               'of it; a decoder may check more against the run, e.g. HRT\'s chunk.)')
  return '\n'.join(lines)


def decoders_for(method) -> list[str]:
  """Names of the registered decoders that run on the method with their default options, sorted."""
  names = []
  for name, decoder in sorted(DECODERS.items()):
    try:
      check_decoder(method, name, decoder.options())
      names.append(name)
    except ConfigError:
      pass
  return names


def method_view(method, protocol: type, user: str) -> Callable[[Any], Any]:
  """build(params) -> the method's view implementing `protocol`; a clear error naming `user` (who
  needs it) and the method's decoders when it offers none."""
  build = method.views().get(protocol)
  if build is None:
    names = [n for n, d in sorted(DECODERS.items()) if d.needs in method.views()]
    raise ConfigError(f'{user} needs a {protocol.__name__}, which method {method.name!r} does not offer; '
                     f'its decoders: {names}.')
  return build


def decode_program(method, name: str, options: Options, resources=None,
                   platform: Optional[str] = None) -> tuple[Callable[[Any, Any, jax.Array], DecodeOutput], Any]:
  """(fn(params, extra, src i32[B, S]) -> DecodeOutput, extra): decoder `name` on the method's view of
  `params`, a pure function to jit or to lower for another device (nat_jax.aot). `extra` holds the
  parameters of the other model a decoder with `prepare` needs (drafted: the drafter run; dag_beam: its LM
  tables), else None, from `resources` (nat_jax.views.RunResources: what the run layer loaded and checked,
  nat_jax.run.resources.Resources). `platform` ('cpu', 'gpu', 'tpu'; default: JAX's default backend) is
  where it will run: a decoder may choose its implementation by it (dag_beam's `search=auto` searches on
  the host only on a CPU)."""
  decoder = DECODERS[name]
  build = method_view(method, decoder.needs, f'Decoder {name!r}')
  if decoder.prepare is None:
    extra_fn, extra_params, fn_options = (lambda extra, src: {}), None, options.kwargs()
  else:
    extra_fn, extra_params, fn_options = decoder.prepare(method, options, resources,
                                                         platform or jax.default_backend())
  cut = cuts_rows(method, name, options)

  def fn(params, extra, src):
    view = build(params)
    out = decoder.fn(view, src, **extra_fn(extra, src), **fn_options)
    return cut_to_row_bounds(view, out, src) if cut else out
  return fn, extra_params


def make_decode_fn(method, name: str, options: Options,
                   resources=None) -> Callable[[Any, jax.Array], DecodeOutput]:
  """(params, src i32[B, S]) -> DecodeOutput, one jitted call of `decode_program` (its extra
  parameters bound) on this process's devices."""
  fn, extra = decode_program(method, name, options, resources)
  jitted = jit_decoding(fn)
  return lambda params, src: jitted(params, extra, src)


def build_decoder(method, name: str, options: Options | Mapping[str, Any] | None = None,
                  resources=None) -> tuple[Callable[[Any, jax.Array], DecodeOutput], Options]:
  """(decode fn, typed options) of decoder `name` with `options`, checked against the method first: typed
  options as given, or option values (as `--decoder.<opt>=<v>` gives them) over the run's defaults
  (`run_options`)."""
  if not isinstance(options, Options):
    options = run_options(method, name, options)
  check_decoder(method, name, options)
  return make_decode_fn(method, name, options, resources), options
