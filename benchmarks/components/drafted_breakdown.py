"""Where drafted decoding spends its time at batch 1, against greedy and against a free, perfect draft.

  python -m benchmarks.components.drafted_breakdown --workdir=runs/at_bible_tiny --drafter=runs/selfdraft_bible_tiny \
      [--blocks=4,8] [--sentences=100] [--repeats=3]
  python -m benchmarks.components.drafted_breakdown --workdir=runs/at_bible_tiny --drafter=runs/dat_drafter \
      --update=redraft

For each of the first `sentences` test sentences, translated alone (batch 1, its own padded width):
the jitted greedy decode, the `drafted` decoder with --drafter (any drafter spec of that decoder;
empty: the run's own draft head) and the ceiling, `drafted` verifying the verifier's own greedy
output handed in as the draft (perfect and free), for each block. The decoders alternate within a
sentence, forwards then backwards, `repeats` times; the median per sentence is kept. Reported: mean
ms per sentence, speed-up over greedy, verifier passes, tokens per pass, ms per pass after the
encoder, identical outputs; and, for a draft head, the head's acceptance by position on the same
sentences: teacher-forced on the greedy output, from every boundary, the share of drafts whose
first j tokens are all right (what a pass from that boundary accepts), and the head's share of a
pass (head-drafted ms per pass minus the perfect draft's). With --update=redraft the drafter run
(DA-Transformer or CMLM) re-drafts after every pass and is reported as such a head.
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from nat_jax import decode
from nat_jax.commands import cli
from nat_jax.data import inference_batches, load_split
from nat_jax.decode import LeftToRightScorer
from nat_jax.decode.drafted import drafted_decode, parse_drafter, redrafter
from nat_jax.methods.autoregressive import autoregressive_inputs
from nat_jax.metrics.timing import machine, timed
from nat_jax.models.transformer import Transformer
from nat_jax.run.resources import Resources
from nat_jax.run.translation import encode_sources, source_lengths
from nat_jax.run.workdir import load_run
from nat_jax.views import WindowDrafter

flags.DEFINE_string('workdir', None, 'The verifier run.')
flags.DEFINE_string('drafter', '', 'The drafted decoder\'s drafter (<workdir>[:<decoder>...]); '
                    'empty: the run\'s own head.')
flags.DEFINE_string('update', 'jacobi', 'The drafted decoder\'s update after a pass (jacobi, draft, redraft).')
flags.DEFINE_list('blocks', ['4', '8'], 'Verification windows (steps per pass).')
flags.DEFINE_integer('sentences', 100, 'Test sentences, each translated alone.')
flags.DEFINE_integer('repeats', 3, 'Timed repeats per sentence and decoder (median).')
FLAGS = flags.FLAGS


def sentences(run, count: int) -> list[jax.Array]:
  """The first `count` test sources, each i32[1, width] at the width translate would use."""
  examples = load_split(run.config.data, 'test')[:count]
  seqs = encode_sources([e.source for e in examples], run.tokenizer, run.config.max_len)
  return [jnp.asarray(src) for _, src in inference_batches(seqs, 1, source_lengths(run.config.max_len))]


def head_acceptance(run, head: WindowDrafter, src: jax.Array, greedy_tokens: jax.Array) -> np.ndarray:
  """i64[W + 1]: over every boundary of the greedy output (its states teacher-forced when the head
  reads them), how many leading drafts were right, counted by run length 0 .. W."""
  scorer = run.method.views()[LeftToRightScorer](run.params)
  enc = scorer.encode(src)
  hidden = None
  if head.reads_states:
    inputs = autoregressive_inputs(greedy_tokens)
    _, hidden, _ = run.method.model.apply({'params': run.params.get('verifier', run.params)}, inputs.tokens,
                                          inputs.positions, inputs.self_mask(), enc['encoded'], enc['src_valid'],
                                          method=Transformer.decode_states)
  n = int(jnp.sum(greedy_tokens > 0))
  draft = jax.jit(head.draft)  # one compile per sentence, not per boundary
  counts = np.zeros(head.window + 1, np.int64)
  state = head.start(enc, greedy_tokens.shape[1] + head.window)
  padded = jnp.pad(greedy_tokens, ((0, 0), (0, head.window)))
  for fixed in range(0, n):  # output tokens < fixed final; drafts of fixed .. fixed + W - 1
    if fixed == 0:
      drafts = head.first(state)[:, :head.window]
    else:
      states = None if hidden is None else jnp.pad(hidden, ((0, 0), (0, head.window), (0, 0)))[
          :, fixed - 1:fixed - 1 + head.window]
      # the head's memory: slots up to fixed - 1 written by now
      drafts, state = draft(state, states, jnp.array([fixed - 1]), jnp.array([fixed]), padded)
    right = np.asarray(drafts[0] == padded[0, fixed:fixed + head.window])
    counts[int(np.argmin(np.append(right, False)))] += 1
  return counts


def decoder_fns(run, build, blocks: list[int]) -> tuple[dict, Callable]:
  """({name: (src, greedy tokens) -> DecodeOutput} for greedy and, per block, drafted and a perfect free draft;
  the jitted greedy itself)."""
  greedy = decode.build_decoder(run.method, 'greedy', {})[0]
  fns = {'greedy': lambda src, g: greedy(run.params, src)}
  for block in blocks:
    drafted = decode.build_decoder(run.method, 'drafted', {'drafter': FLAGS.drafter, 'block': str(block),
                                                           'update': FLAGS.update},
                                   resources=Resources(run.tokenizer, load=load_run))[0]
    perfect = jax.jit(lambda p, src, draft, b=block: drafted_decode(build(p), src, draft, block=b))
    fns[f'drafted, block {block}'] = lambda src, g, fn=drafted: fn(run.params, src)
    fns[f'perfect free draft, block {block}'] = lambda src, g, fn=perfect: fn(run.params, src, g)
  return fns, greedy


def draft_head(run, blocks: list[int]):
  """(head, the run it belongs to, make: (drafter params, src) -> a re-drafting head, the drafter run) whose
  acceptance is counted: a re-drafter built per source (--update=redraft), a drafter run's or the verifier's own
  WindowDrafter, or none."""
  if FLAGS.update == 'redraft':  # a whole-output drafter as a WindowDrafter, built per source (block max(blocks))
    workdir, name, overrides = parse_drafter(FLAGS.drafter)
    drafter_run = load_run(workdir)
    return None, run, redrafter(drafter_run, name, overrides, max(blocks)), drafter_run
  if FLAGS.drafter and not parse_drafter(FLAGS.drafter)[1]:
    drafter_run = load_run(parse_drafter(FLAGS.drafter)[0])
    if WindowDrafter in drafter_run.method.views():
      return drafter_run.method.views()[WindowDrafter](drafter_run.params), drafter_run, None, drafter_run
  elif not FLAGS.drafter and WindowDrafter in run.method.views():
    return run.method.views()[WindowDrafter](run.params), run, None, None
  return None, None, None, None


def print_report(fns, ms, passes, same, enc_ms, counts, head, blocks):
  """The per-decoder table and, where a head was counted, its acceptance and per-pass cost."""
  base = np.mean(ms['greedy'])
  print(f'Verifier {FLAGS.workdir}, drafter {FLAGS.drafter or "(its own head)"}; {len(ms["greedy"])} test sentences '
        f'alone (batch 1); mean encoder {np.mean(enc_ms):.2f} ms\n')
  print('| decoder | ms per sentence | speed-up vs greedy | verifier passes (greedy: steps) | tokens per pass '
        '| ms per pass after the encoder | same output as greedy |')
  print('|---|---|---|---|---|---|---|')
  for name in fns:
    mean_ms, mean_passes = float(np.mean(ms[name])), float(np.mean(passes[name]))
    print(f'| {name} | {mean_ms:.2f} | {base / mean_ms:.2f} | {mean_passes:.2f} | '
          f'{np.sum(passes["greedy"]) / np.sum(passes[name]):.2f} | {(mean_ms - np.mean(enc_ms)) / mean_passes:.3f} | '
          f'{same[name]}/{len(ms[name])} |')
  if counts is not None:
    reach = counts[::-1].cumsum()[::-1] / counts.sum()  # share of boundaries with >= j right leading drafts
    print(f'\nDraft head acceptance from {counts.sum()} boundaries (teacher-forced on the greedy output): share with '
          'the first j drafts all right')
    print('| j | ' + ' | '.join(str(j) for j in range(1, head.window + 1)) + ' | mean accepted drafts |')
    print('|---|' + '---|' * (head.window + 1))
    mean_run = float(np.dot(np.arange(head.window + 1), counts) / counts.sum())
    print('| share | ' + ' | '.join(f'{x:.3f}' for x in reach[1:]) + f' | {mean_run:.2f} |')
    for block in blocks:
      per_pass = lambda name: (np.mean(ms[name]) - np.mean(enc_ms)) / np.mean(passes[name])  # noqa: E731
      extra = per_pass(f'drafted, block {block}') - per_pass(f'perfect free draft, block {block}')
      print(f'block {block}: the head adds {extra:.3f} ms per pass (head-drafted pass minus a pass over a '
            'handed-in draft)')
  print(f'\nmachine: {machine()}')


def main(_):
  cli.quiet_logs()
  run = load_run(FLAGS.workdir)
  build = decode.method_view(run.method, LeftToRightScorer, 'drafted_breakdown')
  blocks = [int(b) for b in FLAGS.blocks]
  fns, greedy = decoder_fns(run, build, blocks)
  encode = jax.jit(lambda p, src: build(p).encode(src))
  head, head_run, make, drafter_run = draft_head(run, blocks)
  ms = {name: [] for name in fns}
  passes = {name: [] for name in fns}
  same = {name: 0 for name in fns}
  enc_ms, counts = [], None
  for src in sentences(run, FLAGS.sentences):
    g = greedy(run.params, src).tokens
    order = list(fns)
    times = {name: [] for name in fns}
    for name in order:  # compile this width, warm up
      jax.block_until_ready(fns[name](src, g))
    for r in range(FLAGS.repeats):
      for name in (order if r % 2 == 0 else order[::-1]):
        out, seconds = timed(lambda: fns[name](src, g))  # noqa: B023
        times[name].append(seconds)
    enc_ms.append(1e3 * float(np.median([timed(lambda: encode(run.params, src))[1] for _ in range(3)])))  # noqa: B023
    for name in fns:
      out = fns[name](src, g)
      ms[name].append(1e3 * float(np.median(times[name])))
      passes[name].append(int(out.aux['iterations'][0] if 'iterations' in out.aux else out.aux['steps'][0]))
      same[name] += bool(jnp.all(out.tokens == g))
    if make is not None:
      head = make(drafter_run.params, src)['head']
    if head is not None:
      these = head_acceptance(head_run, head, src, g)
      counts = these if counts is None else counts + these
  print_report(fns, ms, passes, same, enc_ms, counts, head, blocks)


if __name__ == '__main__':
  cli.run_command(main)
