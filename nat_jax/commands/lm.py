"""Estimate the n-gram LM of `dag_beam` from a run's training targets.

  python -m nat_jax.lm --workdir=runs/dat_bible_tiny [--order=5] [--out=runs/dat_bible_tiny/lm5.arpa]
  python -m nat_jax.evaluate --workdir=runs/dat_bible_tiny --decoders=dag_beam \
      --decoder.lm=runs/dat_bible_tiny/lm5.arpa --decoder.gamma=0.1

The targets are what the run trained on: the teacher translations of its data.distill_dir when it
has one, else the first references of its training split, cut into the run's sentencepiece pieces
(the LM's words; <s>, </s> and <unk> are BOS, EOS and UNK). The model is interpolated Kneser-Ney
(nat_jax.decode.arpa.estimate), written as an ARPA file, the format KenLM's `lmplz` writes too:
an ARPA file from KenLM over the same pieces works with --decoder.lm as well.
"""
from __future__ import annotations

import os
import time

from absl import flags

from nat_jax.commands import cli
from nat_jax.data import load_split
from nat_jax.data.distilled import read_teacher_translations
from nat_jax.data.tokenizer import open_tokenizer
from nat_jax.decode import arpa
from nat_jax.errors import ConfigError
from nat_jax.run.workdir import CONFIG_FILE, read_run_config

FLAGS = flags.FLAGS


COMMAND_FLAGS = (
    cli.workdir_flag('A trained run: its config names the training data, its tokenizer the pieces.'),
    cli.Flag('order', 'int', 5, 'n of the n-gram model (the reference uses 5).', low=1, high=10),
    cli.Flag('out', 'str', '', 'ARPA file to write (default: <workdir>/lm<order>.arpa); an existing file is '
             'replaced only with --overwrite.', path='new_file'),
    cli.Flag('overwrite', 'bool', False, 'Replace an existing --out file (atomically: a failure keeps the old one).'),
)


def training_targets(workdir: str) -> tuple[list[str], str]:
  """(the target sentences the run in `workdir` trained on, a description)."""
  path = os.path.join(workdir or '', CONFIG_FILE)
  if not workdir or not os.path.exists(path):
    raise ConfigError(f'--workdir={workdir!r} holds no {CONFIG_FILE}: give the workdir of a run.')
  config = read_run_config(path)
  examples = load_split(config.data, 'train')
  distill_dir = config.data.distill_dir
  if distill_dir:
    return read_teacher_translations(distill_dir, 'train', examples), f'teacher translations in {distill_dir}'
  return [e.references[0] for e in examples], 'first references of the training split'


def main(argv):
  targets, described = training_targets(FLAGS.workdir)
  tokenizer = open_tokenizer(FLAGS.workdir)
  out = FLAGS.out or os.path.join(FLAGS.workdir, f'lm{FLAGS.order}.arpa')
  problem = cli.path_problem('out', out, 'new_file')  # the default path, or the one --out gave
  if problem:
    raise ConfigError(problem)
  if os.path.lexists(out) and not FLAGS.overwrite:
    raise ConfigError(f'--out={out} exists; give another path, or add --overwrite to replace it.')
  pieces = {i: w for w, i in tokenizer.word_ids().items()}
  t0 = time.time()
  sentences = [[pieces[i] for i in tokenizer.encode(text)] for text in targets if text.strip()]
  model = arpa.estimate(sentences, FLAGS.order)
  arpa.write_arpa(model, out)
  counts = [sum(len(g) == k for g in model) for k in range(1, FLAGS.order + 1)]
  print(f'{FLAGS.order}-gram LM of {len(sentences)} training targets ({described}), n-grams per order {counts}, '
        f'in {time.time() - t0:.0f}s -> {out}', flush=True)


console = cli.command(COMMAND_FLAGS, main)  # `nat-jax-lm`, `python -m nat_jax.lm`

if __name__ == '__main__':
  console()
