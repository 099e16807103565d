"""Train a model of any registered method from a recipe, resuming the run its workdir holds.

  python -m nat_jax.train --config=configs/at_bible_tiny.py --workdir=runs/tiny [--config.<key>=<value> ...]

Writes into the workdir: config.json, spm.model, checkpoints/ (latest N), best/ (best N by
validation BLEU), metrics.jsonl, the same scalars as TensorBoard event files in tensorboard/
(`tensorboard --logdir=<workdir>`) and, at the end, test_results.json. Train and validation rows carry
`cpu_hours`: the process CPU time spent on training so far (every thread, compilation included,
validation excluded), summed over resumes through the checkpoints' `cpu_seconds`, which is the
recipe's cost on a shared machine where wall-clock is not. Restarting the same command
resumes from the newest readable checkpoint (data position and RNG are functions of the step,
so an interrupted run ends with the same parameters as an uninterrupted one). SIGTERM or Ctrl-C
(SIGINT) saves a checkpoint, then exits with one `stopped by SIGTERM: saved checkpoint at step N; ...`
line and status 143 (130 for Ctrl-C); a signal during the final test pass ends the same way (the
checkpoints are whole: rerunning tests again).
"""
from __future__ import annotations

import jax
from absl import flags

from nat_jax.commands import cli
from nat_jax.training.loop import train_and_evaluate

FLAGS = flags.FLAGS


COMMAND_FLAGS = (
    cli.recipe_flag(),
    cli.Flag('workdir', 'str', None, 'Run directory (checkpoints, tokenizer, metrics).', path='new_dir', required=True),
    cli.Flag('distributed', 'bool', False, 'Call jax.distributed.initialize() (auto-detected on TPU pods / SLURM).'),
    cli.Flag('coordinator_address', 'str', None, 'host:port of process 0 for multi-process runs.'),
    cli.Flag('num_processes', 'int', None, 'Number of processes (multi-process runs).', low=1),
    cli.Flag('process_id', 'int', None, 'This process (multi-process runs).', low=0),
)


def initialize_distributed():
  if FLAGS.coordinator_address:
    jax.distributed.initialize(FLAGS.coordinator_address, FLAGS.num_processes, FLAGS.process_id)
  elif FLAGS.distributed:
    jax.distributed.initialize()


def main(argv):
  initialize_distributed()
  train_and_evaluate(FLAGS.config, FLAGS.workdir)  # SIGTERM / Ctrl-C: saved, then errors.Stopped (exit 143 / 130)


console = cli.command(COMMAND_FLAGS, main)  # `nat-jax-train`, `python -m nat_jax.train`


if __name__ == '__main__':
  console()
