"""BLEU / chrF and speed of several decoders on one split, side by side in one run.

  python -m nat_jax.evaluate --workdir=runs/at_bible_tiny --decoders=greedy,beam [--split=test]

For each decoder: sacreBLEU BLEU against the first and against all references, chrF, the
signatures, mean decoder steps (and every other per-sentence statistic the decoder reports, e.g.
mask_predict's length_clamped), latency per sentence at batch 1 (median over --batch1_runs passes
over --latency_sentences sentences, after compiling every shape), source words/s at batch 1
(RoyalFlush's speed metric: words of a pass / its wall-clock, mean of the passes) and sentences/s
at batch 64 over the whole split. --dtype=bfloat16|float16 evaluates in half precision. Writes <out>/eval.json and <out>/eval.md (default out: <workdir>/eval).
"""
from __future__ import annotations

import json
import os
import sys

from absl import flags
import jax
import numpy as np

from nat_jax import cli, decode
from nat_jax.data import inference_batches, load_split
from nat_jax.models.transformer import DTYPES
from nat_jax.scoring import score_translations
from nat_jax.timing import machine, timed
from nat_jax.translation import encode_sources, source_lengths, translate_texts

flags.DEFINE_string('workdir', None, 'Run directory written by nat_jax.train.')
flags.DEFINE_list('decoders', ['greedy', 'beam'], 'Comma-separated decoder names.')
flags.DEFINE_enum('split', 'test', ['train', 'validation', 'test'], 'Split to evaluate.')
flags.DEFINE_integer('max_sentences', 0, 'Evaluate the first N sentences (0 = all).')
flags.DEFINE_integer('latency_sentences', 100, 'Sentences timed one by one for batch-1 latency and source words/s '
                     '(0 = skip).')
flags.DEFINE_integer('batch1_runs', 5, 'Passes over the latency sentences at batch 1 (words/s: mean over passes).')
flags.DEFINE_integer('batch_size', 64, 'Batch size for the throughput measurement.')
flags.DEFINE_enum('checkpoint', 'latest', ['latest', 'best'], 'Which checkpoints to load.')
flags.DEFINE_integer('average', 1, 'Average the parameters of this many checkpoints.')
flags.DEFINE_enum('dtype', 'float32', list(DTYPES),
                  'Inference precision: parameters cast once at load, softmax statistics in fp32.')
flags.DEFINE_string('out', None, 'Output directory (default <workdir>/eval).')
FLAGS = flags.FLAGS
DECODER_OVERRIDES: dict[str, str] = {}  # --decoder.<opt>=<v>, taken out of argv before absl parses it


def warm_up(run, decode_fn, rows: int, sources: list[str]):
  """Compile every (rows, length) shape the decoder will see on `sources`, so timings exclude compilation."""
  for length in used_widths(run, sources):
    src = np.zeros((rows, length), np.int32)
    src[:, 0] = run.tokenizer.eos_id
    jax.block_until_ready(decode_fn(run.params, src).tokens)


def used_widths(run, sources: list[str]) -> list[int]:
  """The padded source widths that `sources` fall into (each alone, by inference_batches' own rule)."""
  seqs = encode_sources(sources, run.tokenizer, run.config.max_len, warn=False)  # translate_texts warns
  return sorted({src.shape[1] for _, src in inference_batches(seqs, 1, source_lengths(run.config.max_len))})


def batch1_speed(run, decode_fn, sources: list[str], runs: int) -> dict:
  """Batch-1 speed over `sources` translated one by one, `runs` passes after compiling every shape:
  latency per sentence (median and mean over all passes) and source words per second (whitespace
  words / wall-clock of a pass, mean over passes: RoyalFlush's metric)."""
  warm_up(run, decode_fn, 1, sources)
  words = sum(len(text.split()) for text in sources)
  times, per_pass = [], []
  for _ in range(runs):
    pass_times = [timed(lambda: translate_texts(run, [text], decode_fn, 1))[1] for text in sources]
    times += pass_times
    per_pass.append(words / sum(pass_times))
  return {'latency_ms_batch1_median': round(1000 * float(np.median(times)), 2),
          'latency_ms_batch1_mean': round(1000 * float(np.mean(times)), 2),
          'latency_sentences': len(sources), 'batch1_runs': runs,
          'source_words_per_s_batch1': round(float(np.mean(per_pass)), 1)}


def evaluate_decoder(run, name: str, overrides: dict[str, str], examples, *, batch_size: int = 64,
                     latency_sentences: int = 100, batch1_runs: int = 5) -> dict:
  """BLEU/chrF of decoder `name` on `examples`, its throughput at `batch_size` over all of them and
  its batch-1 speed over the first `latency_sentences` (0 = not measured), `batch1_runs` passes
  (`batch1_speed`), every shape compiled first; plus the mean of each per-sentence statistic the
  decoder reports."""
  decode_fn, options = decode.build_decoder(run.method, name, overrides)
  sources = [e.source for e in examples]
  warm_up(run, decode_fn, batch_size, sources)
  (hyps, aux), seconds = timed(lambda: translate_texts(run, sources, decode_fn, batch_size))
  result = {'decoder': name, 'options': options, 'sentences': len(sources), **score_translations(hyps, examples),
            'sentences_per_s_batch': round(len(sources) / seconds, 2), 'batch_size': batch_size,
            'dtype': run.config.model.dtype}
  for key, values in aux.items():
    result[f'mean_{key}'] = round(float(np.mean(values)), 3)
  if latency_sentences and batch1_runs:
    result.update(batch1_speed(run, decode_fn, sources[:latency_sentences], batch1_runs))
  return result


def add_speedups(results: list[dict]):
  """With greedy among the decoders: the iteration speedup of iterative parallel decoders (greedy's
  mean decoder passes / their mean iterations) and every decoder's wall-clock speedup (batch-1
  latency ratio, batch throughput ratio)."""
  greedy = next((r for r in results if r['decoder'] == 'greedy'), None)
  if greedy is None:
    return
  for r in results:
    if r.get('mean_iterations'):
      r['iteration_speedup_vs_greedy'] = round(greedy['mean_iterations'] / r['mean_iterations'], 3)
    r['wallclock_speedup_vs_greedy'] = {f'batch{r["batch_size"]}': round(
        r['sentences_per_s_batch'] / greedy['sentences_per_s_batch'], 3)}
    if 'latency_ms_batch1_median' in r:
      r['wallclock_speedup_vs_greedy']['batch1'] = round(
          greedy['latency_ms_batch1_median'] / r['latency_ms_batch1_median'], 3)


def markdown(results: list[dict], header: str) -> str:
  lines = [header, '',
           '| decoder | options | BLEU (1 ref) | BLEU (all refs) | chrF | mean steps | mean iterations '
           '| latency b=1 (ms, median) | src words/s b=1 | sent/s b=64 | iteration speedup '
           '| wall-clock speedup b=1 / b=64 |',
           '|---|---|---|---|---|---|---|---|---|---|---|---|']
  for r in results:
    all_refs = r.get('all_refs', {}).get('bleu', '-')
    wall = r.get('wallclock_speedup_vs_greedy', {})
    batch_key = f'batch{r["batch_size"]}'
    lines.append(f'| {r["decoder"]} | {r["options"]} | {r["first_ref"]["bleu"]} | {all_refs} | '
                 f'{r["first_ref"]["chrf"]} | {r.get("mean_steps", "-")} | {r.get("mean_iterations", "-")} | '
                 f'{r.get("latency_ms_batch1_median", "-")} | {r.get("source_words_per_s_batch1", "-")} | '
                 f'{r["sentences_per_s_batch"]} | '
                 f'{r.get("iteration_speedup_vs_greedy", "-")} | {wall.get("batch1", "-")} / '
                 f'{wall.get(batch_key, "-")} |')
  lines += ['', f'BLEU signature: `{results[0]["first_ref"]["bleu_signature"]}`' if results else '']
  return '\n'.join(lines) + '\n'


def decoder_overrides(decoders: list[str], overrides: dict[str, str]) -> dict[str, dict[str, str]]:
  """Per decoder, the --decoder.<opt> overrides it understands; an option none of them has is an error."""
  options = {name: decode.DECODERS[name].defaults if name in decode.DECODERS else {} for name in decoders}
  unknown = sorted(set(overrides) - {k for opts in options.values() for k in opts})
  if unknown:
    raise ValueError(f'--decoder.{unknown[0]}: none of the decoders {decoders} has this option.')
  return {name: {k: v for k, v in overrides.items() if k in opts} for name, opts in options.items()}


def main(argv):
  def prepare(run):  # fail before any work on a bad decoder name/option
    per_decoder = decoder_overrides(FLAGS.decoders, DECODER_OVERRIDES)
    for name in FLAGS.decoders:
      decode.build_decoder(run.method, name, per_decoder[name])
    return per_decoder
  run, overrides = cli.cli_prologue(argv, FLAGS.workdir, FLAGS.checkpoint, FLAGS.average, prepare, FLAGS.dtype)
  examples = load_split(run.config.data, FLAGS.split)[:FLAGS.max_sentences or None]
  results = []
  for name in FLAGS.decoders:
    print(f'evaluating {name} on {len(examples)} {FLAGS.split} sentences ...', file=sys.stderr, flush=True)
    results.append(evaluate_decoder(run, name, overrides[name], examples, batch_size=FLAGS.batch_size,
                                    latency_sentences=FLAGS.latency_sentences, batch1_runs=FLAGS.batch1_runs))
    print(json.dumps(results[-1]), file=sys.stderr, flush=True)
  add_speedups(results)
  out = FLAGS.out or os.path.join(FLAGS.workdir, 'eval')
  os.makedirs(out, exist_ok=True)
  header = (f'Evaluation of {FLAGS.workdir} (step {run.meta[0]["step"]}) on {FLAGS.split} '
            f'({len(examples)} sentences); {machine()}')
  with open(os.path.join(out, 'eval.json'), 'w') as f:
    json.dump({'workdir': FLAGS.workdir, 'split': FLAGS.split, 'step': run.meta[0]['step'],
               'device': jax.devices()[0].device_kind, 'machine': machine(), 'results': results}, f, indent=2)
  table = markdown(results, header)
  with open(os.path.join(out, 'eval.md'), 'w') as f:
    f.write(table)
  print(table)


if __name__ == '__main__':
  cli.run_with_decoder_flags(main, DECODER_OVERRIDES)
