"""Every paper-scale recipe compiled for TPU slices and an H100 node from this CPU
(docs/lab-notes/2026-11-25-accelerators.md).

  python -m benchmarks.projection.paper_scale --out=runs/paper_scale
  python -m benchmarks.projection.paper_scale --out=runs/paper_scale --recipes=dat_wmt14_ende --targets=v5e:2x2 \
      --programs=train

For each recipe x target: the gradient step at the largest batch shape and the optimizer step
(`--programs=train`), and with `decode` the recipe's own decoders at batch 1 and 64; when the gradient
step does not fit, the largest per-device batch that does at the recipe's tokens per update
(nat_jax.ahead_of_time.report.fit_train_step). One JSON per (recipe, target) in --out, written when that pair
is done, so an interrupted run resumes where it stopped (delete a file to redo it); then a markdown
table of all of them on stdout. A paper-scale compile takes minutes on 2 CPU cores.
"""
from __future__ import annotations

import os

os.environ.setdefault('JAX_PLATFORMS', 'cpu')
os.environ.setdefault('ALLOW_MULTIPLE_LIBTPU_LOAD', '1')
os.environ.setdefault('JAX_SKIP_CUDA_CONSTRAINTS_CHECK', '1')

import glob  # noqa: E402
import json  # noqa: E402

from absl import flags  # noqa: E402

from nat_jax import recipes
from nat_jax.commands import cli  # noqa: E402
from nat_jax.errors import ConfigError  # noqa: E402
from nat_jax.files import write_atomic  # noqa: E402

RECIPES = ('at_base', 'dat_wmt14_ende', 'fadat_wmt14_ende', 'cmlm_wmt14_ende', 'hrt_wmt14_ende', 'ibdec_wmt14_ende',
           'sa_wmt14_ende', 'ibsa_wmt14_ende', 'imdec_wmt14_ende', 'selfdraft_base', 'dat_drafter_base', 'at_e12d1',
           'royalflush_e12d1')
TARGETS = ('v5e:2x2', 'v5e:4x4', 'v4:2x2x2', 'v5p:2x2x1', 'h100x8')

flags.DEFINE_string('out', None, 'Directory of the per-(recipe, target) JSON results.')
flags.DEFINE_list('recipes', list(RECIPES), 'Recipes (names in configs/).')
flags.DEFINE_list('targets', list(TARGETS), 'Targets (nat_jax.ahead_of_time.targets).')
flags.DEFINE_list('programs', ['train'], 'train and/or decode (the recipe\'s own decoders at batch 1 and 64).')
FLAGS = flags.FLAGS


def result_path(recipe: str, target: str) -> str:
  return os.path.join(FLAGS.out, f'{recipe}@{target.replace(":", "_").replace("/", "_")}.json')


def run_one(recipe: str, target_name: str) -> dict:
  from nat_jax.ahead_of_time import report, targets
  config = recipes.load_recipe(recipes.recipe_path(recipe))
  target = targets.get_target(target_name)
  report.progress(f'== {recipe} on {target.describe()}')
  reports, fit = [], None
  if 'train' in FLAGS.programs:
    fit = report.fit_train_step(config, target)
    reports += fit.pop('recipe_report').reports
  if 'decode' in FLAGS.programs:
    reports += report.compile_recipe(config, target, 1, ('decode',), 'default', (1, 64)).reports
  result = report.RecipeReport(target, 1, {'data': len(target.devices), 'model': 1}, reports)
  return report.as_json([result], config=recipe, fit={target.name: fit} if fit else {}, model_parallel=1)


def row(data: dict) -> str:
  res = data['results'][0]
  programs = {p['program']: p for p in res['programs']}
  grad = next((p for name, p in programs.items() if name.startswith('train grad')), None)
  fit = (data.get('fit') or {}).get(res['target_name']) or {}
  best = fit.get('fits')
  gib = lambda b: f'{b / 2**30:.2f}'
  if grad is None:
    grad_text = '-'
  elif grad['compiled']:
    grad_text = f'{grad["program"][11:]}: {gib(grad["peak_bytes"])} / {gib(grad["memory_bytes"])}'
  else:
    grad_text = 'no: ' + grad['error'].splitlines()[0][:80]
  fits = '-' if not fit else ('no batch tried fits' if best is None else f'{best["grad_accum_steps"]} x '
                              f'{best["tokens_per_batch"]} tokens, model {best["model_parallel"]}')
  decoders = [p for p in res['programs'] if p['kind'] == 'decode']
  decode = ', '.join(f'{p["program"][7:]} {gib(p["peak_bytes"])}' + ('' if p['fits'] else ' (no)') for p in decoders)
  callbacks = sum(p['host_callbacks'] for p in res['programs'])
  return (f'| {data["config"]} | {res["target_name"]} | {grad_text} | {fits} | {decode or "-"} | {callbacks} |')


def main(argv):
  if not FLAGS.out:
    raise ConfigError('--out=<directory> is required.')
  os.makedirs(FLAGS.out, exist_ok=True)
  for recipe in FLAGS.recipes:
    if recipes.recipe_path(recipe) is None:
      raise ConfigError(f'--recipes: no recipe {recipe!r} in configs/.')
  for target in FLAGS.targets:  # target-major: every recipe on the first target first
    for recipe in FLAGS.recipes:
      path = result_path(recipe, target)
      if not os.path.exists(path):
        write_atomic(path, json.dumps(run_one(recipe, target), indent=2))
  print('| recipe | target | gradient step (largest batch): peak / usable GiB per device | the recipe\'s update '
        'fits as (accumulation x tokens per micro-batch, model parallelism) | decoders b=1 / b=64: peak GiB | '
        'host callbacks |')
  print('|---|---|---|---|---|---|')
  for path in sorted(glob.glob(os.path.join(FLAGS.out, '*.json'))):
    with open(path) as f:
      print(row(json.load(f)))


if __name__ == '__main__':
  cli.run_command(main)
