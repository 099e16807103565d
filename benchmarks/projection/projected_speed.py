"""Projected decoding speed at base size on one accelerator chip, from compiled costs
(docs/lab-notes/2026-11-25-accelerators.md).

  python -m benchmarks.projection.projected_speed --out=runs/projected [--targets=h100,v5e:2x2]

PROJECTED, NOT MEASURED. For every plan of benchmarks/projection/roofline.py (each method's default decoder and the
baselines the seeds compare with), the sequential calls it makes are compiled alone for ONE chip of
each target (a step over a 64-slot cache, a verification pass, a fill pass, a whole loop-free DAG
decoder, the encoder), in bf16 as a run decodes with --dtype=bfloat16, at batch 1 and 64 with
sources of --width tokens; each call's FLOPs and bytes (the TPU compiler's cost analysis; for a GPU
XLA's HLO cost analysis of the optimized GPU module) go on that chip's roofline plus its stated
per-call overhead, times the calls per sentence measured with the trained tiny runs on the Acts
test set. A GPU program XLA could compile only without Triton GEMMs has no cost of its own: the
first target's cost of that call stands in (said in the JSON). Costs are cached per (recipe,
target) in --out (resumable); tables on stdout: projected ms per sentence (batch 1) and sentences/s
(batch 64) per plan, and each paper's claimed speed-up beside ours.
"""
from __future__ import annotations

import os

os.environ.setdefault('JAX_PLATFORMS', 'cpu')
os.environ.setdefault('ALLOW_MULTIPLE_LIBTPU_LOAD', '1')
os.environ.setdefault('JAX_SKIP_CUDA_CONSTRAINTS_CHECK', '1')

import dataclasses  # noqa: E402
import json  # noqa: E402

from absl import flags  # noqa: E402

from nat_jax.commands import cli  # noqa: E402
from nat_jax.errors import ConfigError  # noqa: E402
from nat_jax.files import write_atomic  # noqa: E402

flags.DEFINE_string('out', None, 'Directory of the cached per-(recipe, target) costs and the projection JSON.')
flags.DEFINE_list('targets', ['v5e:2x2', 'h100'], 'Targets; one chip of each (the first\'s costs stand in '
                  'for a call another cannot cost).')
flags.DEFINE_list('batch_sizes', ['1', '64'], 'Batch sizes (sentences).')
flags.DEFINE_integer('width', 40, 'Source tokens per sentence compiled for (Acts: mean source ~30 pieces + EOS, '
                     'rounded up to the inference widths, multiples of 8).')
flags.DEFINE_float('overhead_us', -1.0, 'Per-call overhead in microseconds (default: the chip table\'s).')
FLAGS = flags.FLAGS


def main(argv):
  from benchmarks.projection import roofline
  from benchmarks.projection.costs import cached_costs
  from nat_jax.ahead_of_time import targets
  if not FLAGS.out:
    raise ConfigError('--out=<directory> is required.')
  os.makedirs(FLAGS.out, exist_ok=True)
  batches = [int(b) for b in FLAGS.batch_sizes]
  overhead = None if FLAGS.overhead_us < 0 else FLAGS.overhead_us * 1e-6
  summary, first = {}, None
  for name in FLAGS.targets:
    full = targets.get_target(name)
    chip = full.chip
    target = dataclasses.replace(full, name=f'{full.name} (one chip)', devices=full.devices[:1])
    costs, borrowed = cached_costs(FLAGS.out, name, FLAGS.width, first, target, batches)
    first = first or costs
    rows = roofline.projection_rows(costs, chip, batches, overhead)
    claims = roofline.claim_rows(rows, batches)
    summary[name] = {'chip': dataclasses.asdict(chip), 'width': FLAGS.width, 'rows': rows, 'claims': claims,
                     'costs_from_the_first_target': borrowed}
    print(f'\n{chip.name}: peak {chip.peak_flops / 1e12:.0f} TFLOP/s bf16, {chip.bandwidth / 1e9:.0f} GB/s, '
          f'{(chip.overhead_s if overhead is None else overhead) * 1e6:.0f} us per call (PROJECTED, not measured; '
          f'{len(borrowed)} calls costed on {FLAGS.targets[0]})')
    print('| plan | ms per sentence, b=1 | sentences/s, b=64 | calls per sentence from |')
    print('|---|---|---|---|')
    for r in rows:
      print(f'| {r["label"]} | {r["ms_b1"]:.3f} | {r["sent_s_b64"]:.0f} | {r["source"]} |')
    print('| plan vs baseline | projected speed-up b=1 | b=64 | seed\'s claim | within 2x |')
    print('|---|---|---|---|---|')
    for c in claims:
      print(f'| {c["plan"]} vs {c["baseline"]} | {c["speedup_b1"]:.2f}x | {c["speedup_b64"]:.2f}x | '
            f'{c["claimed"]}x ({c["what"]}) | {"yes" if c["within_2x"] else "**no**"} |')
  write_atomic(os.path.join(FLAGS.out, f'projection_w{FLAGS.width}.json'), json.dumps(summary, indent=2))


if __name__ == '__main__':
  cli.run_command(main)
