"""Joint sentencepiece vocabulary: trained once on the training split, stored with the run."""

import io
import os
import re
from typing import Iterable, Sequence

import numpy as np
import sentencepiece as spm

from nat_jax.core.tokens import BOS_ID, EOS_ID, MASK_ID, PAD_ID, UNK_ID
from nat_jax.errors import DataError, log
from nat_jax.files import write_atomic

MASK_PIECE = '<mask>'
TOKENIZER_FILE = 'spm.model'  # a run's tokenizer, in its workdir
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


class Tokenizer:
  """Sentencepiece model with fixed special ids: pad 0, eos 1, bos 2, unk 3, mask 4."""

  pad_id, eos_id, bos_id, unk_id, mask_id = PAD_ID, EOS_ID, BOS_ID, UNK_ID, MASK_ID

  def __init__(self, model_path: str):
    self.model_path = model_path
    self._sp = spm.SentencePieceProcessor(model_file=model_path)
    found = (self._sp.pad_id(), self._sp.eos_id(), self._sp.bos_id(), self._sp.unk_id(),
             self._sp.piece_to_id(MASK_PIECE))
    if found != (PAD_ID, EOS_ID, BOS_ID, UNK_ID, MASK_ID):
      raise DataError(f'Sentencepiece model {model_path!r} has special ids (pad, eos, bos, unk, '
                       f'mask)={found}, expected (0, 1, 2, 3, 4); delete it to retrain.')
    self.vocab_size: int = self._sp.get_piece_size()
    self._skip = np.zeros(self.vocab_size, bool)
    self._skip[[PAD_ID, BOS_ID, MASK_ID]] = True

  def encode(self, text: str) -> list[int]:
    """Token ids of `text`, without EOS."""
    return self._sp.encode(text)

  def decode(self, ids: Sequence[int]) -> str:
    """Text of `ids` up to the first EOS, ignoring pad/bos/mask, as one line (`one_line`)."""
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    eos = np.flatnonzero(ids == EOS_ID)
    ids = ids[:eos[0]] if eos.size else ids
    ids = ids[(ids >= 0) & (ids < self.vocab_size)]
    return one_line(self._sp.decode(ids[~self._skip[ids]].tolist()))

  def word_ids(self) -> dict[str, int]:
    """{piece: id} of the vocabulary, with the n-gram LM names of the specials: <s> = BOS, </s> = EOS,
    <unk> = UNK (nat_jax.decode.ngram_lm's words)."""
    ids = {self._sp.id_to_piece(i): i for i in range(self.vocab_size)}
    ids.update({'<s>': BOS_ID, '</s>': EOS_ID, '<unk>': UNK_ID})
    return ids

  def same_vocabulary(self, other: 'Tokenizer') -> bool:
    """Whether `other` is the same sentencepiece model (same pieces, same ids)."""
    return self._sp.serialized_model_proto() == other._sp.serialized_model_proto()

  def decode_batch(self, ids_2d) -> list[str]:
    """`decode` of every row of an int array [batch, length]."""
    return [self.decode(row) for row in ids_2d]


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
