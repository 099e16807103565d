"""Forward+backward speed and compiled temp memory of the DAG NLL and fuzzy losses vs straightforward baselines.

  nice -n 19 python -m benchmarks.components.dag_loss_speed --batch 32 --graph 256 --target 32   (from the repo root)

NLL: the log-space scan (rematerialised step), the scaled matmul form and a baseline that runs
logsumexp over a materialised [B, L, L] per step with plain autodiff, all on the same inputs.
Fuzzy (n = 2 by default): the batched implementation vs a baseline with passing probabilities from
a scan over vertices and one vector-matrix chain per reference n-gram (a Python loop over m).
Timings: median of --repeats calls after a warm-up, each ended by block_until_ready.
"""
from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

from nat_jax.core.graph import first_vertex
from nat_jax.core.masks import NEG_INF
from nat_jax.losses import dag, fuzzy
from nat_jax.metrics.timing import machine, median_timed


def make_inputs(batch: int, size: int, tlen: int, vocab: int, seed: int = 0):
  """Normalized log transitions [B, L, L], log_emit [B, L, M], targets [B, M] and lengths [B]."""
  rng = np.random.default_rng(seed)
  graph_lengths = jnp.asarray(rng.integers(size // 2, size + 1, batch).clip(tlen, size), jnp.int32)  # [B]
  target_lengths = jnp.asarray(rng.integers(tlen // 2, tlen + 1, batch), jnp.int32)  # [B]
  mask = dag.transition_mask(graph_lengths, size)  # [B, L, L]
  logits = jnp.asarray(rng.normal(size=(batch, size, size)) * 2, jnp.float32)
  log_trans = jax.nn.log_softmax(jnp.where(mask, logits, NEG_INF), axis=-1)  # [B, L, L]
  targets = jnp.asarray(rng.integers(0, vocab, (batch, tlen)), jnp.int32)  # [B, M]
  log_probs = jax.nn.log_softmax(jnp.asarray(rng.normal(size=(batch, size, vocab)) * 2, jnp.float32))  # [B, L, V]
  log_emit = jnp.take_along_axis(log_probs, jnp.broadcast_to(targets[:, None, :], (batch, size, tlen)), axis=2)
  return log_trans, log_emit, targets, target_lengths, graph_lengths


def baseline_log_likelihood(log_trans, log_emit, target_lengths, graph_lengths):
  """The forward algorithm as written: logsumexp over [B, L, L] each step, all alphas kept."""
  _, size, tlen = log_emit.shape
  trans = jnp.where(dag.transition_mask(graph_lengths, size), log_trans, NEG_INF)  # [B, L, L]
  emit = jnp.where(dag.emission_mask(target_lengths, graph_lengths, size, tlen), log_emit, NEG_INF)  # [B, L, M]
  first = jnp.where(jnp.arange(size) == 0, emit[:, :, 0], NEG_INF)  # [B, L]

  def step(alpha, emit_m):
    new = jax.nn.logsumexp(alpha[:, :, None] + trans, axis=1) + emit_m  # [B, L]
    return new, new

  _, alphas = jax.lax.scan(step, first, jnp.moveaxis(emit, 2, 0)[1:])
  alphas = jnp.concatenate([first[None], alphas])  # [M, B, L]
  rows = jnp.arange(target_lengths.shape[0])
  at_end = alphas[jnp.clip(target_lengths - 1, 0), rows, jnp.clip(graph_lengths - 1, 0)]  # [B]
  return jnp.where(dag.path_exists(target_lengths, graph_lengths), at_end, -jnp.inf)


def baseline_fuzzy_loss(log_trans, log_emit, targets, target_lengths, graph_lengths, n=2):
  """Same loss; p by a scan over vertices, E[C_g] by one vector-matrix chain per reference position."""
  batch, size, tlen = log_emit.shape
  trans = fuzzy.transition_probs(log_trans, graph_lengths)  # [B, L, L]
  emask = dag.emission_mask(target_lengths, graph_lengths, size, tlen)
  emit = jnp.where(emask, jnp.exp(jnp.where(emask, log_emit, 0.0)), 0.0)  # [B, L, M]

  def visit(p, j):  # p [B, L]
    pj = jnp.where(j == 0, 1.0, jnp.einsum('bi,bi->b', p, trans[:, :, j]))
    return p.at[:, j].set(pj), None

  p, _ = jax.lax.scan(visit, jnp.zeros((batch, size)), jnp.arange(size))
  p = jnp.where(jnp.arange(size)[None] < graph_lengths[:, None], p, 0.0)  # [B, L]
  counts = []
  for m in range(tlen):
    r = p * emit[:, :, m]  # [B, L]
    for k in range(1, n):
      r = jnp.einsum('bi,bij->bj', r, trans) * (emit[:, :, m + k] if m + k < tlen else 0.0)
    counts.append(jnp.sum(r, axis=-1))
  walk = p
  for _ in range(n - 1):
    walk = jnp.einsum('bi,bij->bj', walk, trans)
  first, ref = fuzzy.distinct_reference_ngrams(targets, target_lengths, n)
  clipped = jnp.sum(jnp.where(first, jnp.minimum(jnp.stack(counts, 1), ref), 0.0), -1)
  exp_len, exp_ngrams = jnp.sum(p, -1), jnp.sum(walk, -1)
  brevity = jnp.minimum(1.0, jnp.exp(1.0 - target_lengths / exp_len))
  return -brevity * clipped / exp_ngrams


def baseline_best_alignment(log_trans, log_emit, target_lengths, graph_lengths):
  """Viterbi keeping an argmax back-pointer for every (step, vertex): [B, L, L] max + argmax per step."""
  trans, emit, _ = dag.masked_inputs(log_trans, log_emit, target_lengths, graph_lengths)

  def step(delta, emit_k):
    cand = delta[:, :, None] + trans  # [B, L, L]
    return jnp.max(cand, axis=1) + emit_k, jnp.argmax(cand, axis=1).astype(jnp.int32)

  first = first_vertex(emit[0])
  _, back = jax.lax.scan(step, first, emit[1:])  # [M-1, B, L]
  last = jnp.clip(graph_lengths - 1, 0, log_trans.shape[-1] - 1)

  def trace(cur, inputs):  # walk back from position T-1
    k, back_k = inputs
    cur = jnp.where(k == target_lengths - 1, last, cur)
    out = jnp.where(k < target_lengths, cur, -1)
    return jnp.take_along_axis(back_k, cur[:, None], axis=1)[:, 0], out

  back = jnp.concatenate([jnp.zeros_like(back[:1]), back])  # row 0 unused
  _, path = jax.lax.scan(trace, jnp.zeros_like(target_lengths), (jnp.arange(back.shape[0]), back), reverse=True)
  return path.T


def timed(fn, args, repeats):
  """(median seconds, compiled temp bytes or None, outputs) of a jitted fn."""
  compiled = jax.jit(fn).lower(*args).compile()
  analysis = compiled.memory_analysis()
  temp = getattr(analysis, 'temp_size_in_bytes', None) if analysis is not None else None
  out, seconds = median_timed(lambda: compiled(*args), repeats)
  return seconds, temp, out


def value_and_grads(loss_fn):
  """(lt, le) -> (sum of finite per-pair losses, (d/dlog_trans, d/dlog_emit))."""
  def total(lt, le, *rest):
    per_pair = loss_fn(lt, le, *rest)
    return jnp.sum(jnp.where(jnp.isfinite(per_pair), per_pair, 0.0))
  return jax.value_and_grad(total, argnums=(0, 1))


def rel_diff(a, b) -> str:
  """'value / gradients' relative differences: |a - b| / max|b| for the loss, max over the gradients."""
  def rel(x, y):
    return float(jnp.max(jnp.abs(x - y)) / jnp.maximum(jnp.max(jnp.abs(y)), 1e-30))
  (va, ga), (vb, gb) = a, b
  return f'{rel(va, vb):.1e} / {max(rel(x, y) for x, y in zip(ga, gb)):.1e}'


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--batch', type=int, default=32)
  parser.add_argument('--graph', type=int, default=256)
  parser.add_argument('--target', type=int, default=32)
  parser.add_argument('--vocab', type=int, default=64)
  parser.add_argument('--ngram', type=int, default=2)
  parser.add_argument('--repeats', type=int, default=5)
  flags = parser.parse_args()
  lt, le, targets, tl, gl = make_inputs(flags.batch, flags.graph, flags.target, flags.vocab)

  nll = {'baseline: logsumexp over [B,L,L], plain autodiff': baseline_log_likelihood,
         'log-space scan (rematerialised step)': dag.dag_log_likelihood_logspace,
         'scaled matmul form': dag.dag_log_likelihood_scaled,
         'dag_log_likelihood (scaled + log-space fallback)': dag.dag_log_likelihood}
  fuzzy_fns = {'baseline: scan p, loop over n-grams': baseline_fuzzy_loss,
               'fuzzy_alignment_loss (batched)': fuzzy.fuzzy_alignment_loss}
  rows = []
  for group, fns, args in [('NLL', nll, (lt, le, tl, gl)),
                           (f'fuzzy n={flags.ngram}', fuzzy_fns, (lt, le, targets, tl, gl))]:
    results = {}
    for name, fn in fns.items():
      loss_fn = (lambda f: lambda a, b, *r: f(a, b, *r, n=flags.ngram))(fn) if group.startswith('fuzzy') else fn
      results[name] = timed(value_and_grads(loss_fn), args, flags.repeats)
    base_time, base_mem, base_out = next(iter(results.values()))
    for name, (sec, mem, out) in results.items():
      rows.append((group, name, sec, mem, base_time / sec, rel_diff(out, base_out),
                   (base_mem / mem) if mem and base_mem else float('nan')))

  align = {name: timed(fn, (lt, le, tl, gl), flags.repeats) for name, fn in (
      ('baseline: argmax back-pointers every step', baseline_best_alignment),
      ('dag_best_alignment (max only; argmax along the path in the backtrace)', dag.dag_best_alignment))}

  print(f'B={flags.batch} L={flags.graph} M={flags.target} (forward+backward, median of {flags.repeats}; '
        f'{machine()})\n')
  print('| loss | implementation | time (ms) | speed-up vs baseline | temp memory (MiB) | memory vs baseline | '
        'rel. diff vs baseline (value / grads) |')
  print('| --- | --- | ---: | ---: | ---: | ---: | ---: |')
  for group, name, sec, mem, speed, diff, mem_ratio in rows:
    mem_text = f'{mem / 2**20:.1f}' if mem is not None else 'n/a'
    print(f'| {group} | {name} | {sec * 1e3:.1f} | {speed:.2f}x | {mem_text} | {mem_ratio:.2f}x smaller | {diff} |')
  base_sec, _, base_path = next(iter(align.values()))
  print('\n| Viterbi alignment | time (ms) | speed-up vs baseline | same paths |\n| --- | ---: | ---: | --- |')
  for name, (sec, _, path) in align.items():
    print(f'| {name} | {sec * 1e3:.1f} | {base_sec / sec:.2f}x | {bool(jnp.all(path == base_path))} |')


if __name__ == '__main__':
  main()
