"""One benchmark over every method: which decoder gives the best quality for the speed I need, here?

  python -m nat_jax.benchmark \
      --runs=runs/at_student_bible_tiny:greedy+beam+jacobi_hgj,runs/fadat_bible_tiny:dag_lookahead,runs/hrt_bible_tiny \
      [--baseline=runs/at_student_bible_tiny] [--batch_sizes=1,8,64] [--split=test] [--max_sentences=N] \
      [--latency_sentences=100] [--batch1_runs=3] [--dtype=float32] [--quantization=none] [--average=1] \
      [--out=runs/benchmark]

A run is `workdir[@precision][:decoder+decoder...]` (no decoders: the run's test decoder, plus greedy
where the method has a left-to-right view); a decoder is `name` or `name/opt=value/...` (its
--decoder.<opt> options); `@bfloat16` / `@float16` loads that entry in half precision, `@int8` with its weight
matrices quantized to int8 (--quantization=int8). Peer rows
serve an AT run with another engine, measured the same way: `ct2_greedy` and `ct2_beam` (the run
exported to CTranslate2, nat_jax.formats.ct2; options quantization=float32|int8|..., threads=0 (every core)
or n, beam_size=4 for ct2_beam, which scores as our beam/alpha=0 does), e.g.
runs/at_bible_tiny:greedy+beam/alpha=0+ct2_greedy+ct2_greedy/threads=1+ct2_beam/quantization=int8.
Every run x decoder is measured in this one process on one device, as nat_jax.evaluation.benchmark says.
"""
from __future__ import annotations

from absl import flags

from nat_jax.commands import cli
from nat_jax.commands.measuring import MEASUREMENT_FLAGS, default_precision, run_from_flags
from nat_jax.evaluation.benchmark import parse_entry

FLAGS = flags.FLAGS


COMMAND_FLAGS = MEASUREMENT_FLAGS + (
    cli.Flag('runs', 'list', None, 'workdir[@precision][:decoder+decoder...],...', required=True),
    cli.Flag('baseline', 'str', None, 'The run (workdir[@precision] as in --runs) whose greedy and beam the speed-ups '
             'are against (default: the first run of method at, else the first run).'),
    cli.Flag('out', 'str', 'runs/benchmark', 'Output directory.', path='new_dir'),
)


def main(argv):
  run_from_flags(lambda: [parse_entry(spec, default_precision()) for spec in FLAGS.runs], FLAGS.baseline, FLAGS.out)


console = cli.command(COMMAND_FLAGS, main)  # `nat-jax-benchmark`, `python -m nat_jax.benchmark`


if __name__ == '__main__':
  console()
