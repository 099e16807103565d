"""Serve a trained run over HTTP, batching concurrent requests together.

  python -m nat_jax.serve --workdir=runs/at_bible_tiny [--decoder=greedy --decoder.<opt>=<v>] \
      [--host=127.0.0.1 --port=8000] [--max_batch=64 --max_wait_ms=20] [--allowed_decoders=greedy,beam]

  curl -s localhost:8000/v1/translate -H 'Content-Type: application/json' \
      -d '{"text": ["In the beginning God created the heavens and the earth."]}'

Routes, limits and error answers: nat_jax.deploy.server. A LibreTranslate client works unchanged against
`POST /translate` and `GET /languages`. It listens on loopback unless `--host` says otherwise; there is
no authentication unless `--api_key_file` names a file holding a key, so do not expose it to a network
you do not trust without one. SIGTERM or Ctrl-C: stop accepting, finish the requests in flight (at most
`--timeout_s` more), exit 0.
"""
from __future__ import annotations

import importlib.util
import os
import signal

from absl import flags

from nat_jax.commands import cli
from nat_jax.decode import DECODERS, describe_options
from nat_jax.errors import ConfigError, log
from nat_jax.models.transformer import INFERENCE_DTYPES

FLAGS = flags.FLAGS
DECODER_OVERRIDES: dict[str, str] = {}  # --decoder.<opt>=<v>, taken out of argv before absl parses it


COMMAND_FLAGS = (
    cli.workdir_flag(),
    cli.Flag('decoder', 'str', None, "Default decoder (default: greedy where the method decodes left to right, else "
             "the run's test decoder); options via --decoder.<opt>=<v>.\n" + describe_options(),
             choices=tuple(sorted(DECODERS))),
    cli.Flag('allowed_decoders', 'list', [], 'Other decoders a request may ask for (with their default options or its '
             'own), e.g. greedy,beam. Default: only --decoder.', choices=tuple(sorted(DECODERS))),
    cli.Flag('host', 'str', '127.0.0.1', 'Address to listen on (0.0.0.0: every interface; see --api_key_file).'),
    cli.Flag('port', 'int', 8000, 'Port to listen on.', low=0, high=65535),
    cli.Flag('max_batch', 'int', 64, 'Sentences decoded together at most.', low=1, high=cli.MAX_ROWS),
    cli.Flag('max_wait_ms', 'float', 20.0, 'How long the free worker waits, at most, for as many sentences as were '
             'outstanding since its last batch (a lone client never waits; 0: take whatever waits whenever the '
             'worker is free).', low=0, high=60_000),
    cli.Flag('compose', 'enum', 'length', 'Where more than --max_batch sentences wait: decode those closest in '
             'length, a sentence passed over twice going next (length: less padding, more sentences/s), or the '
             'oldest (arrival).',
             choices=('length', 'arrival')),
    cli.Flag('max_queue', 'int', 4096, 'Sentences waiting at most; more are refused with 503 and Retry-After.',
             low=1, high=1 << 24),
    cli.Flag('max_sentences', 'int', 256, 'Sentences per request at most (413 above).', low=1, high=1 << 24),
    cli.Flag('max_chars', 'int', 100_000, 'Characters per request at most (413 above).', low=1, high=1 << 30),
    cli.Flag('timeout_s', 'float', 60.0, 'A request not answered in this many seconds gets 504.', low=0.001,
             high=86400),
    cli.Flag('api_key_file', 'str', None, 'File holding an API key every request must send (Authorization: Bearer '
             "<key>, or LibreTranslate's api_key field).", path='file'),
    cli.Flag('warmup', 'enum', 'narrow', 'Before /health reports ready, compile every row count at the narrowest '
             'source width (narrow) or at every width (all).', choices=('none', 'narrow', 'all')),
    cli.checkpoint_flag(),
    cli.average_flag(),
    cli.Flag('dtype', 'enum', 'float32', 'Inference precision.', choices=INFERENCE_DTYPES),
    cli.Flag('http', 'enum', 'auto', "uvicorn's HTTP parser and event loop: auto (httptools and uvloop, installed "
             'with nat_jax; h11 and asyncio where they are missing), fast (httptools and uvloop, required), or '
             'pure (h11 and asyncio, pure Python).', choices=('auto', 'fast', 'pure')),
)
HTTP_STACKS = {'auto': ('auto', 'auto'), 'fast': ('httptools', 'uvloop'), 'pure': ('h11', 'asyncio')}


def read_api_key(path: str) -> str:
  with open(path, encoding='utf-8') as f:
    key = f.read().strip()
  if not key:
    raise ConfigError(f'--api_key_file={path} is empty; put the key in it.')
  return key


def main(argv):
  import uvicorn

  from nat_jax.deploy.server import ServeConfig, Service
  from nat_jax.run.translator import Translator

  config = ServeConfig(max_batch=FLAGS.max_batch, max_wait_ms=FLAGS.max_wait_ms, max_queue=FLAGS.max_queue,
                       max_sentences=FLAGS.max_sentences, max_chars=FLAGS.max_chars, timeout_s=FLAGS.timeout_s,
                       allowed_decoders=tuple(FLAGS.allowed_decoders), warmup=FLAGS.warmup, compose=FLAGS.compose,
                       api_key=read_api_key(FLAGS.api_key_file) if FLAGS.api_key_file else None)
  translator = Translator(FLAGS.workdir, FLAGS.decoder, batch_size=FLAGS.max_batch, average=FLAGS.average,
                          checkpoint=FLAGS.checkpoint, dtype=FLAGS.dtype, **DECODER_OVERRIDES)
  service = Service(translator, config)
  if FLAGS.host not in ('127.0.0.1', 'localhost', '::1') and config.api_key is None:
    log.warning('listening on %s without --api_key_file: anyone who reaches this port can use the server.',
                FLAGS.host)
  http, loop = HTTP_STACKS[FLAGS.http]
  if FLAGS.http == 'fast':
    for module in ('httptools', 'uvloop'):
      if importlib.util.find_spec(module) is None:
        raise ConfigError(f'--http=fast needs {module}, a dependency of nat_jax that is missing here: '
                          f'pip install {module} (or --http=pure).')
  server = uvicorn.Server(uvicorn.Config(service.app, host=FLAGS.host, port=FLAGS.port, log_level='warning',
                                         timeout_graceful_shutdown=int(config.timeout_s) + 1, lifespan='on',
                                         http=http, loop=loop))
  # uvicorn stops gracefully on SIGTERM / SIGINT, then raises the signal again for the handler found
  # at start: this one lets the process end with status 0 after a graceful stop.
  for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, lambda *_: None)
  log.info('serving %s (decoder %s %s) on http://%s:%d', os.path.normpath(FLAGS.workdir), translator.decoder,
           translator.options, FLAGS.host, FLAGS.port)
  server.run()
  if not server.started:
    raise ConfigError(f'could not listen on {FLAGS.host}:{FLAGS.port} (in use, or not an address of this machine).')


console = cli.command(COMMAND_FLAGS, main, DECODER_OVERRIDES)  # `nat-jax-serve`, `python -m nat_jax.serve`


if __name__ == '__main__':
  console()
