"""The translation server under load, beside offline translation of the same sentences.

  python -m benchmarks.serve_load --runs=runs/at_bible_tiny:greedy,runs/dat_bible_tiny:dag_lookahead,\
runs/hrt_bible_tiny:hrt [--clients=1,8,32,128] [--sentences=256] [--soak_seconds=300] [--out=serve_load.json]

For each run:decoder, on the first `--sentences` sentences of its test split (Acts for the Bible recipes):
- offline, in this process: `Translator.translate` of every sentence at batch 64 (sentences/s, the
  median of `--passes` after an untimed pass that compiles), of the first `--latency_sentences`
  alone (batch 1: p50 / p99 ms), and in batches of what a server under `c` one-sentence clients is
  given at most: `c` sentences in arrival order (`in_arrival_order`, not sorted by length across them);
- served: `python -m nat_jax.serve` in a process of its own, batching (`--max_batch=64`) and one
  request at a time (`--max_batch=1`), each loaded by 1, 8, 32 and 128 concurrent clients of ours
  (asyncio + httpx, one sentence per request, each sentence once): sentences/s and p50 / p99 latency
  per request, each client count timed after an untimed round of the same load that compiles the
  shapes it needs (compiles that still happen while timing are counted from /metrics and reported);
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
import time

import httpx
import numpy as np
from absl import flags

from nat_jax.commands import cli
from nat_jax.data import load_split
from nat_jax.errors import ConfigError
from nat_jax.evaluation.timing import machine
from nat_jax.files import write_atomic
from nat_jax.run.translator import Translator

flags.DEFINE_list('runs', None, 'run_dir:decoder entries, e.g. runs/at_bible_tiny:greedy.')
flags.DEFINE_list('clients', ['1', '8', '32', '128'], 'Concurrent client counts.')
flags.DEFINE_integer('sentences', 256, 'The first this many test sentences: what every measurement translates.')
flags.DEFINE_integer('passes', 3, 'Timed offline batch-64 passes.')
flags.DEFINE_integer('latency_sentences', 100, 'Sentences translated alone offline (batch-1 latency).')
flags.DEFINE_integer('soak_seconds', 0, 'Seconds of 32-client load on the first entry\'s batching server, for the '
                     'memory check.')
flags.DEFINE_float('max_wait_ms', 0.0, 'The batching server\'s --max_wait_ms.')
flags.DEFINE_enum('warmup', 'narrow', ['none', 'narrow', 'all'], 'The servers\' --warmup (all: every shape a load '
                  'can meet compiles before the server reports ready; its time is in the results).')
flags.DEFINE_enum('http', 'auto', ['auto', 'fast', 'pure'], "The servers' --http (HTTP parser and event loop).")
flags.DEFINE_bool('one_at_a_time', True, 'Also serve with --max_batch=1.')
flags.DEFINE_string('out', None, 'JSON results file.')
FLAGS = flags.FLAGS


def percentile_ms(seconds: list[float], q: float) -> float:
  return round(float(np.percentile(np.asarray(seconds) * 1000, q)), 2)


def offline(workdir: str, decoder: str, sentences: list[str]) -> dict:
  """Batch-64 throughput and batch-1 latency of Translator.translate in this process."""
  translator = Translator(workdir, decoder, batch_size=64)
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
  in_order = {}  # what a server under `clients` one-sentence clients is given: `clients` sentences in arrival order
  for clients in [int(c) for c in FLAGS.clients]:
    chunks = [sentences[i:i + clients] for i in range(0, len(sentences), clients)]
    for chunk in chunks:  # compiles
      translator.translate(chunk)
    t0, c0 = time.perf_counter(), time.process_time()
    for chunk in chunks:
      translator.translate(chunk)
    in_order[str(clients)] = {'sentences_per_s': round(len(sentences) / (time.perf_counter() - t0), 1),
                              'cpu_ms_per_sentence': round(1000 * (time.process_time() - c0) / len(sentences), 2)}
  return {'batch64_sentences_per_s': round(len(sentences) / float(np.median(times)), 1),
          'in_arrival_order': in_order,
          'batch64_spread': [round(len(sentences) / max(times), 1), round(len(sentences) / min(times), 1)],
          'batch64_cpu_ms_per_sentence': round(1000 * float(np.median(cpu)) / len(sentences), 2),
          'batch1_p50_ms': percentile_ms(latency, 50), 'batch1_p99_ms': percentile_ms(latency, 99)}


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


def start_server(workdir: str, decoder: str, max_batch: int) -> tuple[subprocess.Popen, str]:
  port = free_port()
  proc = subprocess.Popen([sys.executable, '-m', 'nat_jax.serve', f'--workdir={workdir}', f'--decoder={decoder}',
                           f'--port={port}', f'--max_batch={max_batch}', f'--max_wait_ms={FLAGS.max_wait_ms}',
                           '--max_queue=1000000', '--timeout_s=600', f'--warmup={FLAGS.warmup}',
                           f'--http={FLAGS.http}'],
                          stderr=subprocess.DEVNULL)
  url = f'http://127.0.0.1:{port}'
  started, deadline = time.monotonic(), time.monotonic() + 1800
  while True:
    if proc.poll() is not None:
      raise RuntimeError(f'the server for {workdir} exited with status {proc.returncode}.')
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


def compiles(url: str) -> float:
  for line in httpx.get(url + '/metrics').text.splitlines():
    if line.startswith('nat_jax_compiles_total '):
      return float(line.split()[1])
  return float('nan')


async def load(url: str, sentences: list[str], clients: int, requests: int = 0, seconds: float = 0.0) -> dict:
  """`clients` concurrent clients sending one sentence per request until `requests` are answered (or
  for `seconds`): sentences/s and per-request latency."""
  latencies: list[float] = []
  sent = 0
  stop_at = time.perf_counter() + seconds if seconds else None

  async def client(c: httpx.AsyncClient):
    nonlocal sent
    while (sent < requests) if stop_at is None else (time.perf_counter() < stop_at):
      text = sentences[sent % len(sentences)]
      sent += 1
      t0 = time.perf_counter()
      r = await c.post('/v1/translate', json={'text': [text]})
      r.raise_for_status()
      latencies.append(time.perf_counter() - t0)
  limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
  async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as c:
    t0 = time.perf_counter()
    await asyncio.gather(*[client(c) for _ in range(clients)])
    wall = time.perf_counter() - t0
  return {'sentences_per_s': round(len(latencies) / wall, 1), 'p50_ms': percentile_ms(latencies, 50),
          'p99_ms': percentile_ms(latencies, 99), 'requests': len(latencies)}


def served(workdir: str, decoder: str, sentences: list[str], max_batch: int, levels: list[int],
           soak_seconds: int = 0) -> dict:
  proc, url = start_server(workdir, decoder, max_batch)
  try:
    out = {}
    for clients in levels:
      asyncio.run(load(url, sentences, clients, requests=len(sentences)))  # untimed: compiles what this load needs
      before, server_cpu, client_cpu = compiles(url), cpu_seconds(proc.pid), time.process_time()
      out[str(clients)] = asyncio.run(load(url, sentences, clients, requests=len(sentences)))
      done = out[str(clients)]['requests']
      out[str(clients)]['server_cpu_ms_per_sentence'] = round(1000 * (cpu_seconds(proc.pid) - server_cpu) / done, 2)
      out[str(clients)]['client_cpu_ms_per_sentence'] = round(1000 * (time.process_time() - client_cpu) / done, 2)
      out[str(clients)]['compiles_while_timed'] = compiles(url) - before
      print(f'  max_batch={max_batch} clients={clients}: {out[str(clients)]}', flush=True)
    if soak_seconds:
      start = rss_mib(proc.pid)
      soak = asyncio.run(load(url, sentences, 32, seconds=soak_seconds))
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
    row['batch64_row_steps'] = row_step_use(Translator(workdir, decoder), sentences)
    print(f'  batch-64 row steps: {row["batch64_row_steps"]}', flush=True)
    print(f'  offline: {row["offline"]}', flush=True)
    row['batching'] = served(workdir, decoder, sentences, 64, levels,
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
        # against offline batches of the same size and order: what serving adds to decoding
        'throughput_vs_offline_in_arrival_order': {
            c: round(row['batching'][str(c)]['sentences_per_s']
                     / base['in_arrival_order'][str(c)]['sentences_per_s'], 3) for c in levels}}
    print(f'  ratios: {row["ratios"]}', flush=True)
    report['rows'][entry] = row
  if FLAGS.out:
    os.makedirs(os.path.dirname(os.path.abspath(FLAGS.out)), exist_ok=True)
    write_atomic(FLAGS.out, json.dumps(report, indent=1))
  print(json.dumps(report['rows'], indent=1))


if __name__ == '__main__':
  cli.run_command(main)
