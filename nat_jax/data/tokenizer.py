"""Tokenizers of a run, stored in its workdir: a joint sentencepiece model trained once on the training
split (`spm.model`, every run trained here), or a converted teacher's source and target sentencepiece
models whose pieces map through one vocabulary (`vocabulary.json`, `source.spm`, `target.spm`: an OPUS-MT
model, python -m nat_jax.convert). Both give the same special ids and the same methods."""

import filecmp
import functools
import io
import json
import os
import re
from typing import Iterable, Optional, Sequence

import numpy as np
import sentencepiece as spm

from nat_jax.core.tokens import BOS_ID, EOS_ID, MASK_ID, PAD_ID, UNK_ID
from nat_jax.errors import DataError, log
from nat_jax.files import write_atomic

MASK_PIECE = '<mask>'
TOKENIZER_FILE = 'spm.model'  # a run's tokenizer, in its workdir
# A converted run's tokenizer instead: the vocabulary (pieces in id order, the language tag to prepend)
# and the two segmenters it names.
VOCABULARY_FILE, SOURCE_MODEL, TARGET_MODEL = 'vocabulary.json', 'source.spm', 'target.spm'
TOKENIZER_FILES = (TOKENIZER_FILE, VOCABULARY_FILE, SOURCE_MODEL, TARGET_MODEL)
MAX_TRAINING_SENTENCES = 200_000
# Characters that must not reach a line of output: C0 and C1 controls (tab, CR, NUL, U+001C-U+001E,
# NEL U+0085, ...), DEL, and the line / paragraph separators U+2028 / U+2029. Readers that split on
# Unicode line boundaries (str.splitlines) would see extra lines. Byte-fallback pieces can decode to
# any of them.
UNSAFE_IN_LINE = re.compile('[\x00-\x1f\x7f-\x9f\u2028\u2029]+')
# Invisible characters that change how a line reads without showing themselves: the bidirectional
# embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069: "Trojan Source" text that
# displays in another order than it is stored), the byte-order mark U+FEFF inside a line, and the
# noncharacters U+FDD0-U+FDEF, U+FFFE, U+FFFF. They are removed. Joiners and marks that scripts need
# (ZWJ U+200D in emoji and Indic text, ZWNJ U+200C in Persian, LRM/RLM U+200E/U+200F in RTL text)
# are kept.
INVISIBLE = re.compile('[\u202a-\u202e\u2066-\u2069\ufeff\ufdd0-\ufdef\ufffe\uffff]+')


def one_line(text: str) -> str:
  """`text` with every run of UNSAFE_IN_LINE characters replaced by one space (stripped at the ends)
  and INVISIBLE characters removed: always exactly one line for any reader, shown as it is stored."""
  if INVISIBLE.search(text):
    text = INVISIBLE.sub('', text)
  return UNSAFE_IN_LINE.sub(' ', text).strip() if UNSAFE_IN_LINE.search(text) else text


LM_SPECIALS = {'<s>': BOS_ID, '</s>': EOS_ID, '<unk>': UNK_ID}  # the n-gram LM's names of our specials


def text_ids(ids: Sequence[int], skip: np.ndarray) -> list[int]:
  """The ids of `ids` up to the first EOS that are in the vocabulary (skip bool[V]: its size) and not skipped."""
  ids = np.asarray(ids, dtype=np.int64).reshape(-1)
  eos = np.flatnonzero(ids == EOS_ID)
  ids = ids[:eos[0]] if eos.size else ids
  ids = ids[(ids >= 0) & (ids < skip.size)]
  return ids[~skip[ids]].tolist()


class Tokenizer:
  """Sentencepiece model with fixed special ids: pad 0, eos 1, bos 2, unk 3, mask 4."""

  pad_id, eos_id, bos_id, unk_id, mask_id = PAD_ID, EOS_ID, BOS_ID, UNK_ID, MASK_ID

  def __init__(self, model_path: str):
    self.model_path = model_path
    try:
      self._sp = spm.SentencePieceProcessor(model_file=model_path)
    except (OSError, RuntimeError) as e:  # sentencepiece: 'could not parse ModelProto' (truncated, garbage)
      raise DataError(f'{model_path} is not a readable sentencepiece model ({str(e).splitlines()[0][:120]}): the '
                      "run's tokenizer is damaged; restore it from a copy of the run (a training not yet started: "
                      'delete it to train a new one).') from None
    found = (self._sp.pad_id(), self._sp.eos_id(), self._sp.bos_id(), self._sp.unk_id(),
             self._sp.piece_to_id(MASK_PIECE))
    if found != (PAD_ID, EOS_ID, BOS_ID, UNK_ID, MASK_ID):
      raise DataError(f'Sentencepiece model {model_path!r} has special ids (pad, eos, bos, unk, '
                       f'mask)={found}, expected (0, 1, 2, 3, 4); delete it to retrain.')
    self.vocab_size: int = self._sp.get_piece_size()
    self.files: tuple[str, ...] = (model_path,)  # what holds the tokenizer (an export copies them)
    self._skip = np.zeros(self.vocab_size, bool)
    self._skip[[PAD_ID, BOS_ID, MASK_ID]] = True

  @functools.cached_property
  def pieces(self) -> list[str]:
    """id -> piece (built on first use: loading a run does not need it)."""
    return [self._sp.id_to_piece(i) for i in range(self.vocab_size)]

  def encode(self, text: str) -> list[int]:
    """Token ids of `text`, without EOS."""
    return self._sp.encode(text)

  def encode_target(self, text: str) -> list[int]:
    """Token ids of a target-side `text` (a training reference), without EOS: `encode` (one joint model)."""
    return self._sp.encode(text)

  def decode(self, ids: Sequence[int]) -> str:
    """Text of `ids` up to the first EOS, ignoring pad/bos/mask, as one line (`one_line`)."""
    return one_line(self._sp.decode(text_ids(ids, self._skip)))

  def word_ids(self) -> dict[str, int]:
    """{piece: id} of the vocabulary, with the n-gram LM names of the specials: <s> = BOS, </s> = EOS,
    <unk> = UNK (nat_jax.decode.ngram_lm's words)."""
    return {**{piece: i for i, piece in enumerate(self.pieces)}, **LM_SPECIALS}

  def same_vocabulary(self, other: 'Tokenizer') -> bool:
    """Whether `other` is the same sentencepiece model (same pieces, same ids)."""
    return isinstance(other, Tokenizer) and self._sp.serialized_model_proto() == other._sp.serialized_model_proto()

  def decode_batch(self, ids_2d) -> list[str]:
    """`decode` of every row of an int array [batch, length]."""
    return [self.decode(row) for row in ids_2d]


class PieceTokenizer:
  """A converted teacher's tokenizer: source text split by one sentencepiece model, target text by
  another, their pieces mapped to ids through one vocabulary (`vocabulary.json`: {"pieces": [...] in id
  order, with the special ids of `Tokenizer` at 0-4, "prefix": a piece put before every source, e.g. a
  multi-target model's ">>de<<", or ""}). Pieces outside the vocabulary are UNK, as in Marian."""

  pad_id, eos_id, bos_id, unk_id, mask_id = PAD_ID, EOS_ID, BOS_ID, UNK_ID, MASK_ID

  def __init__(self, workdir: str):
    self.model_path = os.path.join(workdir, VOCABULARY_FILE)
    self.files: tuple[str, ...] = tuple(os.path.join(workdir, name)
                                        for name in (VOCABULARY_FILE, SOURCE_MODEL, TARGET_MODEL))
    try:
      with open(self.model_path, encoding='utf-8') as f:
        spec = json.load(f)
      self.pieces: list[str] = list(spec['pieces'])  # id -> piece
      prefix = spec.get('prefix', '')
      self._source = spm.SentencePieceProcessor(model_file=os.path.join(workdir, SOURCE_MODEL))
      self._target = spm.SentencePieceProcessor(model_file=os.path.join(workdir, TARGET_MODEL))
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as e:
      raise DataError(f'the tokenizer of {workdir} ({VOCABULARY_FILE}, {SOURCE_MODEL}, {TARGET_MODEL}) is missing or '
                      f'damaged ({type(e).__name__}: {str(e).splitlines()[0][:120]}); convert the model again '
                      '(python -m nat_jax.convert).') from None
    self.vocab_size: int = len(self.pieces)
    self._ids = {piece: i for i, piece in enumerate(self.pieces)}
    if len(self._ids) != self.vocab_size or self.vocab_size <= MASK_ID:
      raise DataError(f'{self.model_path} repeats a piece or lacks the special ids 0-{MASK_ID}; convert the model '
                      'again.')
    self._prefix = [self._ids[prefix]] if prefix else []
    self._skip = np.zeros(self.vocab_size, bool)
    self._skip[[PAD_ID, BOS_ID, UNK_ID, MASK_ID]] = True

  def ids_of(self, pieces: Iterable[str]) -> list[int]:
    return [self._ids.get(p, UNK_ID) for p in pieces]

  def encode(self, text: str) -> list[int]:
    """Token ids of a source `text` (the language tag first, where the run has one), without EOS."""
    return self._prefix + self.ids_of(self._source.encode(text, out_type=str))

  def encode_target(self, text: str) -> list[int]:
    """Token ids of a target-side `text`, without EOS."""
    return self.ids_of(self._target.encode(text, out_type=str))

  def decode(self, ids: Sequence[int]) -> str:
    """Text of `ids` up to the first EOS, without pad, bos, unk and mask (Marian's decode with
    skip_special_tokens), as one line (`one_line`)."""
    text = self._target.decode_pieces([self.pieces[i] for i in text_ids(ids, self._skip)])
    return one_line(text.replace('\u2581', ' ').strip())

  def decode_batch(self, ids_2d) -> list[str]:
    return [self.decode(row) for row in ids_2d]

  def word_ids(self) -> dict[str, int]:
    """{piece: id}, with the n-gram LM names of the specials (as `Tokenizer.word_ids`)."""
    return {**self._ids, **LM_SPECIALS}

  def same_vocabulary(self, other) -> bool:
    return (isinstance(other, PieceTokenizer) and self.pieces == other.pieces and self._prefix == other._prefix
            and self._source.serialized_model_proto() == other._source.serialized_model_proto()
            and self._target.serialized_model_proto() == other._target.serialized_model_proto())


def write_piece_tokenizer(workdir: str, pieces: Sequence[str], prefix: str, source_model: str, target_model: str):
  """Writes a PieceTokenizer into `workdir`: the vocabulary and copies of the two sentencepiece models."""
  for path, name in ((source_model, SOURCE_MODEL), (target_model, TARGET_MODEL)):
    with open(path, 'rb') as f:
      write_atomic(os.path.join(workdir, name), f.read())
  write_atomic(os.path.join(workdir, VOCABULARY_FILE),
               json.dumps({'pieces': list(pieces), 'prefix': prefix}, ensure_ascii=False).encode('utf-8'))


def tokenizer_path(workdir: str) -> str:
  """The file that says which tokenizer the run in `workdir` has: its converted vocabulary where it has one,
  else its joint sentencepiece model (which may not exist yet)."""
  vocabulary = os.path.join(workdir, VOCABULARY_FILE)
  return vocabulary if os.path.exists(vocabulary) else os.path.join(workdir, TOKENIZER_FILE)


def open_tokenizer(workdir: str, texts: Iterable[str] = (), vocab_size: int = 0):
  """The tokenizer of the run in `workdir` (`tokenizer_path`'s; a joint sentencepiece model is trained on
  `texts` first when missing: `load_or_train_tokenizer`)."""
  path = tokenizer_path(workdir)
  if path.endswith(VOCABULARY_FILE):
    return PieceTokenizer(workdir)
  return load_or_train_tokenizer(path, texts, vocab_size)


def has_tokenizer(workdir: str) -> bool:
  return os.path.exists(tokenizer_path(workdir))


def copy_tokenizer(src_workdir: str, dst_workdir: str) -> Optional[str]:
  """Copies the tokenizer files of `src_workdir` into `dst_workdir` (those it lacks); returns the name of the
  first file that both hold and that differs, or None."""
  for name in TOKENIZER_FILES:
    src, dst = os.path.join(src_workdir, name), os.path.join(dst_workdir, name)
    if not os.path.exists(src):
      continue
    if not os.path.exists(dst):
      os.makedirs(dst_workdir, exist_ok=True)
      with open(src, 'rb') as f:
        write_atomic(dst, f.read())
    elif not filecmp.cmp(src, dst, shallow=False):
      return name
  return None


def train_model(texts: Iterable[str], vocab_size: int) -> bytes:
  """Serialized unigram model trained on `texts`; raises RuntimeError if `vocab_size` is too big."""
  model = io.BytesIO()
  spm.SentencePieceTrainer.train(
      sentence_iterator=iter(texts), model_writer=model, vocab_size=vocab_size,
      model_type='unigram', character_coverage=1.0, byte_fallback=True,
      pad_id=PAD_ID, eos_id=EOS_ID, bos_id=BOS_ID, unk_id=UNK_ID, control_symbols=[MASK_PIECE],
      input_sentence_size=MAX_TRAINING_SENTENCES, shuffle_input_sentence=True,
      max_sentence_length=1 << 16, minloglevel=2)
  return model.getvalue()


def load_or_train_tokenizer(model_path: str, texts: Iterable[str], vocab_size: int) -> Tokenizer:
  """Loads `model_path`, or trains a joint model on `texts` and writes it there atomically.

  If the text supports fewer than `vocab_size` pieces, trains with the largest size it supports.
  """
  if not os.path.exists(model_path):
    texts = [t for t in texts if t.strip()]
    if not texts:
      raise DataError(f'No text to train the sentencepiece model {model_path!r} on.')
    log.info('Training a %d-piece sentencepiece model on %d sentences -> %s', vocab_size, len(texts), model_path)
    try:
      model = train_model(texts, vocab_size)
    except RuntimeError as e:
      limit = re.search(r'Vocabulary size too high \(\d+\)\. Please set it to a value <= (\d+)',
                        str(e))
      if not limit:
        raise DataError(f'Sentencepiece training for {model_path!r} failed: {e}') from e
      log.warning('vocabulary size %d is too large for this text; using %s.', vocab_size, limit[1])
      model = train_model(texts, int(limit[1]))
    os.makedirs(os.path.dirname(os.path.abspath(model_path)), exist_ok=True)
    write_atomic(model_path, model)
  return Tokenizer(model_path)
