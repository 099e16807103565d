"""The translation server under load, beside offline translation of the same sentences.

  python -m benchmarks.systems.serve_load --runs=runs/at_bible_tiny:greedy,runs/dat_bible_tiny:dag_lookahead,\
runs/hrt_bible_tiny:hrt [--clients=1,8,32,128] [--sentences=256] [--soak_seconds=300] [--precision=int8] \
      [--out=serve_load.json]

For each run:decoder, on the first `--sentences` sentences of its test split (Acts for the Bible recipes):
- offline, in this process: `Translator.translate` of every sentence at batch 64 (sentences/s, the
  median of `--passes` after an untimed pass that compiles), of the first `--latency_sentences`
  alone (batch 1: p50 / p99 ms), and in the batches a server under `c` one-sentence clients decodes
  when every client's next sentence is waiting each time its worker is free (`closed_loop`: `c` wait,
  a batch is composed as the server's `--compose` does, each sentence taken is replaced by the next):
  the server's decoding without its HTTP;
- served: `python -m nat_jax.serve` in a process of its own, batching (`--max_batch`, 64) and one
  request at a time (`--max_batch=1`), each loaded by 1, 8, 32 and 128 concurrent clients of ours
  (`Connection`: asyncio on uvloop, one keep-alive connection per client, one sentence per request, each
  sentence once, cycled to `--requests_per_client` requests each where that is more: 1,024 at 128
  clients): sentences/s and p50 / p99 latency
  per request, each client count timed after an untimed round of the same load that compiles the
  shapes it needs (compiles that still happen while timing, and the mean batch, are read from /metrics);
- `--soak_seconds`: the first entry's batching server under 32 clients that long, its resident memory
  at the start and the end of it.
Ratios: served throughput / offline batch-64 throughput, served p99 at 1 client / offline batch-1 p99,
and the server's CPU seconds per sentence (all its threads, /proc) / offline batch 64's: the clients run
on the same cores as the server here, so the last says what the server itself costs per sentence.
"""
from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

import httpx
import numpy as np
from absl import flags

from nat_jax.commands import cli
from nat_jax.data import load_split
from nat_jax.deploy.server import COMPOSE
from nat_jax.errors import ConfigError
from nat_jax.files import write_atomic
from nat_jax.metrics.timing import machine
from nat_jax.run.translator import Translator
from nat_jax.run.workdir import PRECISIONS, precision

flags.DEFINE_list('runs', None, 'run_dir:decoder entries, e.g. runs/at_bible_tiny:greedy.')
flags.DEFINE_list('clients', ['1', '8', '32', '128'], 'Concurrent client counts.')
flags.DEFINE_integer('sentences', 256, 'The first this many test sentences: what every measurement translates.')
flags.DEFINE_integer('requests_per_client', 8, 'Requests per client in a timed round at least (the --sentences, '
                     'cycled): a round of 128 clients is 1,024 requests.')
flags.DEFINE_integer('passes', 3, 'Timed offline batch-64 passes.')
flags.DEFINE_integer('latency_sentences', 100, 'Sentences translated alone offline (batch-1 latency).')
flags.DEFINE_integer('soak_seconds', 0, 'Seconds of 32-client load on the first entry\'s batching server, for the '
                     'memory check.')
flags.DEFINE_enum('precision', 'float32', list(PRECISIONS), 'Precision of every run, offline and served (a dtype, '
                  "or int8: nat_jax.serve's --quantization).")
flags.DEFINE_integer('max_batch', 64, "The batching server's --max_batch (and the offline closed loop's).")
flags.DEFINE_float('max_wait_ms', 20.0, 'The batching server\'s --max_wait_ms.')
flags.DEFINE_enum('warmup', 'narrow', ['none', 'narrow', 'all'], 'The servers\' --warmup (all: every shape a load '
                  'can meet compiles before the server reports ready; its time is in the results).')
flags.DEFINE_enum('http', 'auto', ['auto', 'fast', 'pure'], "The servers' --http (HTTP parser and event loop).")
flags.DEFINE_enum('compose', 'length', list(COMPOSE), "The batching server's --compose (and the offline closed "
                  'loop\'s).')
flags.DEFINE_bool('one_at_a_time', True, 'Also serve with --max_batch=1.')
flags.DEFINE_string('out', None, 'JSON results file.')
FLAGS = flags.FLAGS


def percentile_ms(seconds: list[float], q: float) -> float:
  return round(float(np.percentile(np.asarray(seconds) * 1000, q)), 2)


def offline(workdir: str, decoder: str, sentences: list[str]) -> dict:
  """Batch-64 throughput and batch-1 latency of Translator.translate in this process."""
  translator = Translator(workdir, decoder, batch_size=64, **precision_kwargs())
  translator.translate(sentences)  # compiles every batch-64 shape
  times, cpu = [], []
  for _ in range(FLAGS.passes):
    t0, c0 = time.perf_counter(), time.process_time()
    translator.translate(sentences)
    times.append(time.perf_counter() - t0)
    cpu.append(time.process_time() - c0)
  alone = sentences[:FLAGS.latency_sentences]
  for s in alone:  # compiles every batch-1 shape
    translator.translate([s], batch_size=1)
  latency = []
  for s in alone:
    t0 = time.perf_counter()
    translator.translate([s], batch_size=1)
    latency.append(time.perf_counter() - t0)
  loop = {}
  for clients in [int(c) for c in FLAGS.clients]:
    stream = load_stream(sentences, clients, FLAGS.requests_per_client)
    chunks = [[stream[i] for i in batch]
              for batch in closed_loop_batches(stream, clients, FLAGS.max_batch, FLAGS.compose)]
    for chunk in chunks:  # compiles
      translator.translate(chunk)
    t0, c0 = time.perf_counter(), time.process_time()
    for chunk in chunks:
      translator.translate(chunk)
    loop[str(clients)] = {'sentences_per_s': round(len(stream) / (time.perf_counter() - t0), 1),
                          'cpu_ms_per_sentence': round(1000 * (time.process_time() - c0) / len(stream), 2),
                          'mean_batch': round(len(stream) / len(chunks), 1)}
  return {'batch64_sentences_per_s': round(len(sentences) / float(np.median(times)), 1),
          'closed_loop': loop,
          'batch64_spread': [round(len(sentences) / max(times), 1), round(len(sentences) / min(times), 1)],
          'batch64_cpu_ms_per_sentence': round(1000 * float(np.median(cpu)) / len(sentences), 2),
          'batch1_p50_ms': percentile_ms(latency, 50), 'batch1_p99_ms': percentile_ms(latency, 99)}


def closed_loop_batches(sentences: list[str], clients: int, max_batch: int, compose: str) -> list[list[int]]:
  """The batches (sentence indices) a server composing as `compose` decodes under `clients` one-sentence
  clients that each send their next sentence the moment they are answered, when all of them are waiting
  whenever the worker is free: `clients` sentences wait, a batch is taken, its sentences are replaced by
  the next ones of the stream."""
  compose_fn = COMPOSE[compose]
  waiting, coming, batches = list(range(min(clients, len(sentences)))), clients, []
  arrived = dict.fromkeys(waiting, 0)  # batches taken before each arrived (how often the oldest was passed over)
  while waiting:
    taken = set(compose_fn([len(sentences[i]) for i in waiting], max_batch, len(batches) - arrived[waiting[0]]))
    batches.append([waiting[j] for j in sorted(taken)])
    waiting = [i for j, i in enumerate(waiting) if j not in taken]
    new = range(coming, min(coming + len(taken), len(sentences)))
    waiting += new
    arrived.update(dict.fromkeys(new, len(batches)))
    coming += len(taken)
  return batches


def load_stream(sentences: list[str], clients: int, per_client: int) -> list[str]:
  """What `clients` clients send in one timed round: the sentences, cycled to `per_client` requests each
  where that is more (so a round is not all start and tail)."""
  return [sentences[i % len(sentences)] for i in range(max(len(sentences), per_client * clients))]


def row_step_use(translator: Translator, sentences: list[str], rows: int = 64) -> dict:
  """How busy a batch's rows are when a left-to-right decoder decodes batch-at-a-time: the steps each
  sentence needs (its `steps` statistic) against the row-steps its batch runs, with the loop's shrink
  stages (nat_jax.decode.loop: 64 rows, then 16 once no more are live, then 4). What continuous batching
  (refilling finished rows from the queue) could win is at most spent / needed, in row-steps."""
  from nat_jax.data import inference_batches
  from nat_jax.decode.loop import MIN_ROWS, SHRINK
  from nat_jax.run.translation import encode_sources, source_lengths
  out = translator.translate_with_stats(sentences, batch_size=rows)
  if 'steps' not in out[0].stats:
    return {}
  steps = np.asarray([t.stats['steps'] for t in out])
  seqs = encode_sources(sentences, translator.run.tokenizer, translator.run.config.max_len, warn=False)
  needed = spent = 0
  for index, _ in inference_batches(seqs, rows, source_lengths(translator.run.config.max_len), shrink=True):
    own = np.sort(steps[index[index >= 0]])[::-1]
    width, t = len(index), 0
    needed += int(own.sum())
    while t < own[0]:
      live = int((own > t).sum())
      while width >= 16 and width // SHRINK >= MIN_ROWS and live <= width // SHRINK:
        width //= SHRINK
      spent += width
      t += 1
  return {'row_steps_needed': needed, 'row_steps_spent': spent, 'busy': round(needed / spent, 3)}


def free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def precision_kwargs() -> dict[str, str]:
  """--precision as the Translator's (and nat_jax.serve's) dtype and quantization."""
  return dict(zip(('dtype', 'quantization'), precision(FLAGS.precision)))


def start_server(workdir: str, decoder: str, max_batch: int) -> tuple[subprocess.Popen, str]:
  port = free_port()
  proc = subprocess.Popen([sys.executable, '-m', 'nat_jax.serve', f'--workdir={workdir}', f'--decoder={decoder}',
                           *(f'--{k}={v}' for k, v in precision_kwargs().items()),
                           f'--port={port}', f'--max_batch={max_batch}', f'--max_wait_ms={FLAGS.max_wait_ms}',
                           '--max_queue=1000000', '--timeout_s=600', f'--warmup={FLAGS.warmup}',
                           f'--http={FLAGS.http}', f'--compose={FLAGS.compose}'],
                          stderr=(errors := tempfile.TemporaryFile()))
  url = f'http://127.0.0.1:{port}'
  started, deadline = time.monotonic(), time.monotonic() + 1800
  while True:
    if proc.poll() is not None:
      errors.seek(0)
      tail = errors.read().decode(errors='replace').strip().splitlines()[-20:]
      raise RuntimeError(f'the server for {workdir} exited with status {proc.returncode}; its last lines:\n'
                         + '\n'.join(tail))
    try:
      if httpx.get(url + '/health').status_code == 200:
        print(f'  server (max_batch={max_batch}, warmup={FLAGS.warmup}) ready in {time.monotonic() - started:.0f} s',
              flush=True)
        return proc, url
    except httpx.TransportError:
      pass
    if time.monotonic() > deadline:
      proc.kill()
      raise RuntimeError(f'the server for {workdir} did not get ready.')
    time.sleep(0.2)


def rss_mib(pid: int) -> float:
  with open(f'/proc/{pid}/status') as f:
    for line in f:
      if line.startswith('VmRSS:'):
        return round(int(line.split()[1]) / 1024, 1)
  return float('nan')


def cpu_seconds(pid: int) -> float:
  """User + system CPU seconds of process `pid`, all its threads (/proc/<pid>/stat)."""
  with open(f'/proc/{pid}/stat') as f:
    fields = f.read().rsplit(')', 1)[1].split()
  return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def server_counts(url: str) -> dict[str, float]:
  """The server's compiles, compile-cache clears and batch-size histogram sum and count, from /metrics."""
  names = ('nat_jax_compiles_total', 'nat_jax_compile_cache_clears_total', 'nat_jax_batch_size_sum',
           'nat_jax_batch_size_count')
  values = dict.fromkeys(names, float('nan'))
  for line in httpx.get(url + '/metrics').text.splitlines():
    name, _, value = line.partition(' ')
    if name in values:
      values[name] = float(value)
  return values


class Connection:
  """One keep-alive HTTP/1.1 connection, speaking only what the load needs: POST a JSON body, read an
  answer that has a Content-Length (uvicorn's JSON answers do). The clients share the server's cores
  here, so they should cost little: httpx's pool scans its connections on every request and cost
  several times more CPU per request (measured: docs/lab-notes/2026-11-26-serving.md)."""

  def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str):
    self.reader, self.writer, self.host = reader, writer, host.encode()

  @classmethod
  async def open(cls, url: str) -> 'Connection':
    host, port = url.split('://', 1)[1].rsplit(':', 1)
    return cls(*await asyncio.open_connection(host, int(port)), host)

  async def post_json(self, path: str, payload) -> bytes:
    body = json.dumps(payload).encode()
    self.writer.write(b'POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n'
                      % (path.encode(), self.host, len(body)) + body)
    head = await self.reader.readuntil(b'\r\n\r\n')
    status = int(head.split(b' ', 2)[1])
    length = next(int(line.split(b':', 1)[1]) for line in head.split(b'\r\n')
                  if line.lower().startswith(b'content-length:'))
    answer = await self.reader.readexactly(length)
    if status != 200:
      raise RuntimeError(f'{path} answered {status}: {answer[:200]!r}')
    return answer

  def close(self):
    self.writer.close()


def run_async(coroutine):
  """Runs `coroutine` on uvloop (installed with nat_jax's server), asyncio's loop where it is missing."""
  try:
    import uvloop
  except ImportError:
    return asyncio.run(coroutine)
  with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
    return runner.run(coroutine)


async def load(url: str, sentences: list[str], clients: int, requests: int = 0, seconds: float = 0.0) -> dict:
  """`clients` concurrent clients, one connection each, sending one sentence per request until
  `requests` are answered (or for `seconds`): sentences/s and per-request latency."""
  latencies: list[float] = []
  sent = 0
  stop_at = time.perf_counter() + seconds if seconds else None

  async def client(c: Connection):
    nonlocal sent
    while (sent < requests) if stop_at is None else (time.perf_counter() < stop_at):
      text = sentences[sent % len(sentences)]
      sent += 1
      t0 = time.perf_counter()
      await c.post_json('/v1/translate', {'text': [text]})
      latencies.append(time.perf_counter() - t0)
  connections = [await Connection.open(url) for _ in range(clients)]
  try:
    t0 = time.perf_counter()
    await asyncio.gather(*[client(c) for c in connections])
    wall = time.perf_counter() - t0
  finally:
    for c in connections:
      c.close()
  return {'sentences_per_s': round(len(latencies) / wall, 1), 'p50_ms': percentile_ms(latencies, 50),
          'p99_ms': percentile_ms(latencies, 99), 'requests': len(latencies)}


def served(workdir: str, decoder: str, sentences: list[str], max_batch: int, levels: list[int],
           soak_seconds: int = 0) -> dict:
  proc, url = start_server(workdir, decoder, max_batch)
  try:
    out = {}
    for clients in levels:
      stream = load_stream(sentences, clients, FLAGS.requests_per_client)
      run_async(load(url, stream, clients, requests=len(stream)))  # untimed: compiles what this load needs
      before, server_cpu, client_cpu = server_counts(url), cpu_seconds(proc.pid), time.process_time()
      out[str(clients)] = row = run_async(load(url, stream, clients, requests=len(stream)))
      after, done = server_counts(url), row['requests']
      row['server_cpu_ms_per_sentence'] = round(1000 * (cpu_seconds(proc.pid) - server_cpu) / done, 2)
      row['client_cpu_ms_per_sentence'] = round(1000 * (time.process_time() - client_cpu) / done, 2)
      row['compiles_while_timed'] = after['nat_jax_compiles_total'] - before['nat_jax_compiles_total']
      row['cache_clears'] = after['nat_jax_compile_cache_clears_total']  # since the server started
      row['mean_batch'] = round((after['nat_jax_batch_size_sum'] - before['nat_jax_batch_size_sum'])
                                / max(1.0, after['nat_jax_batch_size_count'] - before['nat_jax_batch_size_count']), 1)
      print(f'  max_batch={max_batch} clients={clients}: {out[str(clients)]}', flush=True)
    if soak_seconds:
      start = rss_mib(proc.pid)
      soak = run_async(load(url, sentences, 32, seconds=soak_seconds))
      out['soak'] = {'seconds': soak_seconds, 'rss_start_mib': start, 'rss_end_mib': rss_mib(proc.pid), **soak}
      print(f'  soak: {out["soak"]}', flush=True)
    return out
  finally:
    proc.terminate()
    proc.wait(timeout=120)


def main(argv):
  if not FLAGS.runs:
    raise ConfigError('--runs=<run_dir:decoder,...> is required.')
  levels = [int(c) for c in FLAGS.clients]
  report = {'machine': machine(), 'command': ' '.join(sys.argv), 'rows': {}}
  print(report['machine'], flush=True)
  for entry in FLAGS.runs:
    workdir, _, decoder = entry.rpartition(':')
    if not workdir:
      raise ConfigError(f'--runs entry {entry!r}: expected run_dir:decoder.')
    config = Translator(workdir, decoder, batch_size=1).run.config
    sentences = [e.source for e in load_split(config.data, 'test') if e.source.strip()][:FLAGS.sentences]
    print(f'{entry}: {len(sentences)} test sentences', flush=True)
    row = {'offline': offline(workdir, decoder, sentences)}
    row['batch64_row_steps'] = row_step_use(Translator(workdir, decoder, **precision_kwargs()), sentences)
    print(f'  batch-64 row steps: {row["batch64_row_steps"]}', flush=True)
    print(f'  offline: {row["offline"]}', flush=True)
    row['batching'] = served(workdir, decoder, sentences, FLAGS.max_batch, levels,
                             FLAGS.soak_seconds if entry == FLAGS.runs[0] else 0)
    if FLAGS.one_at_a_time:
      row['one_at_a_time'] = served(workdir, decoder, sentences, 1, levels)
    base = row['offline']
    row['ratios'] = {
        'throughput_vs_offline_b64': {c: round(row['batching'][str(c)]['sentences_per_s']
                                               / base['batch64_sentences_per_s'], 3) for c in levels},
        'p99_1_client_vs_offline_b1': round(row['batching'][str(levels[0])]['p99_ms'] / base['batch1_p99_ms'], 3),
        # what the server spends per sentence against offline batch 64: its throughput on cores of its own
        'server_cpu_vs_offline_b64': {c: round(row['batching'][str(c)]['server_cpu_ms_per_sentence']
                                               / base['batch64_cpu_ms_per_sentence'], 3) for c in levels},
        # against the server's own batches decoded offline: what serving adds to decoding
        'throughput_vs_offline_closed_loop': {
            c: round(row['batching'][str(c)]['sentences_per_s']
                     / base['closed_loop'][str(c)]['sentences_per_s'], 3) for c in levels}}
    print(f'  ratios: {row["ratios"]}', flush=True)
    report['rows'][entry] = row
    if FLAGS.out:  # after every row: a later row's failure keeps the earlier ones
      os.makedirs(os.path.dirname(os.path.abspath(FLAGS.out)), exist_ok=True)
      write_atomic(FLAGS.out, json.dumps(report, indent=1))
  print(json.dumps(report['rows'], indent=1))


if __name__ == '__main__':
  cli.run_command(main)
