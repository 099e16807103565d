"""Decoder registry: `--decoder=<name> [--decoder.<opt>=<v>]` -> a jitted (params, src) -> DecodeOutput.

A decoder registers with the Protocol its view must implement and its options with typed
defaults, so an unknown or mistyped option is an error naming the valid ones. Option values are
checked before any work (`OPTION_RULES`, and a decoder's own `check` of what depends on the
method, e.g. HRT's chunk size); every problem is a ConfigError naming the option. Which decoders a
method supports follows from the views it offers and those checks; no method lists decoder names.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp

from nat_jax.core.tokens import row_length_bounds
from nat_jax.errors import ConfigError
from nat_jax.views import DecodeOutput


@dataclasses.dataclass(frozen=True)
class Decoder:
  name: str
  fn: Callable[..., DecodeOutput]  # fn(view, src i32[B, S], **options)
  needs: type                      # the Protocol (nat_jax.views) its view implements
  defaults: dict[str, Any]
  check: Optional[Callable[[Any, dict], None]] = None  # check(method, options): ConfigError if they cannot work
  # prepare(method, options, resources, platform) -> (extra_fn, extra_params, fn_options), run once when
  # the decoder is built, for decoders that need another model (drafted: the drafter run; dag_beam: an n-gram LM;
  # both loaded by the run layer, `resources`: nat_jax.views.RunResources) or choose by the platform they run on:
  # fn gets **extra_fn(extra_params, src) inside the same jit, and fn_options instead of the options.
  prepare: Optional[Callable[[Any, dict, Any, str], tuple[Callable, Any, dict]]] = None
  # Its output cut at any length is what it decodes with that length bound (greedy and what equals it, the DAG
  # decoders, which cut their path's text): each row is cut at its own width's bound (`cuts_rows`), so a
  # batch may mix source widths and a sentence's translation still never depends on its batch-mates.
  row_bounds: bool = False
  about: str = ''  # what it does, for users (the decoding page and --help are generated from it)
  option_help: dict[str, str] = dataclasses.field(default_factory=dict)  # option -> what it sets


DECODERS: dict[str, Decoder] = {}

MAX_BLOCK = 4096  # tokens (steps) per block: what the longest config decodes; a block past a run's bound is the whole
MAX_HYPOTHESES = 256  # beams (beam_size, b_at, b_nat, length_beam) per sentence: more would not fit a batch's memory

# What every decoder's option of that name must satisfy: (test, what it must be). Size-like options are
# bounded here (max_len, whose bound is the run's, in check_decoder), so a value that cannot fit is
# refused before anything is allocated.
OPTION_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    'beam_size': (lambda v: 1 <= v <= MAX_HYPOTHESES, f'1 to {MAX_HYPOTHESES} beams'),
    'iterations': (lambda v: 1 <= v <= 1000, '1 to 1000 iterations'),
    'length_beam': (lambda v: 1 <= v <= MAX_HYPOTHESES, f'1 to {MAX_HYPOTHESES} length candidates'),
    'b_at': (lambda v: 1 <= v <= MAX_HYPOTHESES, f'1 to {MAX_HYPOTHESES} beams'),
    'b_nat': (lambda v: 1 <= v <= MAX_HYPOTHESES, f'1 to {MAX_HYPOTHESES} beams'),
    'block_size': (lambda v: 1 <= v <= MAX_BLOCK, f'1 to {MAX_BLOCK}'),
    'jacobi_block': (lambda v: 0 <= v <= MAX_BLOCK, f'0 (off) or a block of 1 to {MAX_BLOCK} steps'),
    'chunk': (lambda v: v >= 0, "0 (the model's chunk size) or a chunk size"),
    'max_len': (lambda v: v >= 0, "0 (the model's bound) or a positive number of tokens"),
    'alpha': (lambda v: math.isfinite(v) and v >= 0, 'a finite number >= 0'),
    'tau': (lambda v: math.isfinite(v) and v >= 0, 'a finite number >= 0'),
    'block': (lambda v: 1 <= v <= MAX_BLOCK, f'1 to {MAX_BLOCK}'),
    'beta': (lambda v: math.isfinite(v) and v >= 0, 'a finite number >= 0'),
    'gamma': (lambda v: math.isfinite(v) and v >= 0, 'a finite number >= 0'),
    'top_cand': (lambda v: v >= 1, 'at least 1 candidate token per vertex'),
    'lm_pool': (lambda v: 1 <= v <= 64, '1 to 64'),
}
# What an option shared by several decoders, with the same meaning in each, sets (a decoder's own
# option_help says what its other options set, or what one of these means for it where it differs).
SHARED_OPTION_HELP = {
    'max_len': "the most tokens to write; 0: the run's bound for each source (1.5 x its padded width + 10, at most "
               "config.max_decode_len)",
    'remove_repeats': 'drop a token equal to the one before it on the path (as the DA-Transformer reference does)',
}
TRUE, FALSE = ('true', '1', 'yes'), ('false', '0', 'no')


def register_decoder(name: str, needs: type, check: Optional[Callable[[Any, dict], None]] = None,
                     prepare: Optional[Callable] = None, row_bounds: bool = False, about: str = '',
                     option_help: Optional[dict[str, str]] = None, **defaults):
  """Registers `fn(view, src, **options)` as decoder `name`; `about` says what it does and `option_help`
  what each option (keyword defaults) sets: the decoding page and --help are generated from them."""
  def wrap(fn):
    DECODERS[name] = Decoder(name, fn, needs, defaults, check, prepare, row_bounds, about, dict(option_help or {}))
    return fn
  return wrap


def cuts_rows(method, name: str, options: dict[str, Any]) -> bool:
  """Whether decoder `name` with `options` bounds each row by its own source width (Decoder.row_bounds, one
  token per step, no fixed max_len): then batches may mix source widths (nat_jax.data.inference_batches)."""
  return (DECODERS[name].row_bounds and not options.get('max_len', 0)
          and method.tokens_per_step == 1)


def cut_to_row_bounds(view, out: DecodeOutput, src: jax.Array) -> DecodeOutput:
  """`out` with each row's tokens past its own bound (core.tokens.row_length_bounds of the view's
  max_decode_len) zeroed and its `steps` statistic capped there."""
  bounds = row_length_bounds(view.max_decode_len, src)  # [B]
  keep = jnp.arange(out.tokens.shape[1])[None, :] < bounds[:, None]  # [B, T]
  aux = {**out.aux, **({'steps': jnp.minimum(out.aux['steps'], bounds)} if 'steps' in out.aux else {})}
  return out._replace(tokens=jnp.where(keep, out.tokens, 0), aux=aux)


def parse_value(key: str, raw: str, kind: type):
  """One option value from its string form: bools only as true/false (1/0, yes/no)."""
  if kind is bool:
    if raw.lower() in TRUE + FALSE:
      return raw.lower() in TRUE
    raise ConfigError(f'--decoder.{key}={raw!r}: expected true or false.')
  try:
    return kind(raw)
  except ValueError:
    raise ConfigError(f'--decoder.{key}={raw!r}: expected {kind.__name__}.') from None


def parse_options(name: str, overrides: dict[str, str]) -> dict[str, Any]:
  """Typed options of decoder `name` from string overrides; ConfigError for unknown names, unknown
  options and values that break OPTION_RULES."""
  if name not in DECODERS:
    raise ConfigError(f'Unknown decoder {name!r}; available: {sorted(DECODERS)}.')
  options = dict(DECODERS[name].defaults)
  for key, raw in overrides.items():
    if key not in options:
      raise ConfigError(f'Decoder {name!r} has no option {key!r}; its options: {sorted(options)}.')
    options[key] = parse_value(key, raw, type(options[key]))
  for key, value in options.items():
    test, requirement = OPTION_RULES.get(key, (None, ''))
    if test is not None and not test(value):
      raise ConfigError(f'--decoder.{key}={value}: {name} needs {requirement}.')
  return options


def check_decoder(method, name: str, options: dict[str, Any]):
  """ConfigError unless decoder `name` with `options` runs on `method`: the method offers its view,
  `max_len` fits the run's decoder bound (config.max_decode_len), and the decoder's own check passes."""
  decoder = DECODERS[name]
  method_view(method, decoder.needs, f'Decoder {name!r}')
  bound = method.max_target_len
  if options.get('max_len', 0) > bound:
    raise ConfigError(f'--decoder.max_len={options["max_len"]}: this run decodes at most {bound} tokens '
                      f'(its config.max_decode_len); use 0 (the bound for each source) or a value <= {bound}.')
  if decoder.check is not None:
    decoder.check(method, options)


def option_help(name: str, option: str) -> str:
  """What `option` of decoder `name` sets: the decoder's own words, else the shared ones."""
  return DECODERS[name].option_help.get(option) or SHARED_OPTION_HELP.get(option, '')


def option_rule(option: str) -> str:
  """What a value of `option` must be (OPTION_RULES), or '' when any value of its type will do."""
  return OPTION_RULES[option][1] if option in OPTION_RULES else ''


def describe_options() -> str:
  """Every decoder's options with their defaults and what each must be (OPTION_RULES), for `--help`:
  the same rules the options are checked against before any work."""
  lines = ['Decoders and their options, --decoder.<option>=<value> (default; what it must be):']
  for name in sorted(DECODERS):
    options = [f'{key}={value!r}' + (f' ({OPTION_RULES[key][1]})' if key in OPTION_RULES else '')
               for key, value in sorted(DECODERS[name].defaults.items())]
    lines.append(f'  {name}: ' + ('; '.join(options) if options else 'no options'))
  lines.append('  (max_len: at most the run\'s config.max_decode_len; a block longer than that decodes as one block '
               'of it; a decoder may check more against the run, e.g. HRT\'s chunk.)')
  return '\n'.join(lines)


def decoders_for(method) -> list[str]:
  """Names of the registered decoders that run on the method with their default options."""
  names = []
  for name, decoder in DECODERS.items():
    try:
      check_decoder(method, name, dict(decoder.defaults))
      names.append(name)
    except ConfigError:
      pass
  return names


def method_view(method, protocol: type, user: str) -> Callable[[Any], Any]:
  """build(params) -> the method's view implementing `protocol`; a clear error naming `user` (who
  needs it) and the method's decoders when it offers none."""
  build = method.views().get(protocol)
  if build is None:
    names = [n for n, d in DECODERS.items() if d.needs in method.views()]
    raise ConfigError(f'{user} needs a {protocol.__name__}, which method {method.name!r} does not offer; '
                     f'its decoders: {names}.')
  return build


def decode_program(method, name: str, options: dict[str, Any], resources=None,
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
    extra_fn, extra_params, fn_options = (lambda extra, src: {}), None, options
  else:
    extra_fn, extra_params, fn_options = decoder.prepare(method, options, resources,
                                                         platform or jax.default_backend())
  cut = cuts_rows(method, name, options)

  def fn(params, extra, src):
    view = build(params)
    out = decoder.fn(view, src, **extra_fn(extra, src), **fn_options)
    return cut_to_row_bounds(view, out, src) if cut and getattr(view, 'tokens_per_step', 1) == 1 else out
  return fn, extra_params


def make_decode_fn(method, name: str, options: dict[str, Any],
                   resources=None) -> Callable[[Any, jax.Array], DecodeOutput]:
  """(params, src i32[B, S]) -> DecodeOutput, one jitted call of `decode_program` (its extra
  parameters bound) on this process's devices."""
  fn, extra = decode_program(method, name, options, resources)
  jitted = jax.jit(fn)
  return lambda params, src: jitted(params, extra, src)


def build_decoder(method, name: str, overrides: dict[str, str], resources=None):
  """(decode fn, parsed options) from a decoder name and its string options (over the run's own defaults,
  method.decoder_defaults: a converted OPUS-MT run's generation settings), all checked."""
  options = parse_options(name, {**method.decoder_defaults.get(name, {}), **overrides})
  check_decoder(method, name, options)
  return make_decode_fn(method, name, options, resources), options
