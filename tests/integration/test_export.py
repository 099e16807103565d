"""nat_jax.export: a trained AT exported to CTranslate2 translates exactly as our own decoders do.

The independent truth is our JAX decoders on the same parameters: CTranslate2 runs its own C++
Transformer, search loops, vocabulary and source handling, so its greedy tokens must equal our
`greedy`'s and its beam-4 tokens (length_penalty=0) our `beam`'s with alpha=0, token for token, on
real sentences (some longer than the model maximum, so truncation is covered), for the tiny trained
run (via the command line) and for random pre-norm and post-norm models whose EOS logit is raised so
that outputs end at many different lengths. The one documented difference (a beam search that
reaches the length bound: CTranslate2 ranks unfinished hypotheses with finished ones, ours prefers a
finished one) is checked to be exactly that, with CTranslate2's own scores. int8 is only checked to
run and give well-formed outputs. Error cases go through the command line (exit 2, one line).
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import sentencepiece as spm

ctranslate2 = pytest.importorskip('ctranslate2')

from nat_jax import decode  # noqa: E402
from nat_jax.core.tokens import EOS_ID, decode_length_bound  # noqa: E402
from nat_jax.data import inference_batches  # noqa: E402
from nat_jax.errors import ConfigError  # noqa: E402
from nat_jax.formats import ct2  # noqa: E402
from nat_jax.run.translation import encode_sources, source_lengths, translate_texts  # noqa: E402
from nat_jax.run.workdir import Run, load_run  # noqa: E402
from tests.support import REPO, random_model, tiny_config  # noqa: E402

ROWS = 16


def export_command(*flags):
  return subprocess.run([sys.executable, '-m', 'nat_jax.export', *flags], cwd=REPO, capture_output=True, text=True,
                        timeout=600)


@pytest.fixture(scope='module')
def exported(trained_run, tmp_path_factory) -> str:
  """The trained tiny run exported by the command line (float32)."""
  out = str(tmp_path_factory.mktemp('export') / 'ct2')
  result = export_command(f'--workdir={trained_run}', '--format=ctranslate2', f'--out={out}')
  assert result.returncode == 0, result.stderr[-3000:]
  return out


def sentences(corpus, count: int = 32) -> list[str]:
  texts = []
  for split in ('test', 'validation', 'train'):
    with open(corpus[split], encoding='utf-8') as f:
      texts += [line.split('\t')[0] for line in f.read().splitlines()]
  long = [t for t in texts if len(t) > 100][:4]  # over max_len = 48 tokens: truncated on both sides
  return long + texts[:count - len(long)]


def batches(run, texts):
  seqs = encode_sources(texts, run.tokenizer, run.config.max_len, warn=False)
  return list(inference_batches(seqs, ROWS, source_lengths(run.config.max_len)))


def ours_and_theirs(run, model_dir, texts, name, options, beam_size):
  """Per sentence (ours i32[T], CTranslate2's i32[T], the source row)."""
  decode_fn, _ = decode.build_decoder(run.method, name, options)
  translator = ct2.Ct2Translator(model_dir, beam_size=beam_size, intra_threads=1)
  pairs = []
  for index, src in batches(run, texts):
    ours, theirs = np.asarray(decode_fn(run.params, src).tokens), translator(src)
    assert ours.shape == theirs.shape
    pairs += [(ours[r], theirs[r], src[r]) for r, j in enumerate(index) if j >= 0]
  return pairs


def text_ids(row) -> list[int]:
  """The tokens of an output row before its EOS (all of them where the bound was reached)."""
  row = list(row)
  return row[:row.index(EOS_ID)] if EOS_ID in row else row


def logp_of(translator, pieces, src_row, hyp_row) -> float:
  """CTranslate2's own summed log-probability of the output row hyp_row (EOS included when it has one)."""
  ids = text_ids(hyp_row)
  source = [pieces[i] for i in src_row[src_row > 0][:-1]]
  scored = translator.score_batch([source], [[pieces[i] for i in ids]])[0].log_probs  # the last one scores EOS
  return float(np.sum(scored if EOS_ID in list(hyp_row) else scored[:-1]))


def check_beam(pairs, model_dir):
  """Equal, or the documented difference at the length bound: CTranslate2's hypothesis is unfinished
  (no EOS, the bound reached), ours finished, and CTranslate2's scores its own higher. Returns the equal count."""
  translator = ctranslate2.Translator(model_dir, intra_threads=1)
  with open(os.path.join(model_dir, 'shared_vocabulary.json'), encoding='utf-8') as f:
    pieces = json.load(f)
  equal = 0
  for ours, theirs, src in pairs:
    if np.array_equal(ours, theirs):
      equal += 1
      continue
    assert EOS_ID not in list(theirs) and EOS_ID in list(ours), (ours, theirs)
    assert logp_of(translator, pieces, src, theirs) > logp_of(translator, pieces, src, ours), (ours, theirs)
  return equal


def test_export_command_writes_what_ctranslate2_loads(trained_run, exported):
  run = load_run(trained_run)
  assert sorted(os.listdir(exported)) == ['config.json', 'model.bin', ct2.METADATA_FILE, 'shared_vocabulary.json',
                                          'spm.model']
  with open(os.path.join(exported, 'spm.model'), 'rb') as a, open(run.tokenizer.model_path, 'rb') as b:
    assert a.read() == b.read()
  with open(os.path.join(exported, 'shared_vocabulary.json'), encoding='utf-8') as f:
    pieces = json.load(f)
  sp = spm.SentencePieceProcessor(model_file=os.path.join(exported, 'spm.model'))
  assert pieces == [sp.id_to_piece(i) for i in range(run.tokenizer.vocab_size)]  # ids one to one
  assert pieces[:5] == ['<pad>', '</s>', '<s>', '<unk>', '<mask>']
  with open(os.path.join(exported, 'config.json')) as f:
    config = json.load(f)
  assert (config['eos_token'], config['decoder_start_token'], config['add_source_eos']) == ('</s>', '<s>', True)
  assert abs(config['layer_norm_epsilon'] - 1e-6) < 1e-12
  assert not [p for p in os.listdir(os.path.dirname(exported)) if '.tmp' in p]  # no temporary directory left
  ctranslate2.Translator(exported)


def test_greedy_and_beam_equal_ours_on_the_trained_run(trained_run, exported, corpus):
  run = load_run(trained_run)
  texts = sentences(corpus)
  greedy = ours_and_theirs(run, exported, texts, 'greedy', {}, 1)
  assert all(np.array_equal(ours, theirs) for ours, theirs, _ in greedy), 'greedy differs'
  beam = ours_and_theirs(run, exported, texts, 'beam', {'beam_size': '4', 'alpha': '0'}, 4)
  equal = check_beam(beam, exported)
  print(f'trained run: greedy {len(greedy)}/{len(greedy)}, beam {equal}/{len(beam)} equal')
  assert equal >= len(beam) // 2
  # The library's drop-in decode_fn through translate_texts gives our greedy translations as text.
  decode_fn, _ = decode.build_decoder(run.method, 'greedy', {})
  ours, _ = translate_texts(run, texts + ['', '  '], decode_fn, ROWS)
  theirs, aux = translate_texts(run, texts + ['', '  '], ct2.ct2_decode_fn(exported, intra_threads=1), ROWS)
  assert theirs == ours and theirs[-2:] == ['', ''] and aux['steps'].shape == (len(texts) + 2,)
  # Plain CTranslate2 use as the module docstring describes it: the exported spm.model's pieces without EOS,
  # max_input_length=max_len (CTranslate2 appends EOS and truncates), one bound for all (our greedy's max_len).
  sp = spm.SentencePieceProcessor(model_file=os.path.join(exported, 'spm.model'))
  bound = decode_length_bound(run.config.max_decode_len, run.config.max_len)
  results = ctranslate2.Translator(exported, intra_threads=1).translate_batch(
      [sp.encode(t, out_type=str) for t in texts], beam_size=1, max_input_length=run.config.max_len,
      max_decoding_length=bound, min_decoding_length=0)
  plain = [run.tokenizer.decode([sp.piece_to_id(p) for p in r.hypotheses[0]]) for r in results]
  fixed_bound, _ = decode.build_decoder(run.method, 'greedy', {'max_len': str(bound)})
  assert plain == translate_texts(run, texts, fixed_bound, ROWS)[0]


@pytest.mark.parametrize('pre_norm', [pytest.param(True, marks=pytest.mark.slow), False])  # slow: CI time
def test_greedy_and_beam_equal_ours_where_outputs_end_early(trained_run, corpus, tmp_path, pre_norm):
  """A random two-layer model (pre- or post-norm) whose last norm's bias raises the EOS logit: outputs of
  many lengths, so EOS handling, the decoder cache and positions are all compared."""
  base = load_run(trained_run)
  overrides = {'model.pre_norm': pre_norm, 'model.enc_layers': 2, 'model.dec_layers': 2}
  method, params = random_model(corpus, base.tokenizer.vocab_size, seed=1, logit_scale=2.0, **overrides)
  eos = np.asarray(params['embed']['embedding'][EOS_ID])
  norm = params['decoder_norm'] if pre_norm else params['decoder_1']['norm_ffn']
  norm['bias'] = norm['bias'] + 10.0 * eos / (eos @ eos)
  run = Run(tiny_config(corpus, **{'model.dropout': 0.0, **overrides}), base.tokenizer, method, params, [])
  out = ct2.export_ctranslate2(run, str(tmp_path / 'ct2'))
  texts = sentences(corpus)
  greedy = ours_and_theirs(run, out, texts, 'greedy', {}, 1)
  lengths = {len(text_ids(ours)) if EOS_ID in list(ours) else -1 for ours, _, _ in greedy}
  assert len(lengths) >= 4, lengths  # outputs end at different lengths (-1: at the bound)
  assert all(np.array_equal(ours, theirs) for ours, theirs, _ in greedy), 'greedy differs'
  beam = ours_and_theirs(run, out, texts, 'beam', {'beam_size': '4', 'alpha': '0'}, 4)
  equal = check_beam(beam, out)
  print(f'random model (pre_norm={pre_norm}): greedy {len(greedy)}/{len(greedy)}, beam {equal}/{len(beam)} equal, '
        f'greedy lengths {sorted(lengths)}')
  assert equal >= len(beam) // 2


def test_int8_export_runs_and_gives_well_formed_outputs(trained_run, corpus, tmp_path):
  run = load_run(trained_run)
  out = ct2.export_ctranslate2(run, str(tmp_path / 'int8'), 'int8', source=trained_run)
  with open(os.path.join(out, ct2.METADATA_FILE)) as f:
    assert json.load(f)['quantization'] == 'int8'
  texts = sentences(corpus, 24)
  decode_fn, _ = decode.build_decoder(run.method, 'greedy', {})
  translator = ct2.Ct2Translator(out, intra_threads=1)
  same = total = 0
  for index, src in batches(run, texts):
    theirs = translator(src)
    bound = decode_length_bound(run.config.max_decode_len, src.shape[1])
    assert theirs.dtype == np.int32 and theirs.shape == (src.shape[0], bound)
    assert np.all((theirs >= 0) & (theirs < run.tokenizer.vocab_size))
    for r, j in enumerate(index):
      row = list(theirs[r])
      if j < 0:
        assert not any(row)  # batch padding rows are not decoded
        continue
      end = row.index(EOS_ID) + 1 if EOS_ID in row else len(row)
      assert all(t > 0 for t in row[:end]) and not any(row[end:]), row  # text, EOS, then 0
    ours = np.asarray(decode_fn(run.params, src).tokens)
    same += sum(np.array_equal(ours[r], theirs[r]) for r, j in enumerate(index) if j >= 0)
    total += int(np.sum(index >= 0))
  print(f'int8 greedy agrees with our float32 greedy on {same}/{total} sentences')


def test_methods_other_than_at_name_what_does_not_map(corpus):
  expected = {'dat': 'graph', 'cmlm': 'length head', 'hrt': 'relative position', 'ibdecoder': 'interleaved',
              'selfdraft': 'init_from'}
  for method, what in expected.items():
    with pytest.raises(ConfigError, match=f"model.method='{method}'.*{what}"):
      ct2.check_exportable(tiny_config(corpus, **{'model.method': method}))
  with pytest.raises(ConfigError, match='relative_window=4'):
    ct2.check_exportable(tiny_config(corpus, **{'model.relative_window': 4}))
  ct2.check_exportable(tiny_config(corpus))


def test_without_ctranslate2_the_error_says_how_to_install(monkeypatch):
  monkeypatch.setitem(sys.modules, 'ctranslate2', None)  # `import ctranslate2` raises ImportError
  with pytest.raises(ConfigError, match=r'pip install -e \.\[ct2\]'):
    ct2.require_ctranslate2()


def test_command_line_errors_are_one_line_and_write_nothing(trained_run, tmp_path):
  hrt_run = tmp_path / 'hrt_run'
  hrt_run.mkdir()
  with open(os.path.join(trained_run, 'config.json')) as f:
    config = json.load(f)
  config['model']['method'] = 'hrt'
  (hrt_run / 'config.json').write_text(json.dumps(config))
  busy = tmp_path / 'busy'
  busy.mkdir()
  (busy / 'keep.txt').write_text('mine')
  cases = {
      'hrt': ([f'--workdir={hrt_run}', f'--out={tmp_path / "a"}'], "model.method='hrt'"),
      'missing workdir': ([f'--workdir={tmp_path / "nope"}', f'--out={tmp_path / "b"}'], 'no such directory'),
      'unknown format': ([f'--workdir={trained_run}', '--format=onnx', f'--out={tmp_path / "c"}'], 'ctranslate2'),
      'non-empty out': ([f'--workdir={trained_run}', f'--out={busy}'], 'not empty'),
  }
  for name, (flags, message) in cases.items():
    result = export_command(*flags)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and lines[-1].startswith('error: ') and message in lines[-1], (name, result.stderr)
  assert sorted(os.listdir(tmp_path)) == ['busy', 'hrt_run'] and os.listdir(busy) == ['keep.txt']
