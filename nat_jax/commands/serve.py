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

import contextlib
import dataclasses
import errno
import importlib.util
import os
import signal
import socket
import sys

from absl import flags

from nat_jax.commands import cli
from nat_jax.deploy.server import ServeConfig
from nat_jax.errors import ConfigError, log

FLAGS = flags.FLAGS


COMMAND_FLAGS = (
    cli.workdir_flag(),
    cli.decoder_flag(f'Default decoder (default: {cli.RUN_DEFAULT_DECODER}); options via --decoder.<opt>=<v>.'),
    cli.Flag('host', 'str', '127.0.0.1', 'Address to listen on (0.0.0.0: every interface; see --api_key_file).'),
    cli.Flag('port', 'int', 8000, 'Port to listen on.', low=0, high=65535),
    *cli.flags_of(ServeConfig),  # the server's own settings, declared with it
    cli.Flag('api_key_file', 'str', None, 'File holding an API key every request must send (Authorization: Bearer '
             "<key>, or LibreTranslate's api_key field).", path='file'),
    cli.checkpoint_flag(),
    cli.average_flag(),
    cli.dtype_flag(),
    cli.quantization_flag(),
    cli.int8_kernel_flag(),
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


def main(argv, decoder_options: dict[str, str]):
  import uvicorn

  from nat_jax.deploy.server import Service
  from nat_jax.run.translator import Translator

  check_address(FLAGS.host, FLAGS.port)  # before the run loads
  config = cli.settings_from_flags(ServeConfig, api_key=read_api_key(FLAGS.api_key_file) if FLAGS.api_key_file
                                   else None)
  translator = Translator(FLAGS.workdir, FLAGS.decoder, batch_size=FLAGS.max_batch, average=FLAGS.average,
                          checkpoint=FLAGS.checkpoint, dtype=FLAGS.dtype,
                          quantization=FLAGS.quantization, int8_kernel=FLAGS.int8_kernel,
                          **decoder_options)
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
           dataclasses.asdict(translator.options), FLAGS.host, FLAGS.port)
  server.run()
  if not server.started:
    raise ConfigError(f'could not listen on {FLAGS.host}:{FLAGS.port} (in use, or not an address of this machine).')
  if service.batcher is not None and service.batcher.busy():
    # A batch still decoding past --timeout_s (its clients were answered 504): end now, exit 0, rather than let
    # the interpreter tear down around a thread inside XLA (an abort, signal 6).
    log.warning('stopped with a batch still decoding past --timeout_s=%g (its requests were answered 504).',
                config.timeout_s)
    for stream in (sys.stdout, sys.stderr):
      with contextlib.suppress(Exception):
        stream.flush()
    os._exit(0)


def check_address(host: str, port: int):
  """ConfigError when this machine cannot listen on host:port (a port in use, a host that is not one of its
  addresses), said before the run loads rather than by uvicorn after."""
  try:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
  except (socket.gaierror, UnicodeError) as e:
    raise ConfigError(f'--host={host}: not an address or a name this machine can resolve ({e}).') from None
  family, kind, proto, _, address = infos[0]
  with socket.socket(family, kind, proto) as probe:
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
    try:
      probe.bind(address)
    except OSError as e:
      what = 'is in use (another server listens there); choose another --port, or 0 for a free one' \
          if e.errno == errno.EADDRINUSE else f'cannot be listened on here ({e.strerror})'
      raise ConfigError(f'--host={host} --port={port}: {what}.') from None


console = cli.command(COMMAND_FLAGS, main, decoder_options=True)  # `nat-jax-serve`, `python -m nat_jax.serve`


if __name__ == '__main__':
  console()
