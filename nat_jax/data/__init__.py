"""Data: corpora (Bible TFDS builder, text files, TFDS), sentencepiece, token-budget batches."""

from nat_jax.data.batching import bucket_shapes
from nat_jax.data.batching import encode_pairs
from nat_jax.data.batching import inference_batches
from nat_jax.data.batching import packed_shape
from nat_jax.data.batching import PackedTrainBatches
from nat_jax.data.batching import TrainBatches
from nat_jax.data.bible import BibleTranslate
from nat_jax.data.bible import RESERVED_BOOKS
from nat_jax.data.bible import SPLIT_BOOKS
from nat_jax.data.sources import DataError
from nat_jax.data.sources import DataNotFoundError
from nat_jax.data.sources import Example
from nat_jax.data.sources import load_split
from nat_jax.data.sources import LOADERS
from nat_jax.data.tokenizer import load_or_train_tokenizer
from nat_jax.data.tokenizer import Tokenizer
