"""nat_jax.benchmark: its numbers are computed the way it says.

BLEU equals sacreBLEU on the written outputs, the Pareto front is exactly the non-dominated points
(brute force), the n-gram match shares agree with sacreBLEU's clipped multi-reference precision and
with a hand count, and latency excludes compile time."""
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import sacrebleu

from nat_jax import decode
from nat_jax.evaluation import benchmark
from nat_jax.metrics.scoring import ngram_match_shares
from nat_jax.run.translation import translate_texts
from nat_jax.run.workdir import load_run
from tests.support import REPO


def dominated(i, xs, ys, lower_x_better):
  """Brute force: some other point is at least as good in x and y and strictly better in one."""
  better_x = (lambda a, b: a <= b) if lower_x_better else (lambda a, b: a >= b)
  return any(better_x(xs[j], xs[i]) and ys[j] >= ys[i] and (xs[j], ys[j]) != (xs[i], ys[i]) for j in range(len(xs)))


@pytest.mark.parametrize('lower_x_better', [True, False])
def test_pareto_front_is_exactly_the_non_dominated_points(lower_x_better):
  rng = np.random.default_rng(0)
  for trial in range(300):
    n = int(rng.integers(1, 12))
    xs = [float(v) for v in rng.integers(0, 5, n)]  # small ranges: ties and identical points happen
    ys = [float(v) for v in rng.integers(0, 5, n)]
    expected = [i for i in range(n) if not dominated(i, xs, ys, lower_x_better)]
    assert benchmark.pareto_front(xs, ys, lower_x_better) == expected, (trial, xs, ys)


def test_nothing_timed_draws_no_picture(tmp_path):
  """--latency_sentences=0 --batch_sizes=1: no speed to plot BLEU against, so no pareto.png (and no error)."""
  row = {'run': 'r', 'label': 'r:greedy', 'speed': {'sentences_per_s': {'1': 5.0}},
         'quality': {'per_ref': [{'bleu': 1.0}]}}
  report = {'rows': [row], 'batch_sizes': [1], 'split': 'test', 'sentences': 1, 'machine': 'm'}
  benchmark.add_fronts(report)
  assert report['pareto'] == {} and benchmark.plot_pareto(report, str(tmp_path / 'p.png')) is False
  assert not (tmp_path / 'p.png').exists()


def test_match_shares_by_hand_and_against_sacrebleu_precision():
  hyps = ['the cat sat on the mat', 'a dog a dog barks']
  first = ['the cat sat on a mat', 'a dog barks']
  second = ['a cat sat on the mat', 'the dog barks loudly']
  shares = ngram_match_shares(hyps, first, second, 1)
  # By hand, 11 output words. Sentence 1: the x2 (refs: 1 / 1) -> both 1, neither 1; cat, sat, on -> both 3;
  # mat -> both 1. Sentence 2: a x2 (refs 1 / 0) -> ref 1 only 1, neither 1; dog x2 (1 / 1) -> both 1,
  # neither 1; barks -> both 1.
  assert shares == {'both': round(100 * 7 / 11, 2), 'first_only': round(100 / 11, 2), 'second_only': 0.0,
                    'neither': round(100 * 3 / 11, 2)}
  rng = np.random.default_rng(1)
  words = 'a b c d e f'.split()
  sample = [lambda: ' '.join(rng.choice(words, int(rng.integers(1, 9)))) for _ in range(3)]
  for _ in range(20):
    h, a, b = ([s() for _ in range(5)] for s in sample)
    bleu = sacrebleu.metrics.BLEU().corpus_score(h, [a, b])
    for n in (1, 2):
      got = ngram_match_shares(h, a, b, n)
      assert abs(sum(got.values()) - 100) < 0.05
      precision = 100 * bleu.counts[n - 1] / bleu.totals[n - 1]
      assert abs(got['neither'] - (100 - precision)) < 0.011, (n, got, precision)


def test_latency_and_throughput_exclude_compile_time(trained_run):
  """A decode function that stalls 0.4 s the first time it meets a shape (a stand-in for compilation):
  the stall shows up in compile_s and in none of the timings."""
  run = load_run(trained_run)
  real, _ = decode.build_decoder(run.method, 'greedy', {})
  seen = set()

  def stalling(params, src):
    if src.shape not in seen:
      seen.add(src.shape)
      time.sleep(0.4)
    return real(params, src)

  sources = [line.split('\t')[0] for line in open(run.config.data.test_files).read().splitlines()]
  speed, hyps, _ = benchmark.measure_decoder(run, stalling, sources, batch_sizes=[1, 4], latency_sentences=4,
                                             batch1_runs=2)
  shapes = speed['compiled_shapes']
  assert shapes == len(seen) and speed['compile_s'] >= 0.4 * shapes - 0.05
  assert speed['batch1']['latency_ms_p90'] < 400 and speed['batch1']['latency_ms_mean'] < 400
  assert len(sources) / speed['sentences_per_s']['4'] < 0.4  # the whole pass took less than one stall
  assert hyps == translate_texts(run, sources, real, 4)[0]


def test_benchmark_command_line_end_to_end(trained_run, tmp_path):
  out = tmp_path / 'bench'
  result = subprocess.run([sys.executable, '-m', 'nat_jax.benchmark',
                           f'--runs={trained_run}:greedy+beam+jacobi_hgj/block_size=2,{trained_run}@int8:greedy',
                           '--max_sentences=12', '--latency_sentences=3', '--batch1_runs=1', '--batch_sizes=1,4',
                           f'--out={out}'], cwd=REPO, capture_output=True, text=True, timeout=900)
  assert result.returncode == 0, result.stderr[-3000:]
  report = json.loads((out / 'results.json').read_text())
  name = os.path.basename(trained_run)
  assert [r['label'] for r in report['rows']] == [f'{name}:greedy', f'{name}:beam', f'{name}:jacobi_hgj/block_size=2',
                                                  f'{name}@int8:greedy']
  assert report['baseline'] == name and report['sentences'] == 12
  lines = open(load_run(trained_run).config.data.test_files).read().splitlines()[:12]
  refs = [[line.split('\t')[k] for line in lines] for k in (1, 2)]
  for r in report['rows']:
    hyps = (out / r['outputs']).read_text().split('\n')
    assert hyps[-1] == '' and len(hyps) == 13  # one line per sentence, in order
    hyps = hyps[:-1]
    q = r['quality']
    for k in (0, 1):
      assert q['per_ref'][k]['bleu'] == round(sacrebleu.corpus_bleu(hyps, [refs[k]]).score, 2)
    assert q['all_refs']['bleu'] == round(sacrebleu.corpus_bleu(hyps, refs).score, 2)
    assert q['all_refs']['chrf'] == round(sacrebleu.corpus_chrf(hyps, refs).score, 2)
    assert r['speed']['compile_s'] > 0 and r['speed']['batch1']['latency_ms_median'] > 0
    assert r['train_cpu_hours'] == round(load_run(trained_run).meta[0]['cpu_seconds'] / 3600, 2)
  greedy, beam, jacobi, half = report['rows']
  assert jacobi['vs_own_greedy']['same_output'] == 1.0 and jacobi['quality'] == greedy['quality']
  assert greedy['vs_baseline']['greedy'] == {'batch1': 1.0, 'batch4': 1.0}
  assert beam['vs_baseline']['beam']['batch4'] == 1.0 and half['dtype'] == 'int8'
  same = [a == b for a, b in zip((out / half['outputs']).read_text().split('\n')[:-1],
                                 (out / greedy['outputs']).read_text().split('\n')[:-1])]
  delta = half['quality']['all_refs']['bleu'] - greedy['quality']['all_refs']['bleu']
  assert half['vs_float32'] == {'bleu': round(delta, 2), 'same_output': round(sum(same) / len(same), 4)}
  assert 'vs_float32' not in greedy
  assert abs(beam['vs_baseline']['greedy']['batch1'] - greedy['speed']['batch1']['latency_ms_median']
             / beam['speed']['batch1']['latency_ms_median']) < 0.002
  rows = report['rows']
  xs = [r['speed']['batch1']['latency_ms_median'] for r in rows]
  ys = [benchmark.bleu_of(r) for r in rows]
  assert report['pareto']['latency_batch1'] == [rows[i]['label'] for i in range(4) if not dominated(i, xs, ys, True)]
  assert (out / 'pareto.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  table = (out / 'results.md').read_text()
  assert '**Quality**' in table and '**Speed**' in table and f'| {name}@int8 | greedy |' in table
  for bad, message in ((f'--runs={trained_run}@fp8:greedy', 'expected workdir[@float32|bfloat16|float16|int8]'),
                       (f'--runs={trained_run}:greedy/beam_size', 'expected name or name/opt=value'),
                       (f'--runs={trained_run}:greedy/beam_size=2', "has no option 'beam_size'"),
                       (f'--runs={tmp_path}/nothing:greedy', 'Train first')):
    failed = subprocess.run([sys.executable, '-m', 'nat_jax.benchmark', bad, f'--out={tmp_path}/bad'], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert failed.returncode == 2 and message in failed.stderr, (bad, failed.stderr[-2000:])


def test_default_decoders_follow_the_method(trained_run):
  run = load_run(trained_run)
  assert benchmark.default_decoders(run) == ('greedy',)  # the tiny run's test decoder is greedy
  entry = benchmark.parse_entry('runs/x@bfloat16', 'float32')
  assert entry == benchmark.Entry('runs/x', 'bfloat16', ()) and entry.label == 'x@bfloat16'
  assert benchmark.output_name('hrt_bible_tiny:hrt/b_at=4') == 'hrt_bible_tiny.hrt_b_at=4.txt'
  assert benchmark.parse_decoder('hrt/b_at=4/chunk=1') == ('hrt', {'b_at': '4', 'chunk': '1'})


def test_decoder_option_values_may_be_paths():
  """A drafter is a run directory: '/' inside a value does not start a new option."""
  assert benchmark.parse_decoder('drafted/drafter=/r/cmlm_x:mask_predict:iterations=1/block=4') == (
      'drafted', {'drafter': '/r/cmlm_x:mask_predict:iterations=1', 'block': '4'})
  entry = benchmark.parse_entry('runs/at:greedy+drafted/drafter=runs/dat:dag_lookahead/beta=3', 'float32')
  assert entry.decoders == ('greedy', 'drafted/drafter=runs/dat:dag_lookahead/beta=3')
  assert benchmark.parse_decoder(entry.decoders[1]) == ('drafted', {'drafter': 'runs/dat:dag_lookahead', 'beta': '3'})
  with pytest.raises(ValueError, match='expected name or name/opt=value'):
    benchmark.parse_decoder('greedy/oops')
  assert benchmark.tokens_per_pass({'steps': 12.0, 'iterations': 3.0}) == 4.0
  assert benchmark.tokens_per_pass({'steps': 12.0}) is None


def test_ctranslate2_peer_rows_translate_as_our_decoders(trained_run):
  """Peer rows (the run exported to CTranslate2) are measured like our decoders: float32 greedy gives
  our greedy's translations (the same output share is 1.0; beam equality, with its one documented
  difference at the length bound, is tests/integration/test_export.py's); beam and int8 run; peers refuse bad
  options and half-precision entries."""
  pytest.importorskip('ctranslate2')
  from nat_jax.errors import ConfigError
  entry = benchmark.parse_entry(f'{trained_run}:greedy+beam/alpha=0+ct2_greedy/threads=1+ct2_beam/threads=1+'
                                'ct2_greedy/quantization=int8/threads=1', 'float32')
  report, hyps = benchmark.benchmark([entry], batch_sizes=(1, 4), max_sentences=10, latency_sentences=2,
                                     batch1_runs=1, log=lambda msg: None)
  rows = {r['decoder_spec']: r for r in report['rows']}
  labels = {spec: r['label'] for spec, r in rows.items()}
  assert hyps[labels['ct2_greedy/threads=1']] == hyps[labels['greedy']]
  assert rows['ct2_greedy/threads=1']['vs_own_greedy']['same_output'] == 1.0
  assert len(hyps[labels['ct2_beam/threads=1']]) == len(hyps[labels['beam/alpha=0']]) == 10
  assert rows['ct2_greedy/quantization=int8/threads=1']['options']['quantization'] == 'int8'
  assert all(r['speed']['batch1']['latency_ms_median'] > 0 for r in report['rows'])
  for spec, message in (('ct2_greedy/quantization=fp4', 'quantization=fp4'), ('ct2_greedy/beam_size=2', 'no option'),
                        ('ct2_beam/threads=-1', r'threads=-1: ct2_beam needs 0 \(every core\) or a number of threads')):
    with pytest.raises(ConfigError, match=message):
      benchmark.benchmark([benchmark.parse_entry(f'{trained_run}:{spec}', 'float32')], batch_sizes=(1,),
                          log=lambda msg: None)
  with pytest.raises(ConfigError, match='loaded in float32'):
    benchmark.benchmark([benchmark.parse_entry(f'{trained_run}@bfloat16:ct2_greedy', 'float32')], batch_sizes=(1,),
                        max_sentences=2, log=lambda msg: None)


def test_pass_cost_times_each_precision_in_float32_greedy_steps(tmp_path):
  out = tmp_path / 'pass_cost.json'
  result = subprocess.run([sys.executable, '-m', 'benchmarks.components.pass_cost', '--sizes=128', '--positions=1,4',
                           '--dtypes=float32,int8', '--passes=1', f'--json={out}'], cwd=REPO, capture_output=True,
                          text=True, timeout=900)
  assert result.returncode == 0, result.stderr[-3000:]
  rows = {(r['dtype'], r['positions']): r for r in json.loads(out.read_text())['rows']}
  assert set(rows) == {('float32', 1), ('float32', 4), ('int8', 1), ('int8', 4)}
  assert rows['float32', 1]['greedy_steps'] == 1.0  # the unit: a float32 greedy step
  for r in rows.values():
    assert abs(r['greedy_steps'] - r['ms'] / rows['float32', 1]['ms']) < 1e-6


@pytest.mark.slow
def test_size_sweep_runs_every_row_in_each_precision(tmp_path):
  out = tmp_path / 'sweep.json'
  result = subprocess.run([sys.executable, '-m', 'benchmarks.systems.size_sweep', '--sizes=128', '--batch_sizes=1',
                           '--passes=1', '--noct2', '--rows=AT greedy,AT drafted (perfect free draft) block 4',
                           f'--json={out}'], cwd=REPO, capture_output=True, text=True, timeout=1800)
  assert result.returncode == 0, result.stderr[-3000:]
  rows = {r['row']: r for r in json.loads(out.read_text())['rows']}
  floor = 'floor: one read of the int8 weights a decoder step reads'
  assert set(rows) == {'AT greedy', 'AT greedy int8', 'AT drafted (perfect free draft) block 4',
                       'AT drafted (perfect free draft) block 4 int8', floor}
  assert rows[floor]['ms_per_step'] > 0 and rows[floor]['bytes'] > 0
  assert rows['AT greedy int8']['step_vs_floor'] == pytest.approx(rows['AT greedy int8']['ms_per_step']
                                                                 / rows[floor]['ms_per_step'])


@pytest.mark.slow
def test_vocab_cost_rows_are_ratios_of_their_own_times(tmp_path):
  out = tmp_path / 'vocab.json'
  result = subprocess.run([sys.executable, '-m', 'benchmarks.components.vocab_cost', '--size=128', '--vocabs=500,2000',
                           '--batch_sizes=1', '--upsample=2', '--source_width=8', '--out_len=4', '--passes=1',
                           f'--json={out}'], cwd=REPO, capture_output=True, text=True, timeout=900)
  assert result.returncode == 0, result.stderr[-3000:]
  rows = {(r['vocab'], r['row']): r for r in json.loads(out.read_text())['rows']}
  assert set(rows) == {(v, label) for v in (500, 2000) for label in ('DAT dag_lookahead', 'DAT projection',
                                                                     'AT greedy')}
  for (vocab, label), r in rows.items():  # one pass: each ratio is the quotient of the two times
    assert r['cost_vs_first_vocab'] == pytest.approx(r['ms'] / rows[500, label]['ms'], rel=1e-6)
    if label == 'DAT dag_lookahead':
      assert r['speed_vs_at_greedy'] == pytest.approx(rows[vocab, 'AT greedy']['ms'] / r['ms'], rel=1e-6)
      assert r['projection_share'] == pytest.approx(rows[vocab, 'DAT projection']['ms'] / r['ms'], rel=1e-6)
