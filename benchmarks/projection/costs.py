"""Compiled costs of the decoding calls, cached per (recipe, target, source width): what the roofline
projection (benchmarks/projection/roofline.py, benchmarks/projection/projected_speed.py) and the measured comparison
(benchmarks/projection/unit_speed.py) read. A cache file is `<recipe>@<target>@w<width>.json`:
{'<unit>|<batch>': {flops, bytes, peak_bytes, compile_s, host_callbacks, note}}.
"""
from __future__ import annotations

import json
import os
from typing import Optional

from benchmarks.projection import roofline
from nat_jax import recipes
from nat_jax.ahead_of_time import analysis, programs
from nat_jax.ahead_of_time.programs import unit_label
from nat_jax.errors import ConfigError
from nat_jax.files import write_atomic


def recipe_costs(recipe: str, units: set, target, batches: list[int], width: int) -> dict:
  """{'<unit>|<batch>': {flops, bytes, compile_s, ...}} of the units `recipe` is needed for."""
  config = recipes.load_recipe(recipes.recipe_path(recipe))
  setup = programs.make_setup(config, target, dtype='bfloat16')
  todo = []
  for b in batches:
    todo += [p for p in programs.unit_programs(setup, b, width) if unit_label(p.name) in units]
  decoders = sorted(u[len('decode '):] for u in units if u.startswith('decode '))
  todo += programs.decode_programs(setup, decoders, batches, width=width)
  out = {}
  for i, program in enumerate(todo, 1):
    print(f'[{i}/{len(todo)}] {recipe} on {target.name}: {program.name} ...', flush=True)
    r = analysis.analyze(program, target)
    if not r.compiled:
      raise ConfigError(f'{recipe}: {program.name} does not compile for {target.name}: {r.short_error()}')
    out[f'{unit_label(program.name)}|{program.name.rsplit("b=", 1)[1]}'] = {
        'flops': r.flops, 'bytes': r.bytes_accessed, 'peak_bytes': r.peak_bytes, 'compile_s': r.compile_s,
        'host_callbacks': r.host_callbacks, 'note': program.note}
  return out


def cached_costs(out: str, name: str, width: int, first: Optional[dict] = None, target=None,
                 batches=(1, 64)) -> tuple[dict, list[str]]:
  """({(recipe, unit, batch): (flops, bytes)}, the keys borrowed from `first`) of target `name` from the
  cache in `out`; a recipe not cached yet is compiled for `target` (ConfigError without one). A call
  this target could not cost takes `first`'s cost of it."""
  costs, borrowed = {}, []
  for recipe, units in sorted(roofline.recipes_needed().items()):
    path = os.path.join(out, f'{recipe}@{name.replace(":", "_")}@w{width}.json')
    if not os.path.exists(path):
      if target is None:
        raise ConfigError(f'{path} missing: run python -m benchmarks.projection.projected_speed --out={out} '
                          f'--targets={name} --width={width} first.')
      write_atomic(path, json.dumps(recipe_costs(recipe, units, target, list(batches), width), indent=2))
    with open(path) as f:
      for key, cost in json.load(f).items():
        unit, batch = key.split('|')
        key = (recipe, unit, int(batch))
        if cost['flops'] is None and first is not None and key in first:
          costs[key] = first[key]
          borrowed.append('|'.join(map(str, key)))
        elif cost['flops'] is not None:
          costs[key] = (cost['flops'], cost['bytes'])
  return costs, borrowed
