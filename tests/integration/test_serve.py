"""The public Python API (`nat_jax.Translator`) and the translation server (`nat_jax.serve`), over real
HTTP on loopback: served translations equal the offline `Translator.translate` of the same sentences
under 32 concurrent clients (greedy, dag_lookahead, hrt, drafted), batches really form, a
LibreTranslate client works unchanged, every bad input gets its status and a JSON error and the
server keeps serving, and SIGTERM under load finishes what is in flight and exits 0."""
import asyncio
import concurrent.futures
import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from nat_jax import Translator
from nat_jax.deploy.server import ServeConfig, Service, running
from nat_jax.errors import ConfigError
from nat_jax.run import compiled
from nat_jax.run.translation import translate_texts
from nat_jax.training.loop import train_and_evaluate
from tests.support import tiny_config

SENTENCES = ['In the beginning God created the heavens and the earth.', 'And God said, Let there be light.',
             'Jesus wept.', 'The grace of our Lord Jesus Christ be with you all. Amen.', 'Paul, a servant.',
             'And they went out.', 'Peace be with you.', 'He that hath ears to hear, let him hear.',
             'Blessed are the meek: for they shall inherit the earth.', 'Rejoice in the Lord alway.']


RUNS = {'dat': {'model.method': 'dat', 'dat.upsample_scale': 2.0, 'eval_decoder': 'dag_lookahead',
                'test_decoder': 'dag_lookahead'},
        'hrt': {'model.method': 'hrt', 'eval_decoder': 'hrt', 'test_decoder': 'hrt'}}


@pytest.fixture(scope='module')
def method_run(tmp_path_factory, corpus, compile_cache, trained_run):
  """method_run('at' | 'dat' | 'hrt'): a tiny run of that method (8 updates; the AT one is `trained_run`),
  same corpus and tokenizer, each trained when first asked for."""
  runs = {'at': trained_run}

  def get(name: str) -> str:
    if name not in runs:
      runs[name] = str(tmp_path_factory.mktemp(name))
      train_and_evaluate(tiny_config(corpus, compile_cache, **RUNS[name]), runs[name])
    return runs[name]
  return get


def post(url: str, path: str, **kwargs) -> httpx.Response:
  return httpx.post(url + path, timeout=120, **kwargs)


# --- the Python API ----------------------------------------------------------------------------------
def test_translator_is_translate_texts_and_keeps_order(trained_run):
  translator = Translator(trained_run, 'greedy', batch_size=4)
  texts = SENTENCES[:6] + ['', '   ']
  want, aux = translate_texts(translator.run, texts, translator.decoder_for()[0], 4)
  out = translator.translate_with_stats(texts)
  assert [t.text for t in out] == want == translator.translate(texts)
  assert [t.stats['steps'] for t in out] == aux['steps'].tolist()
  assert out[-1].text == '' and translator.languages == ('en', 'de')
  # one sentence decodes alone (one row), the same translation as inside the batch of four
  assert translator.translate([texts[2]]) == [want[2]]


def test_translator_is_thread_safe(trained_run):
  translator = Translator(trained_run, 'greedy', batch_size=8)
  want = translator.translate(SENTENCES)
  with concurrent.futures.ThreadPoolExecutor(8) as pool:
    got = list(pool.map(lambda i: translator.translate(SENTENCES[i:] + SENTENCES[:i]), range(len(SENTENCES))))
  assert all(g == want[i:] + want[:i] for i, g in enumerate(got))


def test_translator_errors_name_the_problem(trained_run, tmp_path):
  with pytest.raises(ConfigError, match="no option 'beam'"):
    Translator(trained_run, 'greedy', beam=3)
  with pytest.raises(ConfigError, match='Unknown decoder'):
    Translator(trained_run, 'nope')
  with pytest.raises(ConfigError, match='batch_size'):
    Translator(trained_run, batch_size=0)
  with pytest.raises(Exception, match='holds no trained run'):
    Translator(str(tmp_path))
  translator = Translator(trained_run, 'beam', beam_size=2)
  assert translator.options.beam_size == 2
  laid_over = dataclasses.replace(translator.options, alpha=0.0)  # its own options, alpha changed
  assert translator.decoder_for(None, {'alpha': 0})[1] == laid_over
  with pytest.raises(ConfigError, match='list of sentences'):
    translator.translate('one string')
  for bad in (0, -1, -2, '8', 2.5):  # per call as in the constructor (a negative count returned '' for every line)
    with pytest.raises(ConfigError, match='batch_size must be an integer from 1 to 65536'):
      translator.translate(SENTENCES, batch_size=bad)
  assert translator.translate(SENTENCES[:3], batch_size=2) == translator.translate(SENTENCES[:3])
  assert translator.decoder_for('greedy')[0] is translator.decoder_for('greedy', {})[0]  # built once
  for bad in (True, 10 ** 9):  # the same rule as --batch_size: an integer from 1 to MAX_ROWS
    with pytest.raises(ConfigError, match='batch_size must be an integer from 1 to 65536'):
      Translator(trained_run, batch_size=bad)
  with pytest.raises(ConfigError, match='workdir must be the path of a trained run'):
    Translator(None)
  for bad, words in ((None, 'got NoneType'), (5, 'got int'), ([b'x'], 'item 0 is bytes'), (['a', 3], 'item 1 is int')):
    with pytest.raises(ConfigError, match=words):
      translator.translate(bad)
  with pytest.raises(ConfigError, match='options must be a mapping'):
    translator.translate(SENTENCES[:1], options=['beam_size=2'])
  # a lone surrogate (what an invalid \\u escape decodes to) is replaced, as the server does: one output per line
  assert translator.translate(['\ud800', SENTENCES[0] + '\udfff']) == translator.translate(['?', SENTENCES[0] + '?'])


def test_warm_up_stops_where_memory_maps_run_short(trained_run, monkeypatch, caplog):
  """Past half the kernel's map limit (nat_jax.run.compiled) warm-up compiles nothing more, says so, and
  the shapes it left compile on first use."""
  translator = Translator(trained_run, 'greedy', batch_size=4)
  room = iter([True, True, False])
  monkeypatch.setattr(compiled, 'room_to_warm_up', lambda: next(room))
  assert translator.warm_up('all') == 2  # of 3 row counts (1, 2, 4) x 5 source widths (8, 16, 24, 32, 48)
  assert 'warm-up stopped after 2 of 15 shapes' in caplog.text and 'vm.max_map_count' in caplog.text
  monkeypatch.setattr(compiled, 'room_to_warm_up', lambda: True)
  assert translator.warm_up('narrow') == 3  # rows 1, 2, 4

# --- served = offline, under concurrency -------------------------------------------------------------
async def concurrent_clients(url: str, requests: list[list[str]], clients: int = 32, **fields) -> list[list[str]]:
  """Each request's translations, sent by `clients` concurrent clients taking requests in turn."""
  out: list = [None] * len(requests)
  queue = list(range(len(requests)))

  async def client():
    async with httpx.AsyncClient(base_url=url, timeout=300) as c:
      while queue:
        i = queue.pop()
        r = await c.post('/v1/translate', json={'text': requests[i], **fields})
        assert r.status_code == 200, r.text
        out[i] = r.json()['translations']
  await asyncio.gather(*[client() for _ in range(clients)])
  return out


SERVED = [pytest.param('greedy', 'at', {}, id='greedy'),
          pytest.param('dag_lookahead', 'dat', {}, id='dag_lookahead'),
          pytest.param('hrt', 'hrt', {}, id='hrt', marks=pytest.mark.slow),  # 1-2 minutes each: compiles
          pytest.param('drafted', 'at', {'drafter': 'DAT:dag_lookahead', 'block': '4'}, id='drafted',
                       marks=pytest.mark.slow)]


@pytest.mark.parametrize('decoder,run,options', SERVED)
def test_served_translations_equal_offline_under_32_clients(method_run, decoder, run, options):
  options = {k: v.replace('DAT', method_run('dat')) for k, v in options.items()}
  translator = Translator(method_run(run), decoder, batch_size=4, **options)
  pool = SENTENCES + [s[:-1] + '!' for s in SENTENCES] + [s.split(',')[0] for s in SENTENCES if ',' in s]  # distinct
  requests = [[pool[(3 * i + j) % len(pool)] for j in range(1 + i % 3)] for i in range(64)]  # interleaved, 1-3 each
  want = dict(zip(pool, translator.translate(pool)))
  assert len(set(pool)) == len(pool) > 20
  with running(Service(translator, ServeConfig(max_batch=4, max_wait_ms=20, timeout_s=600)).app) as url:
    got = asyncio.run(concurrent_clients(url, requests))
    metrics = httpx.get(url + '/metrics').text
  assert got == [[want[s] for s in r] for r in requests]
  sizes = parse_histogram(metrics, 'nat_jax_batch_size')
  assert sizes['+Inf'] > sizes['1.0'], 'no batch held more than one sentence'
  assert sizes['4.0'] == sizes['+Inf']  # never more than max_batch


def parse_histogram(text: str, name: str) -> dict[str, float]:
  """Cumulative bucket counts {le: count} of a Prometheus text-format histogram."""
  out = {}
  for line in text.splitlines():
    if line.startswith(name + '_bucket{'):
      le = line.split('le="', 1)[1].split('"', 1)[0]
      out[le] = float(line.rsplit(' ', 1)[1])
  return out


def test_libretranslate_client_works_unchanged(trained_run):
  from libretranslatepy import LibreTranslateAPI
  translator = Translator(trained_run, 'greedy', batch_size=4)
  with running(Service(translator, ServeConfig(max_batch=4)).app) as url:
    client = LibreTranslateAPI(url)
    assert client.translate(SENTENCES[0], 'en', 'de') == translator.translate(SENTENCES[:1])[0]
    assert [lang['code'] for lang in client.languages()] == ['en', 'de']
    assert client.languages()[0]['targets'] == ['de']
    many = post(url, '/translate', json={'q': SENTENCES[:3], 'source': 'auto', 'target': 'de', 'format': 'text'})
    assert many.json() == {'translatedText': translator.translate(SENTENCES[:3])}
    wrong = post(url, '/translate', json={'q': 'x', 'source': 'fr', 'target': 'de'})
    assert wrong.status_code == 400 and 'en -> de' in wrong.json()['error']


# --- bad input ------------------------------------------------------------------------------------------
def bad_requests(config: ServeConfig):
  """(path, request kwargs, status, words the error must hold)."""
  yield '/v1/translate', {'content': b'{"text": ['}, 400, 'not JSON'
  yield '/v1/translate', {'json': ['a']}, 400, 'JSON object'
  yield '/v1/translate', {'json': {'txt': ['a']}}, 400, "unknown field(s) 'txt'"
  yield '/v1/translate', {'json': {}}, 400, '"text" is missing'
  yield '/v1/translate', {'json': {'text': [1, 2]}}, 400, "'text': expected a string or a list of strings"
  yield '/v1/translate', {'json': {'text': ['a'], 'decoder': 'beam'}}, 400, "'beam' is not served here; allowed: "
  yield '/v1/translate', {'json': {'text': ['a'], 'decoder': 'nope'}}, 400, 'allowed: greedy, jacobi_pj'
  yield '/v1/translate', {'json': {'text': ['a'], 'options': {'max_len': -3}}}, 400, 'max_len'
  yield '/v1/translate', {'json': {'text': ['a'], 'options': {'beam': 2}}}, 400, "no option 'beam'"
  yield '/v1/translate', {'json': {'text': ['a'], 'options': 3}}, 400, '"options": expected an object'
  yield '/v1/translate', {'json': {'text': ['a'], 'decoder': 'drafted', 'options': {'drafter': '/x'}}}, 400, 'allowed'
  yield '/v1/translate', {'json': {'text': ['a'], 'options': {'lm': '/etc/passwd'}}}, 400, 'name files'
  yield '/v1/translate', {'json': {'text': ['a'] * (config.max_sentences + 1)}}, 413, 'at most 5'
  yield '/v1/translate', {'json': {'text': ['a' * (config.max_chars + 1)]}}, 413, 'at most 400'
  yield '/translate', {'json': {'source': 'en', 'target': 'de'}}, 400, 'missing q'
  yield '/translate', {'json': {'q': 'a', 'format': 'html'}}, 400, 'format'
  yield '/v1/translate', {'json': {'text': ['a'], 'stats': 'no'}}, 400, '"stats": expected true or false'
  yield '/v1/translate', {'content': b'[' * 30_000 + b']' * 30_000}, 400, 'nested too deeply'
  yield '/v1/translate', {'content': b'{"text": ["a"], "stats": ' + b'9' * 5000 + b'}'}, 400, 'cannot be read'
  yield '/v1/nope', {'json': {}}, 404, 'no route /v1/nope'


def test_bad_input_gets_its_status_and_the_server_keeps_serving(trained_run):
  translator = Translator(trained_run, 'greedy', batch_size=4)
  config = ServeConfig(max_batch=4, max_sentences=5, max_chars=400, allowed_decoders=('jacobi_pj',))
  good = translator.translate(SENTENCES[:2])
  with running(Service(translator, config).app) as url:
    for path, kwargs, status, words in bad_requests(config):
      r = post(url, path, **kwargs)
      assert r.status_code == status and words in r.json()['error'], (path, kwargs, r.status_code, r.text)
      assert post(url, '/v1/translate', json={'text': SENTENCES[:2]}).json()['translations'] == good
    counted = httpx.get(url + '/metrics').text
  assert 'nat_jax_requests_total{code="400",route="/v1/translate"} 15.0' in counted
  assert 'nat_jax_requests_total{code="404",route="other"} 1.0' in counted


def test_wrong_method_is_a_json_405_and_requests_build_at_most_max_decoders(trained_run):
  """405 in the JSON shape of every error; a request's options build a decoder only while fewer than
  --max_decoders are built (the served ones count), so no client can fill memory with compilations."""
  translator = Translator(trained_run, 'greedy', batch_size=4)
  with running(Service(translator, ServeConfig(max_decoders=3)).app) as url:
    wrong = httpx.get(url + '/v1/translate')
    assert wrong.status_code == 405 and wrong.json() == {'error': 'GET is not allowed on /v1/translate.'}
    for max_len in (5, 6, 5, 6):  # two more configurations: built once each, asked again at no cost
      r = post(url, '/v1/translate', json={'text': ['a'], 'options': {'max_len': max_len}})
      assert r.status_code == 200, r.text
    refused = post(url, '/v1/translate', json={'text': ['a'], 'options': {'max_len': 7}})
    assert refused.status_code == 400 and 'at most 3 decoder configurations' in refused.json()['error']
    assert post(url, '/v1/translate', json={'text': ['a']}).status_code == 200  # the served defaults still are
  assert len(Service(translator, ServeConfig(max_decoders=3)).built) == 1
  with pytest.raises(ConfigError, match='--max_decoders=1'):
    Service(translator, ServeConfig(max_decoders=1, allowed_decoders=('jacobi_pj',)))


def test_a_slow_body_gets_408(trained_run):
  """A client that sends its headers, then its body slower than --read_timeout_s, is answered 408."""
  translator = Translator(trained_run, 'greedy', batch_size=4)
  with running(Service(translator, ServeConfig(read_timeout_s=0.5)).app) as url:
    host, port = url.split('//')[1].split(':')
    with socket.create_connection((host, int(port)), timeout=30) as conn:
      conn.sendall(b'POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n'
                   b'Content-Length: 100\r\n\r\n{"text": ')
      answer = conn.recv(65536).decode()
    assert answer.startswith('HTTP/1.1 408') and 'read_timeout_s' in answer, answer


def test_hostile_lines_give_one_translation_each(trained_run):
  translator = Translator(trained_run, 'greedy', batch_size=4)
  texts = ['', ' ', 'tab\tand\x00nul\x1bescape', 'line\u2028separator', 'Gott ' * 2000, '\ufffd']
  with running(Service(translator, ServeConfig(max_batch=4)).app) as url:
    got = post(url, '/v1/translate', json={'text': texts}).json()['translations']
    lone = post(url, '/v1/translate', content=b'{"text": ["a\\ud800b", "\xff\xfe bytes"]}')
  assert got == translator.translate(texts) and got[0] == got[1] == '' and len(got) == len(texts)
  assert lone.status_code == 200 and lone.json()['translations'] == translator.translate(['a?b', '\ufffd\ufffd bytes'])


@contextlib.contextmanager
def held(translator: Translator):
  """The model busy: the worker blocks on its next decode until the block ends."""
  translator._lock.acquire()
  try:
    yield
  finally:
    translator._lock.release()


def test_full_queue_is_503_and_timed_out_rows_do_not_block_others(trained_run):
  translator = Translator(trained_run, 'greedy', batch_size=2)
  last = translator.translate(SENTENCES[6:8])  # compiled before the clock of timeout_s runs, however busy the host
  config = ServeConfig(max_batch=2, max_wait_ms=0, max_queue=3, timeout_s=1.0)
  with running(Service(translator, config).app) as url, concurrent.futures.ThreadPoolExecutor(4) as pool:
    with held(translator):
      first = pool.submit(post, url, '/v1/translate', json={'text': SENTENCES[:2]})  # taken, then blocked
      time.sleep(0.3)
      waiting = pool.submit(post, url, '/v1/translate', json={'text': SENTENCES[2:5]})  # fills the queue
      time.sleep(0.3)
      full = post(url, '/v1/translate', json={'text': SENTENCES[5:6]})
      assert full.status_code == 503 and full.headers['retry-after'] == '1' and 'busy' in full.json()['error']
      assert first.result().status_code == 504 and waiting.result().status_code == 504
      assert 'within 1 s' in waiting.result().json()['error']
    metrics = ''
    for _ in range(100):  # the abandoned rows are dropped, not decoded
      metrics = httpx.get(url + '/metrics').text
      if 'nat_jax_queue_depth 0.0' in metrics:
        break
      time.sleep(0.05)
    assert 'nat_jax_queue_depth 0.0' in metrics
    r = post(url, '/v1/translate', json={'text': SENTENCES[6:8]})
    assert r.status_code == 200 and r.json()['translations'] == last
    assert parse_histogram(httpx.get(url + '/metrics').text, 'nat_jax_batch_size')['+Inf'] == 2  # first + last


def test_health_waits_for_warm_up_and_api_key_guards_the_rest(trained_run):
  translator = Translator(trained_run, 'greedy', batch_size=4)
  service = Service(translator, ServeConfig(max_batch=4, api_key='s3cret'))
  transport = httpx.ASGITransport(app=service.app)  # no lifespan: never warmed up
  async def before():
    async with httpx.AsyncClient(transport=transport, base_url='http://x') as c:
      return await c.get('/health')
  assert asyncio.run(before()).status_code == 503
  with running(service.app) as url:
    assert httpx.get(url + '/health').json()['status'] == 'ok'
    assert post(url, '/v1/translate', json={'text': ['a']}).status_code == 401
    assert post(url, '/v1/translate', json={'text': ['a']}, headers={'Authorization': 'Bearer nope'}).status_code == 401
    ok = post(url, '/v1/translate', json={'text': ['a']}, headers={'Authorization': 'Bearer s3cret'})
    assert ok.status_code == 200
    libre = post(url, '/translate', data={'q': 'a', 'source': 'en', 'target': 'de', 'api_key': 's3cret'})
    assert libre.json() == {'translatedText': ok.json()['translations'][0]}
    metrics = httpx.get(url + '/metrics', headers={'Authorization': 'Bearer s3cret'}).text
  assert 'nat_jax_compiles_total' in metrics and 'nat_jax_request_latency_seconds_bucket' in metrics
  assert 'nat_jax_compile_cache_clears_total 0.0' in metrics



def test_the_load_generator_speaks_http_as_httpx_does_and_counts_every_request(trained_run):
  """benchmarks/serve_load's raw keep-alive connection gets the answers httpx gets, its error statuses
  raise, and its load answers exactly the requests it was asked for, all of them decoded by the server."""
  from benchmarks.systems.serve_load import Connection, load, run_async, server_counts
  translator = Translator(trained_run, 'greedy', batch_size=4)

  async def over_one_connection(url):
    c = await Connection.open(url)
    try:
      answers = [json.loads(await c.post_json('/v1/translate', {'text': [s]})) for s in SENTENCES[:3]]
      with pytest.raises(RuntimeError, match='answered 400.*unknown field'):
        await c.post_json('/v1/translate', {'txt': ['a']})
      return answers
    finally:
      c.close()
  with running(Service(translator, ServeConfig(max_batch=4, max_wait_ms=20)).app) as url:
    raw = run_async(over_one_connection(url))
    want = [post(url, '/v1/translate', json={'text': [s]}).json()['translations'] for s in SENTENCES[:3]]
    before = server_counts(url)
    row = run_async(load(url, SENTENCES, clients=4, requests=13))
    after = server_counts(url)
  assert [r['translations'] for r in raw] == want
  assert row['requests'] == 13 and row['sentences_per_s'] > 0 and row['p99_ms'] >= row['p50_ms'] > 0
  assert after['nat_jax_batch_size_sum'] - before['nat_jax_batch_size_sum'] == 13

# --- the command ----------------------------------------------------------------------------------------
def free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def arrived(url: str) -> int:
  """Translation requests the server has taken: in progress (less this /metrics request) plus answered."""
  metrics = httpx.get(url + '/metrics').text
  values = [float(line.rsplit(' ', 1)[1]) for line in metrics.splitlines()
            if line.startswith('nat_jax_requests_in_progress ')
            or (line.startswith('nat_jax_requests_total{') and 'route="/v1/translate"' in line)]
  return int(sum(values)) - 1


def started_server(workdir: str, *flags) -> tuple[subprocess.Popen, str]:
  """`nat_jax.serve` on a free port, once /health says ready: (process, base URL)."""
  port = free_port()
  url = f'http://127.0.0.1:{port}'
  proc = subprocess.Popen([sys.executable, '-m', 'nat_jax.serve', f'--workdir={workdir}', f'--port={port}', *flags],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
  deadline = time.monotonic() + 300
  while True:
    assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
    try:
      if httpx.get(url + '/health').status_code == 200:
        return proc, url
    except httpx.TransportError:
      pass
    assert time.monotonic() < deadline, 'the server did not get ready'
    time.sleep(0.2)


def test_sigterm_under_load_finishes_in_flight_requests_and_exits_0(trained_run):
  proc, url = started_server(trained_run, '--max_batch=4', '--max_wait_ms=50')
  try:
    want = Translator(trained_run, 'greedy').translate(SENTENCES)
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
      inflight = [pool.submit(post, url, '/v1/translate', json={'text': SENTENCES}) for _ in range(16)]
      while arrived(url) < 16:  # every request is in (being handled or answered), however busy the host
        time.sleep(0.05)
      proc.send_signal(signal.SIGTERM)
      answers = [f.result() for f in inflight]
    assert all(a.status_code == 200 and a.json()['translations'] == want for a in answers)
    assert proc.wait(timeout=120) == 0, proc.communicate()[1].decode()[-2000:]
    with pytest.raises(httpx.TransportError):
      httpx.get(url + '/health')
  finally:
    if proc.poll() is None:
      proc.kill()
    proc.communicate()


def test_sigterm_with_a_batch_outlasting_timeout_s_still_exits_0(trained_run):
  """16 requests of 30 long sentences, --timeout_s far shorter than a batch: every request is answered 504, and
  SIGTERM ends the process with status 0 within --timeout_s + a few seconds (it aborted with signal 6 when the
  interpreter tore down around the worker still inside XLA)."""
  proc, url = started_server(trained_run, '--max_batch=64', '--timeout_s=0.2', '--warmup=none')
  try:
    texts = [' '.join(SENTENCES) * 3] * 30
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
      inflight = [pool.submit(post, url, '/v1/translate', json={'text': texts}) for _ in range(16)]
      while arrived(url) < 16:
        time.sleep(0.05)
      proc.send_signal(signal.SIGTERM)
      t0 = time.monotonic()
      assert {f.result().status_code for f in inflight} <= {504, 503}
    assert proc.wait(timeout=120) == 0, proc.communicate()[1].decode()[-2000:]
    assert time.monotonic() - t0 < 30
  finally:
    if proc.poll() is None:
      proc.kill()
    proc.communicate()


def test_serve_command_refuses_bad_flags(trained_run, tmp_path):
  def serve(*flags):
    return subprocess.run([sys.executable, '-m', 'nat_jax.serve', *flags], capture_output=True, text=True,
                          timeout=300, env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
  r = serve(f'--workdir={trained_run}', '--max_batch=0')
  assert r.returncode == 2 and 'error: --max_batch=0: must be an integer from 1 to 65536' in r.stderr
  r = serve(f'--workdir={trained_run}', '--allowed_decoders=dag_lookahead')
  assert r.returncode == 2 and "needs a GraphPredictor" in r.stderr
  empty = tmp_path / 'key'
  empty.write_text('\n')
  r = serve(f'--workdir={trained_run}', f'--api_key_file={empty}')
  assert r.returncode == 2 and 'is empty' in r.stderr
  r = serve(f'--workdir={tmp_path}')
  assert r.returncode == 2 and 'holds no trained run' in r.stderr
  with socket.socket() as taken:  # a port another server listens on; a host that is no address
    taken.bind(('127.0.0.1', 0))
    taken.listen()
    r = serve(f'--workdir={trained_run}', f'--port={taken.getsockname()[1]}')
  assert r.returncode == 2 and 'is in use' in r.stderr and r.stderr.count('error: ') == 1, r.stderr[-2000:]
  r = serve(f'--workdir={trained_run}', '--host=256.0.0.1')
  assert r.returncode == 2 and 'error: --host=256.0.0.1: not an address' in r.stderr, r.stderr[-2000:]
