"""Compile a recipe's programs for a target and report them: the library behind `python -m nat_jax.aot`.

`compile_recipe` builds the programs (nat_jax.ahead_of_time.programs), compiles each (nat_jax.ahead_of_time.analysis)
with a progress line per program on stderr, and returns the reports; `fit_train_step` searches the largest per-device
batch whose gradient step fits when the recipe's does not, keeping the recipe's tokens per update by gradient
accumulation (and asks for model parallelism when one row per device does not fit); `table` and `summary` format
them."""
from __future__ import annotations

import dataclasses
import sys
import time
from typing import Callable, Optional, Sequence

import ml_collections

from nat_jax.ahead_of_time import analysis, programs
from nat_jax.ahead_of_time.analysis import ProgramReport, gib
from nat_jax.ahead_of_time.targets import Target
from nat_jax.errors import ConfigError

PROGRAM_KINDS = ('train', 'eval', 'decode', 'units')


@dataclasses.dataclass
class RecipeReport:
  target: Target
  model_parallel: int
  mesh: dict
  reports: list  # of ProgramReport

  @property
  def failed(self) -> list[ProgramReport]:
    return [r for r in self.reports if not (r.compiled and r.fits)]


def progress(message: str):
  print(message, file=sys.stderr, flush=True)


def build_programs(setup: programs.Setup, kinds: Sequence[str], decoders: str, batch_sizes: Sequence[int],
                   largest_only: bool, load_run: Optional[Callable] = None,
                   overrides: Optional[dict] = None) -> list[programs.Program]:
  """The programs of `kinds` (PROGRAM_KINDS) for one setup."""
  unknown = sorted(set(kinds) - set(PROGRAM_KINDS))
  if unknown:
    raise ConfigError(f'--programs: unknown {unknown}; choose from {list(PROGRAM_KINDS)}.')
  out = []
  if 'train' in kinds or 'eval' in kinds:
    train = programs.train_programs(setup, largest_only)
    out += [p for p in train if p.kind in kinds]
  if 'decode' in kinds:
    out += programs.decode_programs(setup, programs.decoder_names(setup, decoders), batch_sizes, overrides, load_run)
  if 'units' in kinds:
    for rows in batch_sizes:
      out += programs.unit_programs(setup, rows)
  return out


def compile_recipe(config: ml_collections.ConfigDict, target: Target, model_parallel: int = 1,
                   kinds: Sequence[str] = ('train', 'eval', 'decode'), decoders: str = 'all',
                   batch_sizes: Sequence[int] = (1, 64), largest_only: bool = False,
                   load_run: Optional[Callable] = None, overrides: Optional[dict] = None,
                   verbose: bool = True, dtype: Optional[str] = None, quantization: str = 'none') -> RecipeReport:
  """Compile the recipe's programs for `target` on a (data, model) mesh (decoder options: defaults
  with `overrides`, `--decoder.<opt>` strings; `dtype` and `quantization`: the decoders' precision, decoding
  programs only); a program that does not compile is reported with the compiler's error, never raised."""
  if (dtype or quantization != 'none') and set(kinds) - {'decode', 'units'}:
    raise ConfigError(f'--dtype={dtype} --quantization={quantization} set the precision of decoding: add '
                      '--programs=decode (or units).')
  setup = programs.make_setup(config, target, model_parallel, dtype, quantization)
  todo = build_programs(setup, kinds, decoders, batch_sizes, largest_only, load_run, overrides)
  reports = []
  for i, program in enumerate(todo, 1):
    if verbose:
      progress(f'[{i}/{len(todo)}] {target.name}: compiling {program.name} ...')
    report = analysis.analyze(program, target)
    reports.append(report)
    if verbose:
      state = (f'{gib(report.peak_bytes)} of {gib(report.memory_bytes)} GiB per device'
               + ('' if report.fits else ' (does not fit)') if report.compiled else f'failed: {report.short_error()}')
      progress(f'[{i}/{len(todo)}] {target.name}: {program.name}: {state}, {report.compile_s:.0f}s')
  return RecipeReport(target, model_parallel, dict(setup.mesh.shape), reports)


def fit_train_step(config: ml_collections.ConfigDict, target: Target, model_parallel: int = 1,
                   max_model_parallel: Optional[int] = None, verbose: bool = True) -> dict:
  """The recipe's update on `target`: its gradient step as configured, or else the largest per-device
  batch that fits. Halves tokens_per_batch and doubles grad_accum_steps (same tokens per update) until
  the largest-bucket gradient step fits; when even a batch of one row per device does not, doubles
  model parallelism (up to `max_model_parallel`, default the device count). Returns what it tried, what
  fits (None when nothing does) and 'recipe_report', the RecipeReport of the recipe as configured."""
  tokens, accum = config.tokens_per_batch, config.grad_accum_steps
  update = tokens * accum
  max_model_parallel = max_model_parallel or len(target.devices)
  tried, first = [], None
  while True:
    data = len(target.devices) // model_parallel
    c = config.copy_and_resolve_references()
    c.tokens_per_batch, c.grad_accum_steps = tokens, accum
    result = compile_recipe(c, target, model_parallel, ('train',), largest_only=True, verbose=verbose)
    first = first or result
    grad = result.reports[0]
    tried.append({'tokens_per_batch': tokens, 'grad_accum_steps': accum, 'model_parallel': model_parallel,
                  'peak_gib': round(grad.peak_bytes / 2**30, 2) if grad.compiled else None,
                  'fits': grad.compiled and grad.fits, 'error': grad.short_error()})
    if grad.compiled and grad.fits:
      return {'update_tokens': update, 'fits': tried[-1], 'tried': tried, 'recipe_report': first}
    if tokens // 2 >= data * config.max_len:  # the longest bucket keeps at least one row per device
      tokens, accum = tokens // 2, accum * 2
    elif model_parallel * 2 <= max_model_parallel and len(target.devices) % (model_parallel * 2) == 0:
      model_parallel *= 2
      tokens, accum = config.tokens_per_batch, config.grad_accum_steps
    else:
      return {'update_tokens': update, 'fits': None, 'tried': tried, 'recipe_report': first}


def table(results: Sequence[RecipeReport]) -> str:
  """A markdown table: one row per program and target."""
  head = ('| target | mesh | program | compiled | args / out / temp / resident GiB | peak / usable GiB | fits | '
          'GFLOP | GB accessed | collectives | host callbacks / transfers | compile s |')
  lines = [head, '|' + '---|' * 12]
  for result in results:
    mesh = 'x'.join(str(v) for v in result.mesh.values())
    for r in result.reports:
      if not r.compiled:
        lines.append(f'| {result.target.name} | {mesh} | {r.program} | no: {r.short_error()[:120]} | | | no | | | | | '
                     f'{r.compile_s:.0f} |')
        continue
      coll = ', '.join(f'{k} {v}' for k, v in sorted(r.collectives.items())) or '-'
      flops = '-' if r.flops is None else f'{r.flops / 1e9:.3g}'
      traffic = '-' if r.bytes_accessed is None else f'{r.bytes_accessed / 1e9:.3g}'
      lines.append(f'| {result.target.name} | {mesh} | {r.program} | yes | {gib(r.argument_bytes)} / '
                   f'{gib(r.output_bytes)} / {gib(r.temp_bytes)} / {gib(r.resident_bytes)} | {gib(r.peak_bytes)} / '
                   f'{gib(r.memory_bytes)} | {"yes" if r.fits else "**no**"} | {flops} | {traffic} | {coll} | '
                   f'{r.host_callbacks} / {r.host_transfers} | {r.compile_s:.0f} |')
  return '\n'.join(lines)


def summary(results: Sequence[RecipeReport]) -> Optional[str]:
  """None when every program compiled and fits, else one line naming what did not."""
  bad = [(res.target.name, r) for res in results for r in res.failed]
  if not bad:
    return None
  parts = [f'{r.program} on {name} ' + (f'({gib(r.peak_bytes)} of {gib(r.memory_bytes)} GiB)' if r.compiled
                                        else f'(does not compile: {r.short_error()[:160]})') for name, r in bad[:4]]
  total = sum(len(res.reports) for res in results)
  return (f'{len(bad)} of {total} programs do not compile or fit: {"; ".join(parts)}'
          f'{" ..." if len(bad) > 4 else ""}')


def as_json(results: Sequence[RecipeReport], **context) -> dict:
  import jax
  return {**context, 'jax': jax.__version__, 'date': time.strftime('%Y-%m-%d'),
          'memory_note': 'peak = arguments + outputs - aliased + temporaries + resident (optimizer state and, with '
                         'gradient accumulation, the accumulated gradients while a micro-batch runs), per device',
          'cost_note': 'FLOPs and bytes per device; a loop body is counted once whatever its trip count',
          'results': [{'target': res.target.describe(), 'target_name': res.target.name, 'mesh': res.mesh,
                       'chip': dataclasses.asdict(res.target.chip),
                       'programs': [analysis.as_row(r) for r in res.reports]} for res in results]}
