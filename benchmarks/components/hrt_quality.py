"""Where an HRT model loses BLEU: Skip-AT or the Skip-CMLM fill.

  python -m benchmarks.components.hrt_quality --workdir=runs/hrt_bible_tiny [--average=3] [--max_sentences=0]

On a split (test by default), with the run's own parameters:
  C_d = 1       the model decoding left to right (`hrt` with chunk=1, greedy);
  oracle fill   the Skip-CMLM fill of the C_d = 1 output's own skeleton (its tokens k, 2k, ..., EOS-padded
                as in training: `chunk_samples`' Skip-AT targets): what the fill gives when Skip-AT
                writes exactly what left-to-right decoding wrote;
  hrt           the full decode (greedy Skip-AT, then the fill; b_at = b_nat = 1).
C_d = 1 -> oracle fill is the fill's cost, oracle fill -> hrt is Skip-AT's. Also: the share of
skeleton positions where greedy Skip-AT wrote the same token, and the share of each skeleton
Skip-AT reproduced before its first difference.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from nat_jax import decode
from nat_jax.commands import cli
from nat_jax.core.tokens import through_first_eos
from nat_jax.data import load_split
from nat_jax.data.tokenizer import Tokenizer
from nat_jax.decode import DecodeOutput, HybridScorer
from nat_jax.decode.greedy import greedy_search
from nat_jax.decode.hrt import fill_chunks
from nat_jax.methods.hrt import chunk_samples
from nat_jax.metrics.scoring import score_translations
from nat_jax.metrics.timing import machine
from nat_jax.run.translation import translate_texts
from nat_jax.run.workdir import load_run

flags.DEFINE_string('workdir', None, 'An HRT run.')
flags.DEFINE_integer('average', 1, 'Average the parameters of this many checkpoints.')
flags.DEFINE_enum('split', 'test', ['validation', 'test'], 'Split to score.')
flags.DEFINE_integer('max_sentences', 0, 'First N sentences (0 = all).')
flags.DEFINE_integer('batch_size', 64, 'Rows per batch.')
FLAGS = flags.FLAGS


def oracle_fill(build, k: int):
  """A decode function: the fill of the C_d = 1 output's skeleton, with aux 'agree' (share of skeleton
  positions greedy Skip-AT matches) and 'prefix' (share matched before the first difference)."""
  def fn(params, src):
    view = build(params)
    left, skip = view.skip_scorer(1), view.skip_scorer(k)
    enc = left.encode(src)  # both views share the encoder
    y = greedy_search(left, enc, src.shape[0], left.max_decode_len(src.shape[1])).tokens[:, 1:]  # [B, P]
    valid, _ = through_first_eos(y)
    skeleton = chunk_samples(jnp.where(valid, y, 0), k, Tokenizer.bos_id, Tokenizer.eos_id,
                             Tokenizer.mask_id)['skip_at_targets']  # [B, ceil(P / k)]
    out, _ = fill_chunks(view, enc, skeleton, k)
    out_valid, _ = through_first_eos(out)
    z = greedy_search(skip, enc, src.shape[0], skip.max_decode_len(src.shape[1])).tokens[:, 1:]  # [B, m]
    m = min(z.shape[1], skeleton.shape[1])
    in_skeleton = skeleton[:, :m] > 0
    same = (z[:, :m] == skeleton[:, :m]) & in_skeleton
    count = jnp.maximum(jnp.sum(skeleton > 0, axis=1), 1)
    prefix = jnp.argmax(~same | ~in_skeleton, axis=1)  # first difference (or the skeleton's end)
    prefix = jnp.where(jnp.all(same | ~in_skeleton, axis=1), jnp.sum(in_skeleton, axis=1), prefix)
    return DecodeOutput(jnp.where(out_valid, out, 0), jnp.zeros(src.shape[0]),
                        {'agree': jnp.sum(same, axis=1) / count, 'prefix': prefix / count})
  return jax.jit(fn)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  cli.quiet_logs()
  run = load_run(FLAGS.workdir, average=FLAGS.average)
  build = decode.method_view(run.method, HybridScorer, 'hrt_quality')
  k = run.method.chunk
  examples = load_split(run.config.data, FLAGS.split)[:FLAGS.max_sentences or None]
  sources = [e.source for e in examples]
  fns = {'C_d = 1 (left to right)': decode.build_decoder(run.method, 'hrt', {'chunk': '1'})[0],
         f'oracle fill (skeleton of C_d = 1, k = {k})': oracle_fill(build, k),
         'hrt (Skip-AT + fill)': decode.build_decoder(run.method, 'hrt', {})[0]}
  print(f'HRT run {FLAGS.workdir} (k = {k}, average {FLAGS.average}), {FLAGS.split}, {len(sources)} sentences\n')
  print('| decode | BLEU (1 ref) | BLEU (all refs) |\n|---|---|---|')
  agree = None
  for name, fn in fns.items():
    hyps, aux = translate_texts(run, sources, fn, FLAGS.batch_size)
    scores = score_translations(hyps, examples)
    print(f'| {name} | {scores["first_ref"]["bleu"]} | {scores["all_refs"]["bleu"]} |', flush=True)
    agree = aux if 'agree' in aux else agree
  print(f'\nGreedy Skip-AT vs the C_d = 1 skeleton: same token at {100 * np.mean(agree["agree"]):.1f}% of skeleton '
        f'positions; {100 * np.mean(agree["prefix"]):.1f}% of a skeleton reproduced before the first difference.')
  print(f'machine: {machine()}')


if __name__ == '__main__':
  cli.run_command(main)
