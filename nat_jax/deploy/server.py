"""The translation server's library: dynamic batching over one Translator, the HTTP API and its metrics.

`Batcher`: requests put their sentences on one queue; one worker thread owns the model. It takes the
decoder of the oldest waiting sentence, gathers up to `max_batch` waiting sentences of that decoder
(once as many wait as were outstanding, waiting or decoding, since its last batch was taken, or once it
has been free `max_wait_ms`, whichever comes first; where more wait, `--compose=length` takes those
closest in length, never passing one over more than MAX_PASSED times: `compose_batch`), decodes them in
one `Translator` call (length-sorted; one batch of mixed widths for a decoder that bounds each row by its
own width, one per width bucket for the others; padded to a power-of-two row count) and hands each
request its sentences in the request's order. A request that times out is answered 504 by
its handler; its sentences still waiting are skipped, so they never hold up others.

`make_app` builds the Starlette application (ASGI; run it with uvicorn, as `nat_jax.serve` does):
  POST /v1/translate   {"text": [...], "decoder"?, "options"?, "stats"?}
                       -> {"translations", "model", "decoder", "options", "timing_ms"[, "stats"]}
  POST /translate      LibreTranslate's request and answer (q a string or a list; JSON or form body)
  GET  /languages      LibreTranslate's language list: the run's pair
  GET  /health         200 once warm-up compiled the default shapes, 503 before
  GET  /metrics        Prometheus text: requests (answered, in progress), sentences, queue depth, batch sizes,
                       latency, compiles, compile-cache clears (nat_jax.run.compiled)
Errors are JSON {"error": "..."} naming the field or limit: 400 bad body or decoder, 401 missing or
wrong key (only with an API key), 413 over `max_sentences` / `max_chars`, 503 queue full (with
Retry-After) or shutting down, 504 timed out.

Starlette (the ASGI toolkit FastAPI is built on) on uvicorn: six routes need no request models or
dependency injection, so FastAPI's pydantic layer would add weight and nothing we use.
"""
from __future__ import annotations

import asyncio
import bisect
import collections
import concurrent.futures
import contextlib
import dataclasses
import heapq
import hmac
import json
import os
import threading
import time
from typing import Any, Optional, Sequence
from urllib.parse import parse_qs

import prometheus_client as prom
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from nat_jax.decode import DECODERS, Options
from nat_jax.decode.options import names_files
from nat_jax.errors import ConfigError, log
from nat_jax.run import compiled
from nat_jax.run.translator import Translation, Translator
from nat_jax.settings import MAX_ROWS, check_settings, setting

LANGUAGE_NAMES = {'en': 'English', 'de': 'German', 'fr': 'French', 'es': 'Spanish', 'it': 'Italian', 'ro': 'Romanian',
                  'zh': 'Chinese', 'ja': 'Japanese', 'ru': 'Russian', 'pt': 'Portuguese', 'nl': 'Dutch'}
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


MAX_PASSED = 2  # batches a waiting sentence may be passed over for others closer in length before it goes next


def compose_batch(lengths: Sequence[int], size: int, passed_over: int = 0) -> list[int]:
  """Which of the waiting sentences (`lengths`, oldest first) to decode together: all of them if they are
  at most `size`, else the `size` whose lengths span the least (ties: the batch that waited longest), in
  arrival order; once the oldest (index 0) has been passed over (`passed_over`: batches taken since it
  arrived) MAX_PASSED times, the least-span batch that holds it.

  A batch runs to its longest sentence and pads to its widest, so a batch of similar lengths wastes the
  fewest row-steps; anchoring on an oldest passed over MAX_PASSED times means a sentence waits at most
  MAX_PASSED batches more than there were sentences before it. The least span among batches of `size`
  is a window of neighbours in length order, so only windows are tried."""
  n = len(lengths)
  if n <= size:
    return list(range(n))
  order = sorted(range(n), key=lambda i: (lengths[i], i))        # length order, ties by arrival
  ordered = [lengths[i] for i in order]
  starts = range(n - size + 1)
  if passed_over >= MAX_PASSED:                                   # the windows that hold the oldest
    at = order.index(0)
    starts = range(max(0, at - size + 1), min(at, n - size) + 1)
  least = min(ordered[s + size - 1] - ordered[s] for s in starts)
  ranges = sorted({(ordered[s], ordered[s + size - 1]) for s in starts if ordered[s + size - 1] - ordered[s] == least})
  best = None
  for lo, hi in ranges:
    # every `size` of the sentences with lengths in [lo, hi] span `least`: the oldest of them waited longest
    block = order[bisect.bisect_left(ordered, lo):bisect.bisect_right(ordered, hi)]
    chosen = heapq.nsmallest(size, block)
    if best is None or sum(chosen) < sum(best):
      best = chosen
  return sorted(best)


def compose_arrival(lengths: Sequence[int], size: int, passed_over: int = 0) -> list[int]:
  """The oldest `size` waiting sentences."""
  return list(range(min(size, len(lengths))))


COMPOSE = {'length': compose_batch, 'arrival': compose_arrival}


@dataclasses.dataclass(frozen=True)
class ServeConfig:
  """What the server accepts and how it batches: each field is also a flag of `nat_jax.serve` (its --help,
  the command-line reference and its checks come from these declarations: nat_jax.settings)."""
  allowed_decoders: tuple[str, ...] = setting(
      (), 'Other decoders a request may ask for (with their default options or its own), e.g. greedy,beam; each '
      'is built, and so checked against the run, when the server starts. Default: only --decoder.')
  max_batch: int = setting(64, 'Sentences decoded together at most.', low=1, high=MAX_ROWS)
  max_wait_ms: float = setting(20.0, 'How long the free worker waits, at most, for as many sentences as were '
                               'outstanding since its last batch (a lone client never waits; 0: take whatever waits '
                               'whenever the worker is free).', low=0, high=60_000)
  compose: str = setting('length', 'Where more than --max_batch sentences wait: decode those closest in length, a '
                         'sentence passed over twice going next (length: less padding, more sentences/s; '
                         'compose_batch), or the oldest (arrival).', choices=tuple(COMPOSE))
  max_queue: int = setting(4096, 'Sentences waiting at most; more are refused with 503 and Retry-After.', low=1,
                           high=1 << 24)
  max_sentences: int = setting(256, 'Sentences per request at most (413 above).', low=1, high=1 << 24)
  max_chars: int = setting(100_000, 'Characters per request at most, all its texts (413 above).', low=1,
                           high=1 << 30)
  timeout_s: float = setting(60.0, 'A request not answered in this many seconds, queueing included, gets 504.',
                             low=0.001, high=86400)
  api_key: Optional[str] = setting(None, 'When set, every route but /health needs it (the command line reads it '
                                   'from --api_key_file).', flag=False)
  max_decoders: int = setting(16, 'Decoder configurations (a decoder with one set of options) built at most, those '
                              'of --decoder and --allowed_decoders included; a request asking for one more is refused '
                              '(400): each costs a compilation (seconds) and memory for as long as the server runs.',
                              low=1, high=1024)
  read_timeout_s: float = setting(30.0, 'A request whose body has not fully arrived in this many seconds gets 408 '
                                  '(a client sending slowly holds no connection open for ever).', low=0.001,
                                  high=3600)
  warmup: str = setting('narrow', 'Before /health reports ready, compile every row count at the narrowest source '
                        'width (narrow) or at every width (all), or nothing (none).', choices=('none', 'narrow', 'all'))

  def __post_init__(self):
    check_settings(self)


class QueueFull(Exception):
  """More sentences are waiting than the server's `max_queue`."""


class Stopping(Exception):
  """The server is shutting down and takes no new work."""


class Metrics:
  """The server's Prometheus metrics, in a registry of their own."""

  def __init__(self):
    self.registry = prom.CollectorRegistry()
    r = self.registry
    self.requests = prom.Counter('nat_jax_requests', 'HTTP requests answered', ['route', 'code'], registry=r)
    self.sentences = prom.Counter('nat_jax_sentences', 'Sentences translated', registry=r)
    self.queue_depth = prom.Gauge('nat_jax_queue_depth', 'Sentences waiting to be decoded', registry=r)
    self.in_progress = prom.Gauge('nat_jax_requests_in_progress', 'HTTP requests being handled', registry=r)
    self.batch_size = prom.Histogram('nat_jax_batch_size', 'Sentences per decoded batch', buckets=BATCH_BUCKETS,
                                     registry=r)
    self.latency = prom.Histogram('nat_jax_request_latency_seconds', 'Time from arrival to answer of a translation '
                                  'request', ['route'], buckets=LATENCY_BUCKETS, registry=r)
    self.compiles = prom.Counter('nat_jax_compiles', 'XLA backend compilations in this process', registry=r)
    self.cache_clears = prom.Counter('nat_jax_compile_cache_clears', 'Times every compiled program was dropped, its '
                                     'memory maps near the kernel limit vm.max_map_count', registry=r)
    self._counted = {self.compiles: compiled.compiles(), self.cache_clears: compiled.cache_clears()}

  def text(self) -> bytes:
    for counter, now in ((self.compiles, compiled.compiles()), (self.cache_clears, compiled.cache_clears())):
      counter.inc(now - self._counted[counter])  # the process's counts since these metrics were made
      self._counted[counter] = now
    return prom.generate_latest(self.registry)


@dataclasses.dataclass(eq=False)
class Job:
  """One request's sentences on their way through the queue."""
  texts: list[str]
  key: tuple            # Translator.resolve: (decoder, typed options)
  future: concurrent.futures.Future
  arrived: float
  batches_before: int   # batches the worker had taken when it arrived
  results: list = dataclasses.field(default_factory=list)
  remaining: int = 0

  def __post_init__(self):
    self.results = [None] * len(self.texts)
    self.remaining = len(self.texts)


class Batcher:
  """Dynamic batching over one Translator (see the module docstring); a daemon worker thread."""

  def __init__(self, translator: Translator, config: ServeConfig, metrics: Metrics):
    self.translator, self.config, self.metrics = translator, config, metrics
    self._items: collections.deque[tuple[Job, int]] = collections.deque()  # (job, sentence index), oldest first
    self._cv = threading.Condition()
    self._stopping = False
    self._peak = 1        # most sentences outstanding (waiting or decoding) since the last batch was taken
    self._decoding = 0    # sentences in the batch being decoded
    self._batches = 0     # batches taken so far
    self.ready = threading.Event()
    self._thread = threading.Thread(target=self._work, name='nat_jax-batcher', daemon=True)
    self._thread.start()

  def depth(self) -> int:
    return len(self._items)

  def submit(self, texts: Sequence[str], key: tuple) -> concurrent.futures.Future:
    """A future of the request's Translations (in order); QueueFull or Stopping when refused."""
    job = Job(list(texts), key, concurrent.futures.Future(), time.monotonic(), self._batches)
    if not texts:
      job.future.set_result([])
      return job.future
    with self._cv:
      if self._stopping:
        raise Stopping()
      if len(self._items) + len(texts) > self.config.max_queue:
        raise QueueFull()
      self._items.extend((job, i) for i in range(len(texts)))
      self._peak = max(self._peak, len(self._items) + self._decoding)
      self.metrics.queue_depth.set(len(self._items))
      self._cv.notify()
    return job.future

  def busy(self) -> bool:
    """Whether the worker is still running (after `stop`: a batch outlasted its timeout)."""
    return self._thread.is_alive()

  def stop(self, timeout: Optional[float] = None):
    """Take no new work, finish what waits, end the worker (within `timeout` seconds)."""
    with self._cv:
      self._stopping = True
      self._cv.notify()
    self._thread.join(timeout)

  def _drop_abandoned(self):
    """Forget waiting sentences of requests that are answered already (timed out, cancelled, failed)."""
    if any(job.future.done() for job, _ in self._items):
      self._items = collections.deque(item for item in self._items if not item[0].future.done())

  def _take(self) -> Optional[list[tuple[Job, int]]]:
    """The next batch: up to max_batch waiting sentences of the oldest one's decoder, composed as
    `config.compose` says; None once stopping with nothing left.

    It is taken once as many of that decoder wait as were outstanding (waiting or decoding) at any time
    since the last batch was taken (max_batch at most), or once the worker has been free max_wait_ms;
    a lone client has 1 outstanding, so it never waits. Why: answered clients send again while the HTTP
    side shares the cores with decoding, so taking whatever waits the moment the worker is free makes
    small batches, and waiting only for the last batch's size can split the clients into two halves
    taking turns (measured: docs/lab-notes/2026-11-26-serving.md)."""
    max_batch, wait = self.config.max_batch, self.config.max_wait_ms / 1000
    with self._cv:
      self._decoding = 0
      free_since = time.monotonic()
      while True:
        self._drop_abandoned()
        if not self._items:
          if self._stopping:
            return None
          self._cv.wait()
          continue
        key = self._items[0][0].key
        ready_at = max(self._items[0][0].arrived, free_since) + wait
        waiting = [item for item in self._items if item[0].key == key]
        now = time.monotonic()
        if len(waiting) >= min(max_batch, self._peak) or now >= ready_at or self._stopping:
          break
        self._cv.wait(ready_at - now)
      passed_over = self._batches - waiting[0][0].batches_before
      chosen = {id(waiting[i]) for i in COMPOSE[self.config.compose]([len(job.texts[i]) for job, i in waiting],
                                                                       max_batch, passed_over)}
      batch = [item for item in waiting if id(item) in chosen]
      rest = collections.deque(item for item in self._items if id(item) not in chosen)
      self._items, self._decoding, self._batches = rest, len(batch), self._batches + 1
      self._peak = len(rest) + len(batch)
      self.metrics.queue_depth.set(len(rest))
      return batch

  def _warm_up(self):
    """Compile the server's decoder at every row count it uses (at the narrowest or every source width)."""
    t0 = time.time()
    shapes = self.translator.warm_up(self.config.warmup)
    log.info('warm-up: %d shapes compiled in %.1f s', shapes, time.time() - t0)

  def _work(self):
    try:
      if self.config.warmup != 'none':
        self._warm_up()
    except Exception:  # the queue still drains; every request then reports the same failure
      log.exception('warm-up failed')
    self.ready.set()
    while (batch := self._take()) is not None:
      self._decode(batch)

  def _decode(self, batch: list[tuple[Job, int]]):
    name, options = batch[0][0].key
    try:
      out = self.translator.translate_with_stats([job.texts[i] for job, i in batch], decoder=name,
                                                 options=options, batch_size=self.config.max_batch)
    except Exception as e:  # noqa: BLE001 - a failing batch fails its requests, never the server
      log.exception('decoding a batch of %d sentences failed', len(batch))
      for job, _ in batch:
        settle(job.future, exception=e)
      return
    self.metrics.batch_size.observe(len(batch))
    self.metrics.sentences.inc(len(batch))
    for (job, i), translation in zip(batch, out):
      job.results[i] = translation
      job.remaining -= 1
      if job.remaining == 0:
        settle(job.future, result=job.results)


def settle(future: concurrent.futures.Future, result=None, exception: Optional[BaseException] = None):
  """Complete `future` unless its request gave up on it already."""
  try:
    if exception is not None:
      future.set_exception(exception)
    else:
      future.set_result(result)
  except concurrent.futures.InvalidStateError:
    pass


# --- HTTP ----------------------------------------------------------------------------------------
class BadRequest(Exception):
  """A request the server answers with `status` and {"error": message}."""

  def __init__(self, status: int, message: str, headers: Optional[dict] = None):
    super().__init__(message)
    self.status, self.headers = status, headers or {}


def text_list(value: Any, field: str) -> tuple[list[str], bool]:
  """(texts, given as one string) of a request field holding a string or a list of strings."""
  if isinstance(value, str):
    return [value], True
  if isinstance(value, list) and all(isinstance(t, str) for t in value):
    return list(value), False
  raise BadRequest(400, f'{field!r}: expected a string or a list of strings.')


class Service:
  """The routes over one Batcher; `app` is the ASGI application."""

  def __init__(self, translator: Translator, config: ServeConfig):
    self.translator, self.config = translator, config
    self.metrics = Metrics()
    self.model = os.path.basename(os.path.normpath(translator.workdir)) if translator.workdir else ''
    allowed = set(config.allowed_decoders) | {translator.decoder}
    self.allowed = sorted(allowed)
    self.built = set()  # (decoder, typed options) built for requests: at most max_decoders
    for name in self.allowed:
      self.built.add(translator.resolve(name))
      translator.decoder_for(name)  # an unknown or unfitting decoder fails at start, not per request
    if len(self.built) > config.max_decoders:
      raise ConfigError(f'--max_decoders={config.max_decoders}: the {len(self.built)} decoders served by default '
                        '(--decoder and --allowed_decoders) are more than that; raise it.')
    # options that name files (lm, drafter): the server's own, never a request's
    self.file_options = {option for decoder in DECODERS.values() for option in names_files(decoder.options)}
    self.building = threading.Lock()  # self.built
    self.batcher: Optional[Batcher] = None
    self.metrics.queue_depth.set_function(lambda: self.batcher.depth() if self.batcher else 0)
    routes = [Route('/v1/translate', self.translate, methods=['POST']),
              Route('/translate', self.libre_translate, methods=['POST']),
              Route('/languages', self.languages, methods=['GET', 'POST']),
              Route('/health', self.health, methods=['GET']),
              Route('/metrics', self.metrics_text, methods=['GET'])]
    self.app = Starlette(routes=routes, lifespan=self.lifespan,
                         exception_handlers={HTTPException: self.http_error})

  @contextlib.asynccontextmanager
  async def lifespan(self, app):
    self.batcher = Batcher(self.translator, self.config, self.metrics)
    try:
      yield
    finally:
      await asyncio.get_running_loop().run_in_executor(None, self.batcher.stop, self.config.timeout_s)

  # --- request plumbing
  async def http_error(self, request: Request, e: HTTPException) -> Response:
    """Starlette's own refusals (404 no such route, 405 wrong method) in the JSON shape of every other error."""
    self.metrics.requests.labels(request.url.path if e.status_code != 404 else 'other', str(e.status_code)).inc()
    routes = '/v1/translate, /translate, /languages, /health, /metrics'
    message = (f'no route {request.url.path}; routes: {routes}.' if e.status_code == 404 else
               f'{request.method} is not allowed on {request.url.path}.' if e.status_code == 405 else e.detail)
    return JSONResponse({'error': message}, status_code=e.status_code, headers=getattr(e, 'headers', None))

  async def body(self, request: Request) -> dict:
    """The JSON (or, for LibreTranslate clients, form-encoded) body as a dict."""
    try:
      raw = await asyncio.wait_for(request.body(), self.config.read_timeout_s)
    except asyncio.TimeoutError:
      raise BadRequest(408, f'the request body did not arrive within {self.config.read_timeout_s:g} s '
                       '(--read_timeout_s).') from None
    if len(raw) > 4 * self.config.max_chars + 65536:
      raise BadRequest(413, f'request body of {len(raw)} bytes: more than this server takes '
                       f'(max_chars {self.config.max_chars}).')
    text = raw.decode('utf-8', errors='replace')  # invalid UTF-8 becomes U+FFFD, never a lost sentence
    if request.headers.get('content-type', '').startswith('application/x-www-form-urlencoded'):
      form = parse_qs(text, keep_blank_values=True)
      return {k: (v[0] if len(v) == 1 else v) for k, v in form.items()}
    try:
      body = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as e:
      raise BadRequest(400, f'the body is not JSON: {e.msg} at character {e.pos}.') from None
    except RecursionError:
      raise BadRequest(400, 'the body is JSON nested too deeply to read.') from None
    except ValueError as e:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
      raise BadRequest(400, f'the body holds a value that cannot be read: {str(e).splitlines()[0][:120]}') from None
    if not isinstance(body, dict):
      raise BadRequest(400, 'the body must be a JSON object, e.g. {"text": ["Hello."]}.')
    return body

  def check_key(self, request: Request, body: Optional[dict] = None):
    if self.config.api_key is None:
      return
    given = request.headers.get('authorization', '')
    given = given[len('Bearer '):] if given.startswith('Bearer ') else (body or {}).get('api_key', '')
    if not (isinstance(given, str) and hmac.compare_digest(given.encode(), self.config.api_key.encode())):
      raise BadRequest(401, 'missing or wrong API key: send "Authorization: Bearer <key>" (or LibreTranslate\'s '
                       '"api_key" field).')

  def check_size(self, texts: list[str]):
    if len(texts) > self.config.max_sentences:
      raise BadRequest(413, f'{len(texts)} sentences in one request: this server takes at most '
                       f'{self.config.max_sentences}; split the request.')
    chars = sum(len(t) for t in texts)
    if chars > self.config.max_chars:
      raise BadRequest(413, f'{chars} characters in one request: this server takes at most '
                       f'{self.config.max_chars}; split the request.')

  def resolve(self, name: Any, options: Any) -> tuple[str, Options]:
    """(decoder, typed options) of a request: its decoder among the allowed ones, its options laid over the
    server's (the files its options name are the server's own), built now and not in the worker."""
    if name is not None and not isinstance(name, str):
      raise BadRequest(400, '"decoder": expected a decoder name (a string).')
    if name is not None and name not in self.allowed:
      raise BadRequest(400, f'decoder {name!r} is not served here; allowed: {", ".join(self.allowed)}.')
    if options is not None and not isinstance(options, dict):
      raise BadRequest(400, '"options": expected an object of decoder options, e.g. {"beam_size": 4}.')
    if options and (paths := sorted(set(options) & self.file_options)):
      raise BadRequest(400, f'"options": {", ".join(paths)} name files; they are set when the server starts, '
                       'not per request.')
    try:
      key = self.translator.resolve(name, options)
    except ConfigError as e:
      raise BadRequest(400, f'"options": {e}') from None
    with self.building:
      if key not in self.built and len(self.built) >= self.config.max_decoders:
        raise BadRequest(400, f'"options": this server builds at most {self.config.max_decoders} decoder '
                         'configurations (--max_decoders) and has built them all; send the options of an earlier '
                         'request, or none (the served defaults).')
      try:
        self.translator.decoder_for(*key)  # built (and checked) now, not in the worker
      except ConfigError as e:
        raise BadRequest(400, f'"options": {e}') from None
      self.built.add(key)
    return key

  async def run_job(self, texts: list[str], key: tuple) -> list[Translation]:
    try:
      future = self.batcher.submit(texts, key)
    except QueueFull:
      raise BadRequest(503, f'the server is busy ({self.batcher.depth()} sentences waiting); retry shortly.',
                       {'Retry-After': '1'}) from None
    except Stopping:
      raise BadRequest(503, 'the server is shutting down.') from None
    try:
      return await asyncio.wait_for(asyncio.wrap_future(future), self.config.timeout_s)
    except asyncio.TimeoutError:
      raise BadRequest(504, f'not translated within {self.config.timeout_s:g} s; retry, or send fewer '
                       'sentences.') from None

  async def answer(self, route: str, request: Request, handler) -> Response:
    t0 = time.monotonic()
    self.metrics.in_progress.inc()
    try:
      response = await handler(request, t0)
    except BadRequest as e:
      response = JSONResponse({'error': str(e)}, status_code=e.status, headers=e.headers)
    except Exception as e:  # noqa: BLE001 - a bug answers 500 and the server keeps serving
      log.exception('%s failed', route)
      response = JSONResponse({'error': f'internal error: {type(e).__name__}: {e}'}, status_code=500)
    finally:
      self.metrics.in_progress.dec()
    self.metrics.requests.labels(route, str(response.status_code)).inc()
    if route in ('/v1/translate', '/translate'):
      self.metrics.latency.labels(route).observe(time.monotonic() - t0)
    return response

  # --- routes
  async def translate(self, request: Request) -> Response:
    async def handle(request, t0):
      body = await self.body(request)
      self.check_key(request, body)
      unknown = sorted(set(body) - {'text', 'decoder', 'options', 'stats'})
      if unknown:
        raise BadRequest(400, f'unknown field(s) {", ".join(map(repr, unknown))}; fields: text, decoder, options, '
                         'stats.')
      if 'text' not in body:
        raise BadRequest(400, '"text" is missing: send {"text": ["a sentence", ...]}.')
      texts, _ = text_list(body['text'], 'text')
      self.check_size(texts)
      stats = body.get('stats', False)
      if not isinstance(stats, bool):
        raise BadRequest(400, f'"stats": expected true or false, got {json.dumps(stats)[:40]}.')
      key = self.resolve(body.get('decoder'), body.get('options'))
      out = await self.run_job(texts, key)
      answer = {'translations': [t.text for t in out], 'model': self.model, 'decoder': key[0],
                'options': dataclasses.asdict(key[1]),
                'timing_ms': round((time.monotonic() - t0) * 1000, 3)}
      if stats:
        answer['stats'] = [t.stats for t in out]
      return JSONResponse(answer)
    return await self.answer('/v1/translate', request, handle)

  async def libre_translate(self, request: Request) -> Response:
    async def handle(request, t0):
      body = await self.body(request)
      self.check_key(request, body)
      if 'q' not in body:
        raise BadRequest(400, 'Invalid request: missing q parameter')
      source, target = self.translator.languages
      if body.get('source', 'auto') not in ('auto', source):
        raise BadRequest(400, f'{body.get("source")!r} is not supported: this server translates {source} -> {target}.')
      if body.get('target', target) != target:
        raise BadRequest(400, f'{body.get("target")!r} is not supported: this server translates {source} -> {target}.')
      if body.get('format', 'text') != 'text':
        raise BadRequest(400, f'format {body.get("format")!r} is not supported; use "text".')
      texts, single = text_list(body['q'], 'q')
      self.check_size(texts)
      out = await self.run_job(texts, (self.translator.decoder, self.translator.options))
      return JSONResponse({'translatedText': out[0].text if single else [t.text for t in out]})
    return await self.answer('/translate', request, handle)

  async def languages(self, request: Request) -> Response:
    async def handle(request, t0):
      self.check_key(request)
      source, target = self.translator.languages
      return JSONResponse([{'code': source, 'name': LANGUAGE_NAMES.get(source, source), 'targets': [target]},
                           {'code': target, 'name': LANGUAGE_NAMES.get(target, target), 'targets': []}])
    return await self.answer('/languages', request, handle)

  async def health(self, request: Request) -> Response:
    ready = self.batcher is not None and self.batcher.ready.is_set()
    return JSONResponse({'status': 'ok' if ready else 'warming up', 'model': self.model,
                         'decoder': self.translator.decoder, 'decoders': self.allowed},
                        status_code=200 if ready else 503)

  async def metrics_text(self, request: Request) -> Response:
    async def handle(request, t0):
      self.check_key(request)
      return Response(self.metrics.text(), media_type=prom.CONTENT_TYPE_LATEST)
    return await self.answer('/metrics', request, handle)


def make_app(translator: Translator, config: ServeConfig = ServeConfig()) -> Starlette:
  """The ASGI application serving `translator` (see the module docstring)."""
  return Service(translator, config).app


@contextlib.contextmanager
def running(app, host: str = '127.0.0.1', port: int = 0, ready_timeout_s: float = 600.0):
  """Serve `app` with uvicorn on a background thread; yields its base URL once /health says ready
  (port 0: a free port). For tests, benchmarks and notebooks; the command line runs uvicorn itself."""
  import urllib.request

  import uvicorn
  server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level='warning', lifespan='on'))
  thread = threading.Thread(target=server.run, name='nat_jax-server', daemon=True)
  thread.start()
  deadline = time.monotonic() + ready_timeout_s
  try:
    while not server.started:
      if not thread.is_alive() or time.monotonic() > deadline:
        raise RuntimeError(f'the server did not start on {host}:{port}.')
      time.sleep(0.02)
    url = 'http://{}:{}'.format(host, server.servers[0].sockets[0].getsockname()[1])
    while True:
      try:
        with urllib.request.urlopen(url + '/health', timeout=5) as r:
          if r.status == 200:
            break
      except OSError:  # 503 while warming up
        if time.monotonic() > deadline:
          raise RuntimeError(f'{url}/health did not report ready within {ready_timeout_s:g} s.') from None
      time.sleep(0.05)
    yield url
  finally:
    server.should_exit = True
    thread.join()
