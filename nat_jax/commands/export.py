"""Export a trained autoregressive run to CTranslate2 (the conversion and decoding: nat_jax.formats.ct2).

  python -m nat_jax.export --workdir=runs/at_bible_tiny --format=ctranslate2 --out=exports/at_ct2 \
      [--quantization=int8|int8_float32|float32] [--checkpoint=latest|best] [--average=1]

Needs the `ct2` extra (pip install -e .[ct2]). Only method 'at' maps; every other method is an
error naming what has no CTranslate2 counterpart, raised from config.json before any parameters
load. --out must not exist or be empty; a failed export leaves nothing there. What --out holds and
how the model maps: nat_jax/formats/ct2.py.
"""
from __future__ import annotations

import os
import sys
import time

from absl import flags

from nat_jax.commands import cli
from nat_jax.formats.ct2 import (
  FORMATS,
  METADATA_FILE,
  QUANTIZATIONS,
  check_exportable,
  check_out_dir,
  export_ctranslate2,
  require_ctranslate2,
  run_config,
)
from nat_jax.run.workdir import load_run

FLAGS = flags.FLAGS


# --- the command line ----------------------------------------------------------------------------
COMMAND_FLAGS = (
    cli.workdir_flag("Run directory written by nat_jax.train (method 'at')."),
    cli.Flag('format', 'enum', 'ctranslate2', 'Export format.', choices=tuple(FORMATS)),
    cli.Flag('out', 'str', None, 'Output directory (must not exist, or be empty).', path='new_dir', required=True),
    cli.Flag('quantization', 'enum', 'float32', 'Weight type of the exported model (CTranslate2 quantization).',
             choices=tuple(QUANTIZATIONS)),
    cli.checkpoint_flag(),
    cli.average_flag(),
)


def main(argv):
  check_out_dir(FLAGS.out)
  ctranslate2 = require_ctranslate2()
  config = run_config(FLAGS.workdir)
  if config is not None:
    check_exportable(config)  # before loading any parameters
  t0 = time.time()
  run = load_run(FLAGS.workdir, FLAGS.checkpoint, FLAGS.average, 'float32')
  c = run.method.model.cfg
  step = (run.meta[0] or {}).get('step') if run.meta else None
  print(f'exporting {FLAGS.workdir} (method {run.config.model.method}, step {step}, {c.enc_layers}+{c.dec_layers} '
        f'layers, d_model {c.d_model}, '
        f'vocabulary {run.tokenizer.vocab_size}) to CTranslate2 {ctranslate2.__version__}, '
        f'{FLAGS.quantization} weights ...', file=sys.stderr, flush=True)
  out = export_ctranslate2(run, FLAGS.out, FLAGS.quantization, source=FLAGS.workdir)
  size = os.path.getsize(os.path.join(out, 'model.bin')) / 2**20
  print(f'wrote {out} ({", ".join(sorted(os.listdir(out)))}; model.bin {size:.1f} MiB) in {time.time() - t0:.1f} s. '
        f'Translate sentencepiece pieces without EOS with min_decoding_length=0 (see {METADATA_FILE}).',
        file=sys.stderr, flush=True)


console = cli.command(COMMAND_FLAGS, main)  # `nat-jax-export`, `python -m nat_jax.export`


if __name__ == '__main__':
  console()
