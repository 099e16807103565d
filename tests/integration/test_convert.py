"""`python -m nat_jax.convert`: random Marian models built and saved by the reference implementation
(transformers' FlaxMarianMTModel, no torch) translate after conversion exactly as the reference does:
logits, greedy and beam 4 (generate called one sentence at a time: its batch stops together), token for
token and as text; special tokens are not at the start of the vocabulary; a multi-target model takes its
>>xx<< tag; a DA-Transformer student distills from a converted teacher with its tokenizer."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sentencepiece as spm

from nat_jax import decode
from nat_jax.core.tokens import EOS_ID, WIDTH_STEP
from nat_jax.errors import ConfigError
from nat_jax.formats.marian import read_snapshot, write_run
from nat_jax.run.translator import Translator
from nat_jax.run.workdir import load_run, read_run_config
from tests.support import REPO, tiny_config

transformers = pytest.importorskip('transformers', reason='the reference needs transformers 4.57 (marian-reference)')
MAX_LENGTH = 20  # generate's default max_length: the decoder start, at most 18 words, EOS


def sentences(corpus, split='test', n=6) -> list[str]:
  with open(corpus[split], encoding='utf-8') as f:
    return [line.split('\t')[0] for line in f.read().splitlines()[:n]] + ['Und Gott sprach.']  # ('' translates to '')


def references(corpus, split='test', n=6) -> list[str]:
  with open(corpus[split], encoding='utf-8') as f:
    return [line.split('\t')[1] for line in f.read().splitlines()[:n]]


def piece_model(texts, size: int) -> bytes:
  out = io.BytesIO()
  spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=out, vocab_size=size, model_type='unigram',
                                 minloglevel=2, hard_vocab_limit=False)
  return out.getvalue()


def snapshot(folder, corpus, *, tags=(), d_model=32, heads=4, layers=(2, 2), activation='swish', scale=True,
             eos_bias=0.0, seed=0):
  """A random Marian model saved as the Hub holds one: the vocabulary of two sentencepiece models with eos
  and unk in its middle and pad (the decoder start) last, as opus-mt's; `tags` (multi-target) first."""
  with open(corpus['train'], encoding='utf-8') as f:
    rows = [line.split('\t') for line in f.read().splitlines()]
  os.makedirs(folder, exist_ok=True)
  for name, texts in (('source.spm', [r[0] for r in rows]), ('target.spm', [r[1] for r in rows])):
    with open(os.path.join(folder, name), 'wb') as f:
      f.write(piece_model(texts, 120))
  pieces = set()
  for name in ('source.spm', 'target.spm'):
    sp = spm.SentencePieceProcessor(model_file=os.path.join(folder, name))
    pieces |= {sp.id_to_piece(i) for i in range(sp.get_piece_size())} - {'<unk>', '<s>', '</s>'}
  pieces = sorted(pieces)
  order = [f'>>{t}<<' for t in tags] + pieces[:30] + ['</s>'] + pieces[30:70] + ['<unk>'] + pieces[70:] + ['<pad>']
  vocab = {p: i for i, p in enumerate(order)}
  with open(os.path.join(folder, 'vocab.json'), 'w', encoding='utf-8') as f:
    json.dump(vocab, f, ensure_ascii=False)
  pad, eos = vocab['<pad>'], vocab['</s>']
  config = transformers.MarianConfig(
      vocab_size=len(vocab), d_model=d_model, encoder_layers=layers[0], decoder_layers=layers[1],
      encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=2 * d_model,
      decoder_ffn_dim=2 * d_model, activation_function=activation, scale_embedding=scale, pad_token_id=pad,
      decoder_start_token_id=pad, eos_token_id=eos, forced_eos_token_id=eos, max_position_embeddings=128,
      max_length=MAX_LENGTH, num_beams=4, bad_words_ids=[[pad]])
  model = transformers.FlaxMarianMTModel(config, seed=seed)
  params = jax_tree_copy(model.params)
  rng = np.random.default_rng(seed)
  shared = params['model']['shared']
  shared['embedding'] = rng.normal(0, 0.3, shared['embedding'].shape).astype(np.float32)
  for layer in params['model']['decoder']['layers'].values():  # non-zero biases and LayerNorms: every term counts
    layer['fc1']['bias'] = rng.normal(0, 0.5, layer['fc1']['bias'].shape).astype(np.float32)
    layer['final_layer_norm']['scale'] = rng.uniform(0.5, 1.5, layer['final_layer_norm']['scale'].shape).astype(
        np.float32)
  bias = rng.normal(0, 0.3, (1, len(vocab))).astype(np.float32)
  bias[0, eos] += eos_bias
  params['final_logits_bias'] = bias
  model.params = params
  model.save_pretrained(folder)
  return model, vocab


def jax_tree_copy(tree):
  return {k: jax_tree_copy(v) if isinstance(v, dict) else np.array(v) for k, v in tree.items()}


def reference_tokenizer(folder):
  return transformers.MarianTokenizer(os.path.join(folder, 'source.spm'), os.path.join(folder, 'target.spm'),
                                      os.path.join(folder, 'vocab.json'))


def convert(folder, workdir, target_language=''):
  write_run(workdir, *read_snapshot(folder, target_language), folder=folder)
  return workdir


@pytest.fixture(scope='module')
def converted(corpus, tmp_path_factory):
  """(reference model, its vocab, snapshot folder, converted workdir)."""
  folder = str(tmp_path_factory.mktemp('opus_mt'))
  model, vocab = snapshot(folder, corpus, eos_bias=1.5)
  return model, vocab, folder, convert(folder, str(tmp_path_factory.mktemp('converted')))


def reference_outputs(model, tok, texts, beams: int, prefix=''):
  """generate's (token ids after the start token through EOS, text) for each text, one at a time."""
  out = []
  for text in texts:
    batch = tok([prefix + text], return_tensors='np')
    # max_length from the model's generation config (Flax's generate adds one to a max_length argument); the pad
    # suppressed, as the converted run never writes it (Flax's greedy ignores bad_words_ids, torch's applies it)
    seq = np.asarray(model.generate(batch.input_ids, attention_mask=batch.attention_mask, num_beams=beams,
                                    suppress_tokens=[model.config.pad_token_id]).sequences[0])
    ids = list(seq[1:])
    ids = ids[:ids.index(model.config.eos_token_id) + 1] if model.config.eos_token_id in ids else ids
    out.append((ids, tok.decode(seq, skip_special_tokens=True)))
  return out


def ours_as_reference_ids(tokens, run, vocab) -> list[int]:
  """Our output tokens through EOS, as the reference's ids (through the pieces)."""
  return [vocab[run.tokenizer.pieces[i]] for i in through_eos(np.asarray(tokens)[None])[0]]


def test_logits_equal_the_reference_on_a_padded_batch(converted, corpus):
  model, vocab, _, workdir = converted
  run = load_run(workdir)
  texts = sentences(corpus)[:4]
  tok = reference_tokenizer(converted[2])
  batch = tok(texts, return_tensors='np', padding=True)
  targets = tok(text_target=[t[:30] for t in texts], return_tensors='np', padding=True).input_ids
  start = np.full((len(texts), 1), model.config.decoder_start_token_id)
  dec_in = np.concatenate([start, targets[:, :-1]], axis=1)
  want = np.asarray(model(batch.input_ids, attention_mask=batch.attention_mask, decoder_input_ids=dec_in,
                          decoder_attention_mask=np.ones_like(dec_in)).logits)  # [B, T, V_ref]
  ours_of = {i: run.tokenizer.word_ids()[p] for p, i in vocab.items()}
  src = np.array([[ours_of[i] if i != model.config.pad_token_id else 0 for i in row] for row in batch.input_ids])
  assert [list(r[r > 0]) for r in src] == [run.tokenizer.encode(t) + [EOS_ID] for t in texts]
  tokens = np.array([[2] + [ours_of[i] for i in row[1:]] for row in dec_in])
  t = tokens.shape[1]
  got = run.method.model.apply({'params': run.params}, jnp.asarray(src), jnp.asarray(tokens),
                               jnp.broadcast_to(jnp.arange(t), tokens.shape),
                               jnp.broadcast_to(jnp.tril(jnp.ones((t, t), bool)), (len(texts), t, t)))
  got = np.asarray(got)
  for piece, i in vocab.items():
    if i != model.config.pad_token_id:
      np.testing.assert_allclose(got[..., run.tokenizer.word_ids()[piece]], want[..., i], atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize('beams', [pytest.param(1, marks=pytest.mark.slow), 4])  # slow: CI time; greedy's text
# equals generate's in the multi-target test too
def test_greedy_and_beam_translate_as_generate(converted, corpus, beams):
  """The run's defaults are generate's (beam 4, length ** 1.0, its stopping rule, max_length 20): our
  greedy and our default decoder give generate's tokens and text. (These random models end either at once
  or at the bound; the bound, where generate forces EOS, is the case tested here.)"""
  model, vocab, folder, workdir = converted
  texts = sentences(corpus)
  want = reference_outputs(model, reference_tokenizer(folder), texts, beams)
  translator = Translator(workdir, 'greedy' if beams == 1 else None, batch_size=4)
  assert translator.decoder == ('greedy' if beams == 1 else 'generate_beam')
  got_text = translator.translate(texts)
  assert got_text == [w[1] for w in want]
  decode_fn, _ = translator.decoder_for()
  for text, (ids, _) in zip(texts, want):
    if text:
      src = translator.run.tokenizer.encode(text) + [EOS_ID]
      src = np.pad(src, (0, -len(src) % WIDTH_STEP))[None]  # [1, S]
      tokens = np.asarray(decode_fn(translator.run.params, jnp.asarray(src, jnp.int32)).tokens[0])
      ours = ours_as_reference_ids(tokens, translator.run, vocab)
      # generate's last token at the bound is its forced EOS, which a greedy row at our bound does not write
      assert ours == ids or (len(ids) == MAX_LENGTH - 1 and ours == ids[:-1]), (text, ours, ids)
  assert all(len(w[0]) == MAX_LENGTH - 1 for w in want)  # every sentence reaches the bound: generate's forced EOS


def test_a_converted_config_of_beam_style_generate_reads_as_generate_beam(converted, tmp_path):
  """A converted run's config.json written when generate's search was `beam` with style=generate reads as
  the one convert writes now (default and test decoder generate_beam, the same option defaults)."""
  path = os.path.join(converted[3], 'config.json')
  with open(path, encoding='utf-8') as f:
    now = json.load(f)
  old = dict(now, default_decoder='beam', test_decoder='beam',
             decoder_defaults={'beam': dict(now['decoder_defaults']['generate_beam'], style='generate')})
  (tmp_path / 'config.json').write_text(json.dumps(old))
  assert read_run_config(str(tmp_path / 'config.json')).to_dict() == read_run_config(path).to_dict()
  assert now['default_decoder'] == 'generate_beam'


def test_a_multi_target_model_takes_its_language_tag(corpus, tmp_path):
  folder = str(tmp_path / 'multi')
  model, vocab = snapshot(folder, corpus, tags=('de', 'fr'), d_model=24, heads=3, layers=(1, 2), activation='gelu',
                          scale=False, eos_bias=2.5, seed=1)
  with pytest.raises(ConfigError, match=r"set --target_language to one of \['de', 'fr'\]"):
    read_snapshot(folder)
  workdir = convert(folder, str(tmp_path / 'run'), 'fr')
  texts = sentences(corpus)
  run = load_run(workdir)
  assert run.tokenizer.encode(texts[0])[0] == run.tokenizer.word_ids()['>>fr<<']
  want = reference_outputs(model, reference_tokenizer(folder), texts, 1, prefix='>>fr<< ')
  assert Translator(workdir, 'greedy').translate(texts) == [w[1] for w in want]
  check_ct2_export(workdir, texts, references(corpus), str(tmp_path / 'ct2'))  # erf-gelu, unscaled, the tag


def through_eos(tokens) -> list[list[int]]:
  """Each row's ids through its first EOS (all of its non-pad ids where it has none)."""
  rows = []
  for row in np.asarray(tokens).tolist():
    rows.append(row[:row.index(EOS_ID) + 1] if EOS_ID in row else [i for i in row if i])
  return rows


def our_log_probs(run, src, target) -> np.ndarray:
  """f32[T + 1]: our model's log-probabilities of `target` (ids) then EOS, given one source row src i32[S]."""
  tokens = jnp.asarray([[2] + target], jnp.int32)  # [1, T + 1]: BOS (Marian's decoder start) first
  t = tokens.shape[1]
  logits = run.method.model.apply({'params': run.params}, jnp.asarray(src)[None], tokens, jnp.arange(t)[None],
                                  jnp.tril(jnp.ones((t, t), bool))[None])[0]  # [T + 1, V]
  log_probs = np.asarray(jax.nn.log_softmax(logits, axis=-1))
  return log_probs[np.arange(t), target + [EOS_ID]]


def check_ct2_export(workdir, texts, references, out_dir):
  """The CTranslate2 export of a converted run scores reference targets with our model's log-probabilities
  (every term of the model counts) and decodes a padded batch greedily as our greedy does."""
  pytest.importorskip('ctranslate2', reason='the export needs ctranslate2 (the ct2 extra)')
  from nat_jax.formats.ct2 import Ct2Translator, export_ctranslate2
  translator = Translator(workdir, 'greedy')
  run = translator.run
  export_ctranslate2(run, out_dir, source=workdir)
  ct2 = Ct2Translator(out_dir)
  rows = [run.tokenizer.encode(t) + [EOS_ID] for t in texts if t]
  targets = [run.tokenizer.encode_target(r)[:20] for r in references]  # one per source (the first ones)
  scored = ct2.translator.score_batch([[run.tokenizer.pieces[i] for i in row[:-1]] for row in rows[:len(targets)]],
                                      [[run.tokenizer.pieces[i] for i in t] for t in targets])
  for row, target, result in zip(rows, targets, scored):
    np.testing.assert_allclose(result.log_probs, our_log_probs(run, row, target), atol=2e-4, rtol=1e-4)
  width = -(-max(map(len, rows)) // WIDTH_STEP) * WIDTH_STEP
  src = np.array([r + [0] * (width - len(r)) for r in rows], np.int32)  # [B, S]
  decode_fn, _ = translator.decoder_for()
  assert through_eos(ct2(src)) == through_eos(decode_fn(run.params, jnp.asarray(src)).tokens)


@pytest.mark.slow  # CI time: the multi-target test checks the export of its (erf-gelu, unscaled) model
def test_the_ctranslate2_export_decodes_as_our_greedy(converted, corpus, tmp_path):
  """swish, scaled embeddings, attention and output biases, Marian's sinusoids, post-norm."""
  check_ct2_export(converted[3], sentences(corpus), references(corpus), str(tmp_path / 'ct2'))


def test_conversion_refusals_are_one_error_line(converted, tmp_path):
  _, _, folder, workdir = converted
  broken = tmp_path / 'broken'
  broken.mkdir()
  for name in ('config.json', 'source.spm', 'target.spm', 'flax_model.msgpack'):
    (broken / name).write_bytes(open(os.path.join(folder, name), 'rb').read())
  bart = tmp_path / 'bart'
  bart.mkdir()
  (bart / 'config.json').write_text(json.dumps({'model_type': 'bart'}))
  cases = [(str(broken), str(tmp_path / 'a'), 'has no vocab.json'),
           (str(bart), str(tmp_path / 'b'), "model_type is 'bart'"),
           (folder, workdir, 'is not empty'),
           (str(tmp_path / 'missing'), str(tmp_path / 'c'), 'no such folder')]
  for source, out, message in cases:
    result = subprocess.run([sys.executable, '-m', 'nat_jax.convert', f'--from={source}', f'--workdir={out}'],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    errors = [line for line in result.stderr.splitlines() if line.startswith('error:')]
    assert result.returncode != 0 and len(errors) == 1 and message in errors[0], result.stderr[-1500:]
    assert 'Traceback' not in result.stderr
  assert not os.path.exists(tmp_path / 'a') or not os.listdir(tmp_path / 'a')


def test_a_dat_student_distills_from_a_converted_teacher(converted, corpus, compile_cache, tmp_path):
  """distill -> a DA-Transformer student with the teacher's tokenizer -> dag_lookahead, end to end."""
  from nat_jax.training.distill import distill
  from nat_jax.training.loop import train_and_evaluate
  _, _, _, workdir = converted
  teacher = load_run(workdir)
  teacher.config.data.update(source='files', train_files=corpus['train'], validation_files=corpus['validation'],
                             test_files=corpus['test'], max_examples=40)
  out = str(tmp_path / 'distilled')
  distill(teacher, 'greedy', decode.run_options(teacher.method, 'greedy'), out, ['train', 'validation'], limit=40,
          batch_size=8, teacher_workdir=workdir)
  student = str(tmp_path / 'student')
  config = tiny_config(corpus, compile_cache, **{'model.method': 'dat', 'total_steps': 4, 'eval_every': 4,
                                                 'checkpoint_every': 4, 'test_decoder': 'dag_lookahead',
                                                 'eval_decoder': 'dag_lookahead',
                                                 'data.distill_dir': out, 'data.max_examples': 40,
                                                 'tokenizer_from': workdir})
  train_and_evaluate(config, student)
  run = load_run(student)
  assert run.tokenizer.same_vocabulary(teacher.tokenizer) and run.tokenizer.vocab_size == teacher.tokenizer.vocab_size
  texts = sentences(corpus)[:3]
  translations = Translator(student, 'dag_lookahead').translate(texts)
  assert len(translations) == 3 and all(isinstance(t, str) for t in translations)
