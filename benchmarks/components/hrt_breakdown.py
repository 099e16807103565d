"""Where an HRT decode spends its time: encoder, Skip-AT loop, Skip-CMLM fill, against C_d = 1.

  python -m benchmarks.components.hrt_breakdown --workdir=runs/hrt_bible_tiny [--batch_sizes=1,64] [--repeats=5]

For each batch size (the first sentences of the test split, one padded batch): median time of the
jitted encoder alone, of Skip-AT greedy decoding alone (encoder + loop; the `greedy` decoder on the
method's Skip-AT view), of the whole `hrt` decode (b_at = b_nat = 1) and of the same model in C_d = 1
mode (`hrt/chunk=1`: encoder + a left-to-right loop of every token), with the loop steps each took.
fill = hrt - Skip-AT; the C_d = k speed-up is C_d = 1 / hrt. BLEU and latency over many sentences
come from `python -m nat_jax.benchmark`.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from absl import flags

from benchmarks.components.decode_speed import first_batch  # also defines --workdir, --batch_sizes, --repeats
from nat_jax import decode
from nat_jax.commands import cli
from nat_jax.decode import HybridScorer
from nat_jax.metrics.timing import machine, median_timed
from nat_jax.run.workdir import load_run

FLAGS = flags.FLAGS


def main(_):
  cli.quiet_logs()
  run = load_run(FLAGS.workdir)
  build = decode.method_view(run.method, HybridScorer, 'hrt_breakdown')
  encode = jax.jit(lambda p, src: build(p).skip_scorer(build(p).chunk).encode(src))
  fns = {'skip_at': decode.build_decoder(run.method, 'greedy', {})[0],  # greedy on the Skip-AT view
         'hrt': decode.build_decoder(run.method, 'hrt', {})[0],
         'cd1': decode.build_decoder(run.method, 'hrt', {'chunk': '1'})[0]}
  print(f'HRT run {FLAGS.workdir} (k = {run.method.chunk}); times in ms, median of {FLAGS.repeats}\n')
  print('| rows | encoder | Skip-AT (enc + loop) | Skip-AT steps | fill (hrt - Skip-AT) | hrt | C_d = 1 '
        '| C_d = 1 steps '
        '| C_d = k speed-up |')
  print('|---|---|---|---|---|---|---|---|---|')
  for rows in map(int, FLAGS.batch_sizes):
    src = first_batch(run, rows)
    t = {}
    _, t['enc'] = median_timed(lambda: encode(run.params, src), FLAGS.repeats)
    steps = {}
    for name, fn in fns.items():
      out, t[name] = median_timed(lambda: fn(run.params, src), FLAGS.repeats)
      steps[name] = int(jnp.max(out.aux['steps']))
    print(f'| {rows} | {1e3 * t["enc"]:.1f} | {1e3 * t["skip_at"]:.1f} | {steps["skip_at"]} | '
          f'{1e3 * (t["hrt"] - t["skip_at"]):.1f} | {1e3 * t["hrt"]:.1f} | {1e3 * t["cd1"]:.1f} | {steps["cd1"]} | '
          f'{t["cd1"] / t["hrt"]:.2f} |', flush=True)
  print(f'\nmachine: {machine()}')


if __name__ == '__main__':
  cli.run_command(main)
