"""Serve a trained run over HTTP, batching concurrent requests together.

  python -m nat_jax.serve --workdir=runs/at_bible_tiny [--decoder=greedy --decoder.<opt>=<v>] \
      [--host=127.0.0.1 --port=8000] [--max_batch=64 --max_wait_ms=0] [--allowed_decoders=greedy,beam]

  curl -s localhost:8000/v1/translate -H 'Content-Type: application/json' \
      -d '{"text": ["In the beginning God created the heavens and the earth."]}'

Routes, limits and error answers: nat_jax.server. A LibreTranslate client works unchanged against
`POST /translate` and `GET /languages`. It listens on loopback unless `--host` says otherwise; there is
no authentication unless `--api_key_file` names a file holding a key, so do not expose it to a network
you do not trust without one. SIGTERM or Ctrl-C: stop accepting, finish the requests in flight (at most
`--timeout_s` more), exit 0.
"""
from __future__ import annotations

import os
import signal

from absl import flags

from nat_jax import cli, hugepages
from nat_jax.decode import describe_options
from nat_jax.errors import ConfigError, log
from nat_jax.models.transformer import DTYPES

FLAGS = flags.FLAGS
DECODER_OVERRIDES: dict[str, str] = {}  # --decoder.<opt>=<v>, taken out of argv before absl parses it


def define_flags():
  """The command line's flags (defined only when run as a program, so the module imports anywhere)."""
  flags.DEFINE_string('workdir', None, 'Run directory written by nat_jax.train.')
  flags.DEFINE_string('decoder', None, 'Default decoder (default: greedy where the method decodes left to right, '
                      'else the run\'s test decoder); options via --decoder.<opt>=<v>.\n' + describe_options())
  flags.DEFINE_list('allowed_decoders', [], 'Other decoders a request may ask for (with their default options '
                    'or its own), e.g. greedy,beam. Default: only --decoder.')
  flags.DEFINE_string('host', '127.0.0.1', 'Address to listen on (0.0.0.0: every interface; see --api_key_file).')
  flags.DEFINE_integer('port', 8000, 'Port to listen on.')
  flags.DEFINE_integer('max_batch', 64, 'Sentences decoded together at most.')
  flags.DEFINE_float('max_wait_ms', 0.0, 'How long the oldest waiting sentence waits for others to batch with '
                     '(0: the worker takes whatever waits whenever it is free).')
  flags.DEFINE_integer('max_queue', 4096, 'Sentences waiting at most; more are refused with 503 and Retry-After.')
  flags.DEFINE_integer('max_sentences', 256, 'Sentences per request at most (413 above).')
  flags.DEFINE_integer('max_chars', 100_000, 'Characters per request at most (413 above).')
  flags.DEFINE_float('timeout_s', 60.0, 'A request not answered in this many seconds gets 504.')
  flags.DEFINE_string('api_key_file', None, 'File holding an API key every request must send '
                      '(Authorization: Bearer <key>, or LibreTranslate\'s api_key field).')
  flags.DEFINE_enum('warmup', 'narrow', ['none', 'narrow', 'all'], 'Before /health reports ready, compile every '
                    'row count at the narrowest source width (narrow) or at every width (all).')
  flags.DEFINE_enum('checkpoint', 'latest', ['latest', 'best'], 'Which checkpoints to load.')
  flags.DEFINE_integer('average', 1, 'Average the parameters of this many checkpoints.')
  flags.DEFINE_enum('dtype', 'float32', list(DTYPES), 'Inference precision.')


def read_api_key(path: str) -> str:
  cli.check_input_file(path, 'api_key_file')
  with open(path, encoding='utf-8') as f:
    key = f.read().strip()
  if not key:
    raise ConfigError(f'--api_key_file={path} is empty; put the key in it.')
  return key


def main(argv):
  import uvicorn
  from nat_jax.server import Service, ServeConfig
  from nat_jax.translator import Translator

  if len(argv) > 1:
    raise ConfigError(f'unexpected arguments: {argv[1:]}')
  if not FLAGS.workdir:
    raise ConfigError('--workdir=<dir of a trained run> is required.')
  config = ServeConfig(max_batch=FLAGS.max_batch, max_wait_ms=FLAGS.max_wait_ms, max_queue=FLAGS.max_queue,
                       max_sentences=FLAGS.max_sentences, max_chars=FLAGS.max_chars, timeout_s=FLAGS.timeout_s,
                       allowed_decoders=tuple(FLAGS.allowed_decoders), warmup=FLAGS.warmup,
                       api_key=read_api_key(FLAGS.api_key_file) if FLAGS.api_key_file else None)
  translator = Translator(FLAGS.workdir, FLAGS.decoder, batch_size=FLAGS.max_batch, average=FLAGS.average,
                          checkpoint=FLAGS.checkpoint, dtype=FLAGS.dtype, **DECODER_OVERRIDES)
  service = Service(translator, config)
  if FLAGS.host not in ('127.0.0.1', 'localhost', '::1') and config.api_key is None:
    log.warning('listening on %s without --api_key_file: anyone who reaches this port can use the server.',
                FLAGS.host)
  server = uvicorn.Server(uvicorn.Config(service.app, host=FLAGS.host, port=FLAGS.port, log_level='warning',
                                         timeout_graceful_shutdown=int(config.timeout_s) + 1, lifespan='on'))
  # uvicorn stops gracefully on SIGTERM / SIGINT, then raises the signal again for the handler found
  # at start: this one lets the process end with status 0 after a graceful stop.
  for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, lambda *_: None)
  log.info('serving %s (decoder %s %s) on http://%s:%d', os.path.normpath(FLAGS.workdir), translator.decoder,
           translator.options, FLAGS.host, FLAGS.port)
  server.run()
  if not server.started:
    raise ConfigError(f'could not listen on {FLAGS.host}:{FLAGS.port} (in use, or not an address of this machine).')


def console():
  """The `nat-jax-serve` command (a console script of the installed package): the same as
  `python -m nat_jax.serve`."""
  hugepages.reexec_command_line()
  define_flags()
  cli.run_command(main, DECODER_OVERRIDES)


if __name__ == '__main__':
  console()
