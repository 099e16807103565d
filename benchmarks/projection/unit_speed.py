"""Measured seconds of the decoding calls the roofline projection costs, timed on this machine's
accelerator at base size (docs/lab-notes/2026-11-25-accelerators.md): what a lent GPU says about
benchmarks/projection/projected_speed.py.

  python -m benchmarks.projection.unit_speed --out=DIR [--batch_sizes=1,64] [--width=40] [--repeats=30]

For every call of every plan in benchmarks/projection/roofline.py (a left-to-right step over a 64-slot cache, a
verification pass, a fill pass, the loop-free DAG decoder, the encoder) of every recipe a plan needs:
the same program nat_jax.aot compiles (nat_jax.ahead_of_time.programs), here for one local device, in bf16 as a
run decodes with --dtype=bfloat16, with random weights (a call's cost does not depend on them) and
random source tokens of --width pieces. Per call: compile seconds and the median, 10th and 90th
percentile of --repeats calls after a warm-up, each dispatched from the host and waited for
(block_until_ready), so that a time includes its dispatch, which is what the projection's per-call
overhead stands for. Beside them, whole decoders (`LOOPS`: the device loop, random weights, so loops
run to their length bound) and their time per loop trip; the in-loop step is AT greedy's loop less
its encoder, divided by its steps. Plans composed of the measured
calls (calls per sentence as in the projection) go beside the projected ones in
`python -m benchmarks.projection.unit_speed --compare=OUT/unit_speed.json --costs=<projected_speed's --out>`,
which runs on any machine. Results go to OUT/unit_speed.json after every recipe, so a lease that ends
early keeps what was timed.
"""
from __future__ import annotations

import json
import os
import time
from typing import Callable, Optional

import numpy as np
from absl import flags

from nat_jax import recipes
from nat_jax.commands import cli
from nat_jax.errors import ConfigError
from nat_jax.files import write_atomic

flags.DEFINE_string('out', None, 'Directory for unit_speed.json.')
flags.DEFINE_list('batch_sizes', ['1', '64'], 'Batch sizes (sentences).')
flags.DEFINE_integer('width', 40, 'Source pieces per sentence (as benchmarks.projection.projected_speed --width).')
flags.DEFINE_integer('repeats', 30, 'Timed calls per program (after 3 warm-up calls).')
flags.DEFINE_list('recipes', [], 'Only these recipes (default: every recipe a projected plan needs).')
flags.DEFINE_string('chip', '', 'nat_jax.ahead_of_time.targets.CHIPS name of this device (default: from its device '
                    'kind).')
flags.DEFINE_string('compare', None, 'Instead of timing: a unit_speed.json to put beside the projection.')
flags.DEFINE_string('costs', None, 'With --compare: the --out of benchmarks.projection.projected_speed (its cached '
                    'costs).')
flags.DEFINE_list('cost_targets', ['v5e:2x2', 'h100'], 'With --compare: the targets whose cached costs are used '
                  '(the last; a call it could not cost from the one before).')
FLAGS = flags.FLAGS

# Whole decoders timed beside the calls (random weights: loops run to their length bound): the device
# loop's time per trip, which the host-dispatched calls overstate by their dispatch.
LOOPS = {'at_base': ['greedy', 'beam', 'jacobi_hgj'], 'at_e12d1': ['greedy'], 'hrt_wmt14_ende': ['hrt'],
         'royalflush_e12d1': ['hrt'], 'cmlm_wmt14_ende': ['mask_predict'], 'ibdec_wmt14_ende': ['greedy'],
         'sa_wmt14_ende': ['greedy'], 'ibsa_wmt14_ende': ['greedy'], 'imdec_wmt14_ende': ['greedy']}


def chip_of(device) -> str:
  """The CHIPS name of a local device by its kind ('NVIDIA H100 80GB HBM3' -> 'h100'), or ''."""
  kind = device.device_kind.lower()
  for name in ('h200', 'h100', 'a100'):
    if name in kind:
      return name
  return ''


def concrete(tree, seed: int):
  """Arrays for the abstract leaves of `tree` on their shardings: floats ~ N(0, 0.02^2), integer
  arrays random ids in [3, 100) (source pieces, tokens), integer scalars 8 (a decoding position)."""
  import jax
  import jax.numpy as jnp
  leaves, treedef = jax.tree_util.tree_flatten(tree)
  rng = np.random.default_rng(seed)
  out = []
  for a in leaves:
    if jnp.issubdtype(a.dtype, jnp.floating):
      x = (0.02 * rng.standard_normal(a.shape, dtype=np.float32)).astype(a.dtype)
    elif a.shape:
      x = rng.integers(3, 100, a.shape).astype(a.dtype)
    else:
      x = np.asarray(8, a.dtype)
    out.append(jax.device_put(x, a.sharding))
  return jax.tree_util.tree_unflatten(treedef, out)


def time_calls(fn, args, repeats: int) -> dict:
  """Compile seconds, then median / p10 / p90 milliseconds of `repeats` host-dispatched calls
  (nat_jax.metrics.timing.timed: every output ready) after 3 warm-up calls."""
  from nat_jax.metrics.timing import timed
  out, compile_s = timed(lambda: fn(*args))
  for _ in range(3):
    timed(lambda: fn(*args))
  ms = 1e3 * np.asarray([timed(lambda: fn(*args))[1] for _ in range(repeats)])
  return {'compile_s': round(compile_s, 2), 'ms': float(np.median(ms)), 'ms_p10': float(np.percentile(ms, 10)),
          'ms_p90': float(np.percentile(ms, 90)), 'repeats': repeats, 'out': out}


def recipe_units(recipe: str, units: set, target, batches: list[int], width: int, seed: int) -> dict:
  """{'<unit>|<batch>': timing} of the calls `units` of `recipe`, and 'loop <decoder>|<batch>' of its
  whole decoders in `LOOPS`."""
  from nat_jax.ahead_of_time import programs
  from nat_jax.ahead_of_time.programs import unit_label
  config = recipes.load_recipe(recipes.recipe_path(recipe))
  setup = programs.make_setup(config, target, dtype='bfloat16')
  params = concrete(setup.params, seed)
  todo = []
  for b in batches:
    todo += [p for p in programs.unit_programs(setup, b, width) if unit_label(p.name) in units]
  decoders = sorted(u[len('decode '):] for u in units if u.startswith('decode '))
  todo += programs.decode_programs(setup, decoders, batches, width=width)
  loops = programs.decode_programs(setup, LOOPS.get(recipe, []), batches, width=width)
  results = {}
  for i, program in enumerate(todo + loops):
    args = (params,) + tuple(concrete(a, seed + i + 1) for a in program.args[1:])
    timing = time_calls(program.fn, args, FLAGS.repeats)
    out = timing.pop('out')
    label, batch = unit_label(program.name), program.name.rsplit('b=', 1)[1]
    if i >= len(todo):
      label = 'loop ' + label[len('decode '):]
      timing['loop_steps'] = loop_trips(out.aux)
    results[f'{label}|{batch}'] = timing
    print(f'  {recipe:20s} {label:24s} b={batch:>3s}  {timing["ms"]:9.3f} ms  '
          f'(p10 {timing["ms_p10"]:.3f}, p90 {timing["ms_p90"]:.3f}; compile {timing["compile_s"]:.1f} s)'
          + (f'  {timing["loop_steps"]} loop steps' if 'loop_steps' in timing else ''), flush=True)
  return results


def loop_trips(aux: dict) -> int:
  """The device loop's trip count of a decoder call from its aux statistics: the batch's decoder
  passes (Jacobi, drafted), else its loop steps (beam), else the most iterations of a row."""
  for key in ('passes', 'loop_steps', 'iterations', 'steps'):
    if key in aux:
      return int(np.max(np.asarray(aux[key])))
  raise ConfigError(f'a looped decoder reports none of passes / loop_steps / iterations / steps: {sorted(aux)}')


def measure():
  import jax

  from benchmarks.projection import roofline
  from nat_jax.ahead_of_time import targets
  device = jax.devices()[0]
  chip_name = FLAGS.chip or chip_of(device)
  if chip_name not in targets.CHIPS:
    raise ConfigError(f'device {device.device_kind!r}: no chip figures for it; name one with --chip '
                      f'({sorted(targets.CHIPS)}).')
  target = targets.Target('local', targets.CHIPS[chip_name], (device,))
  batches = [int(b) for b in FLAGS.batch_sizes]
  needed = roofline.recipes_needed()
  recipes = FLAGS.recipes or list(needed)  # the plans' order: the AT baselines first
  os.makedirs(FLAGS.out, exist_ok=True)
  path = os.path.join(FLAGS.out, 'unit_speed.json')
  report = {'device': device.device_kind, 'chip': chip_name, 'jax': jax.__version__, 'width': FLAGS.width,
            'date': time.strftime('%Y-%m-%d'), 'units': {}}
  print(f'unit speed on {device.device_kind} (jax {jax.__version__}), bf16, width {FLAGS.width}, '
        f'batches {batches}', flush=True)
  for i, recipe in enumerate(recipes):
    for key, timing in recipe_units(recipe, needed.get(recipe, set()), target, batches, FLAGS.width,
                                    100 * i).items():
      report['units'][f'{recipe}|{key}'] = timing
    write_atomic(path, json.dumps(report, indent=2))
  print(f'wrote {path}')


def in_loop_step(units: dict, batch: int) -> Optional[float]:
  """Seconds of one at_base greedy step inside the device loop: the loop less its encoder, per step."""
  loop, encode = units.get(f'at_base|loop greedy|{batch}'), units.get(f'at_base|encode|{batch}')
  if not loop or not encode or not loop.get('loop_steps'):
    return None
  return (loop['ms'] - encode['ms']) / loop['loop_steps'] / 1e3


def projected_seconds(units: dict, costs: dict, chip, batches) -> tuple[Callable, dict]:
  """(seconds(column, plan, batch) -> a sentence's seconds or None, for the columns 'table' (the roofline with
  the chip table's overhead), 'fitted' (the overhead fitted to the measured in-loop greedy step) and
  'dispatched' (the plan composed of measured calls); the fitted overhead per batch)."""
  from benchmarks.projection import roofline
  fitted = {}
  for b in batches:
    step, cost = in_loop_step(units, b), costs.get(('at_base', 'step', b))
    if step is not None and cost is not None:
      fitted[b] = roofline.fitted_overhead(step, cost[0], cost[1], chip)
  columns = {'table': {b: roofline.projection_rows(costs, chip, (b,)) for b in batches},
             'fitted': {b: roofline.projection_rows(costs, chip, (b,), fitted[b]) for b in fitted}}
  calls = {tuple(k.split('|')[:2]) + (int(k.split('|')[2]),): t['ms'] / 1e3 for k, t in units.items()}
  dispatched = {(key, b): roofline.composed_seconds(plan, calls, b) for key, plan in roofline.PLANS.items()
                for b in batches}

  def seconds(column, key, b):
    if column == 'dispatched':
      return dispatched.get((key, b))
    rows = columns[column].get(b)
    ms = next((r[f'ms_b{b}'] for r in rows or [] if r['plan'] == key), None)
    return None if ms is None else ms / 1e3
  return seconds, fitted


def print_loops(units: dict, batches):
  """The whole decoders timed in their device loops, and greedy's in-loop step against one dispatched alone."""
  loops = sorted(k for k in units if k.split('|')[1].startswith('loop '))
  if loops:
    print('| whole decoder (device loop, random weights) | batch | ms | loop trips | ms per trip |')
    print('|---|---|---|---|---|')
    for key in loops:
      recipe, label, batch = key.split('|')
      t = units[key]
      print(f'| {recipe} {label[5:]} | {batch} | {t["ms"]:.3f} | {t["loop_steps"]} | '
            f'{t["ms"] / max(t["loop_steps"], 1):.4f} |')
  for b in batches:
    step = units.get(f'at_base|step|{b}')
    if in_loop_step(units, b) is not None and step:
      print(f'at_base greedy b={b}: {in_loop_step(units, b) * 1e3:.3f} ms per step inside the device loop '
            f'({units[f"at_base|loop greedy|{b}"]["loop_steps"]} steps) vs {step["ms"]:.3f} ms dispatched alone')


def compare(measured_path: str, costs_dir: str, cost_targets: list[str]):
  """Three columns per plan and per claimed pair (markdown on stdout): the roofline projection with
  the chip table's per-call overhead; the same with the overhead fitted to the measured in-loop greedy
  step (its time less its roofline time); and the plan composed of the measured host-dispatched calls."""
  from benchmarks.projection import roofline
  from benchmarks.projection.costs import cached_costs
  from nat_jax.ahead_of_time import targets
  with open(measured_path) as f:
    measured = json.load(f)
  units, width = measured['units'], measured['width']
  costs, borrowed = {}, []
  for name in cost_targets:  # the last target's costs, a call it could not cost from the one before
    costs, borrowed = cached_costs(costs_dir, name, width, costs or None)
  chip = targets.CHIPS[measured['chip']]
  batches = (1, 64)
  seconds, fitted = projected_seconds(units, costs, chip, batches)
  fmt = lambda x, spec: '-' if x is None else format(x, spec)  # noqa: E731
  names = ('table', 'fitted', 'dispatched')
  print(f'Measured on {measured["device"]} (jax {measured["jax"]}, {measured["date"]}), roofline of '
        f'{chip.name}; costs of {cost_targets[-1]} ({len(borrowed)} calls from {cost_targets[0]}). Per-call '
        f'overhead: table {chip.overhead_s * 1e6:.0f} us; fitted to the in-loop greedy step '
        + ', '.join(f'b={b} {fitted[b] * 1e6:.0f} us' for b in fitted) + '.')
  print('| plan | ms/sentence b=1: projected | fitted overhead | dispatched calls | sentences/s b=64: projected '
        '| fitted overhead | dispatched calls |')
  print('|---|---|---|---|---|---|---|')
  for key, plan in roofline.PLANS.items():
    b1 = [fmt(None if seconds(c, key, 1) is None else seconds(c, key, 1) * 1e3, '.3f') for c in names]
    b64 = [fmt(None if not seconds(c, key, 64) else 64 / seconds(c, key, 64), '.0f') for c in names]
    print(f'| {plan.label} | ' + ' | '.join(b1 + b64) + ' |')
  print("| pair | speed-up b=1: projected | fitted overhead | dispatched calls | b=64: projected | fitted overhead "
        "| dispatched calls | paper's claim |")
  print('|---|---|---|---|---|---|---|---|')
  for plan, base, claimed, _ in roofline.CLAIMS:
    ups = []
    for b in batches:
      for c in names:
        mine, theirs = seconds(c, plan, b), seconds(c, base, b)
        ups.append(fmt(theirs / mine if mine and theirs else None, '.2f') + ('x' if mine and theirs else ''))
    print(f'| {plan} vs {base} | ' + ' | '.join(ups) + f' | {claimed}x |')
  print_loops(units, batches)



def main(argv):
  if FLAGS.compare:
    if not FLAGS.costs:
      raise ConfigError('--compare needs --costs=<the --out of python -m benchmarks.projection.projected_speed>.')
    compare(FLAGS.compare, FLAGS.costs, FLAGS.cost_targets)
    return
  if not FLAGS.out:
    raise ConfigError('--out: the directory for unit_speed.json.')
  measure()


if __name__ == '__main__':
  cli.run_command(main)
