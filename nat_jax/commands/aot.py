"""Compile a recipe for a TPU slice or GPU node from this machine, no accelerator needed.

  python -m nat_jax.aot --config=configs/at_base.py --target=v5e:2x2
  python -m nat_jax.aot --config=configs/dat_wmt14_ende.py --target=v5e:2x2,v4:2x2x2,v5p:2x2x1,h100x8 \
      --programs=train --buckets=largest --fit --json=aot_dat.json
  python -m nat_jax.aot --config=configs/at_base.py --target=v5e:4x4 --model_parallel=2 --decoders=greedy,beam \
      --batch_sizes=1,64 --config.max_len=200 --decoder.beam_size=5

Builds the recipe's real train state, optimizer and sharding rules over a (data, model) mesh of the
target's devices, its real batch shapes (every bucket, or the largest), and compiles: the gradient
step (run `grad_accum_steps` times per update) and the optimizer step, the evaluation step, and the
decoders (default: every decoder the method offers with default options) at each batch size with the
recipe's length bounds; `--programs=units` adds one step / pass of each decoding family, compiled
alone for costing. Per program: compiled or the compiler's error, per-device bytes against the chip's
usable memory, FLOPs and bytes accessed, collectives, host callbacks and transfers, compile seconds
(nat_jax.ahead_of_time.analysis). A table on stdout, the same in --json. Exit 0 when every program compiles
and fits, 1 with one `error:` line naming what did not (2: bad input). `--fit`: when the gradient
step does not fit, the largest per-device batch that does, at the recipe's tokens per update.
Needs the compilers: pip install -e ".[aot]".
"""
from __future__ import annotations

import os

os.environ.setdefault('JAX_PLATFORMS', 'cpu')  # compile-only devices need no backend; keep libtpu free
os.environ.setdefault('ALLOW_MULTIPLE_LIBTPU_LOAD', '1')
os.environ.setdefault('JAX_SKIP_CUDA_CONSTRAINTS_CHECK', '1')

import json  # noqa: E402

from absl import flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from nat_jax import recipes  # noqa: E402
from nat_jax.commands import cli  # noqa: E402
from nat_jax.errors import CheckFailed, ConfigError  # noqa: E402
from nat_jax.files import write_atomic  # noqa: E402

FLAGS = flags.FLAGS


COMMAND_FLAGS = (
    cli.recipe_flag(),
    cli.Flag('target', 'str', None, 'Comma-separated targets: v5e:2x2, v5e:4x4, v6e:2x2, v5p:2x2x1, v4:2x2x2, v3:2x2 '
             '(TPU slices; "/<n>" for n slices), h100, h100x8, a100, a100x8 (GPUs of one node).', required=True),
    cli.Flag('model_parallel', 'int', 1, "Devices per model replica (the mesh's model axis).", low=1, high=1 << 16),
    cli.Flag('programs', 'list', ['train', 'eval', 'decode'], 'Which programs.',
             choices=('train', 'eval', 'decode', 'units'), required=True),
    cli.Flag('decoders', 'str', 'all', "all (every decoder the method offers), default (the recipe's eval/test "
             'decoders) or comma-separated names.'),
    cli.Flag('batch_sizes', 'list', ['1', '64'], 'Decoding batch sizes (sentences).', items='int', low=1,
             high=cli.MAX_ROWS, required=True),
    cli.Flag('buckets', 'enum', 'all', 'Training batch shapes: every bucket or the largest.',
             choices=('all', 'largest')),
    cli.dtype_flag(None, "Decoding precision with --programs=decode or units (default: the recipe's)"),
    cli.quantization_flag('with --programs=decode or units; int8 by XLA\'s dot'),
    cli.Flag('drafter', 'str', '', 'A recipe whose run drafts for `drafted` (e.g. configs/dat_drafter_base.py): '
             'compiled with abstract parameters.'),
    cli.Flag('fit', 'bool', False, 'When the gradient step does not fit: search the largest per-device batch that '
             'does (same tokens per update), then model parallelism.'),
    cli.Flag('json', 'str', '', 'Also write the report here (JSON).', path='new_file'),
)


def drafter_loader(mesh):
  """load_run for `drafted`: the --drafter recipe (any spec names it) with abstract parameters on `mesh`."""
  from nat_jax.ahead_of_time import programs
  if not FLAGS.drafter:
    return None
  path = recipes.recipe_path(FLAGS.drafter)
  if path is None:
    raise ConfigError(f'--drafter={FLAGS.drafter}: no such recipe file or recipe name.')
  return programs.abstract_run_loader(lambda spec: recipes.load_recipe(path), mesh)


def main(argv, decoder_options: dict[str, str]):  # decoder_options: for the chosen decoders that have each
  from nat_jax.ahead_of_time import report, targets
  from nat_jax.parallel import sharding
  from nat_jax.training.config import validate_config
  config = FLAGS.config
  validate_config(config)
  sizes = [int(b) for b in FLAGS.batch_sizes]  # checked: COMMAND_FLAGS
  results, fits = [], {}
  for name in [t for t in FLAGS.target.split(',') if t.strip()]:
    target = targets.get_target(name)
    report.progress(target.describe())
    if FLAGS.fit:
      fits[target.name] = report.fit_train_step(config, target, FLAGS.model_parallel)
      fits[target.name].pop('recipe_report')
    loader = drafter_loader(sharding.make_mesh(1, target.devices))
    results.append(report.compile_recipe(config, target, FLAGS.model_parallel, FLAGS.programs, FLAGS.decoders, sizes,
                                         FLAGS.buckets == 'largest', loader, decoder_options,
                                         dtype=FLAGS.dtype, quantization=FLAGS.quantization))
  print(report.table(results))
  for name, found in fits.items():
    best = found['fits']
    print(f'\n{name}: the recipe\'s update of {found["update_tokens"]} tokens ' +
          (f'fits as {best["grad_accum_steps"]} x {best["tokens_per_batch"]} tokens, model_parallel='
           f'{best["model_parallel"]} ({best["peak_gib"]} GiB per device)' if best else 'does not fit any batch tried'))
  if FLAGS.json:
    write_atomic(FLAGS.json, json.dumps(report.as_json(results, config=config_flags.get_config_filename(
        FLAGS['config']), fit=fits, model_parallel=FLAGS.model_parallel), indent=2))
  problem = report.summary(results)
  if problem:
    raise CheckFailed(problem)


# `nat-jax-aot`, `python -m nat_jax.aot`: not re-executed for huge pages (it compiles, it does not train)
console = cli.command(COMMAND_FLAGS, main, decoder_options=True)


if __name__ == '__main__':
  console()
