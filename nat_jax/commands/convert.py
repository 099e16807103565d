"""Convert a Marian / OPUS-MT model (Hugging Face layout) into a nat_jax run (the conversion: nat_jax.formats.marian).

  python -m nat_jax.convert --from=<snapshot folder, or a model id such as Helsinki-NLP/opus-mt-en-de when the
      machine is online> --workdir=runs/opus_en_de [--target_language=de (multi-target models)]

The run is an 'at' run that every command takes: translate (greedy, beam, jacobi, drafted), evaluate,
benchmark, serve, the Translator, lm, aot and distill (students train on its translations and can share its
tokenizer: --config.tokenizer_from=<this run>). Its default decoder and options are the checkpoint's
generation settings (opus-mt: beam 4, as generate). A model id needs `pip install nat_jax[convert]`
(huggingface_hub) and the network; a folder needs neither. Nothing is written until the model is read and
checked; --workdir must not exist or be empty.
"""
from __future__ import annotations

import os
import sys
import time

from absl import flags

from nat_jax.commands import cli
from nat_jax.errors import ConfigError
from nat_jax.formats.marian import read_snapshot, write_run

FLAGS = flags.FLAGS

COMMAND_FLAGS = (
    cli.Flag('from', 'str', None, 'A Hugging Face snapshot folder of a Marian model (config.json, vocab.json, '
             'source.spm, target.spm, weights), or a model id to download (online, huggingface_hub installed).',
             required=True),
    cli.Flag('workdir', 'str', None, 'The run to write (must not exist, or be empty).', path='new_dir', required=True),
    cli.Flag('target_language', 'str', '', 'A multi-target model\'s target language (its >>xx<< tag, without the '
             'brackets); empty for a model with one target language.'),
)


def snapshot_folder(source: str) -> str:
  """`source` if it is a folder, else the local snapshot of model id `source` (downloaded by huggingface_hub)."""
  if os.path.isdir(source) or os.sep in source.strip('/').split('/', 1)[-1] or source.count('/') != 1:
    return source
  try:
    from huggingface_hub import snapshot_download
  except ImportError:
    raise ConfigError(f'--from={source}: no such folder, and downloading a model id needs huggingface_hub '
                      '(pip install nat_jax[convert]) and the network; or pass a downloaded snapshot folder.') from None
  print(f'downloading {source} ...', file=sys.stderr, flush=True)
  try:
    return snapshot_download(source, allow_patterns=['*.json', '*.spm', 'flax_model.msgpack', 'model.safetensors'])
  except Exception as e:  # offline, unknown id, gated model: huggingface_hub's many error types
    raise ConfigError(f'--from={source}: could not download it ({type(e).__name__}: {str(e)[:160]}).') from None


def main(argv):
  workdir = FLAGS.workdir
  if os.path.isdir(workdir) and os.listdir(workdir):
    raise ConfigError(f'--workdir={workdir} is not empty: convert into a new directory.')
  folder = snapshot_folder(FLAGS['from'].value)
  t0 = time.time()
  config, pieces, prefix, params = read_snapshot(folder, FLAGS.target_language)
  m, tag = config.model, f', source tag {prefix}' if prefix else ''
  defaults = dict(config.decoder_defaults.get(config.default_decoder, {}))
  print(f'converting {folder}: {m.enc_layers}+{m.dec_layers} layers, d_model {m.d_model}, {m.num_heads} heads, FFN '
        f'{m.d_ff} ({m.activation}), vocabulary {len(pieces) - 2:,} (+ our bos and mask){tag}; decoding default '
        f'{config.default_decoder} {defaults}, at most {config.max_decode_len} tokens ...', file=sys.stderr, flush=True)
  write_run(workdir, config, pieces, prefix, params, folder)
  print(f'wrote {workdir} in {time.time() - t0:.1f} s. Translate: echo "..." | python -m nat_jax.translate '
        f'--workdir={workdir}', file=sys.stderr, flush=True)


console = cli.command(COMMAND_FLAGS, main)  # `nat-jax-convert`, `python -m nat_jax.convert`


if __name__ == '__main__':
  console()
