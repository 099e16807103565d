"""The public Python API: a trained run loaded once, translating lists of sentences.

    from nat_jax import Translator

    translator = Translator('runs/at_bible_tiny', decoder='beam', beam_size=5)  # default: greedy
    print(translator.translate(['In the beginning God created the heavens and the earth.']))
    for t in translator.translate_with_stats(['And God said, Let there be light.']):
      print(t.text, t.stats)  # per-sentence decoder statistics, e.g. {'steps': 9, 'score': -4.2}

A sentence's translation never depends on what else is translated with it: decoders that bound each
row by its own source width (greedy, Jacobi, the DAG decoders: decode.cuts_rows) take batches of
mixed widths, the others batches of one padded width; at most `batch_size` rows, a partial batch with
the smallest power of two that holds it. A Translator compiles each (decoder, rows, source width) shape
once, on first use, and is
thread-safe: calls from several threads are decoded one after another, never interleaved, so a
caller that wants requests decoded together batches them itself (as `nat_jax.serve` does). Other
decoders of the same run are built on demand (`translate(texts, decoder='greedy')`) and kept.
"""
from __future__ import annotations

import dataclasses
import os
import threading
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

import jax
import numpy as np

from nat_jax import decode
from nat_jax.data.batching import power_of_two_rows
from nat_jax.data.sources import languages
from nat_jax.errors import ConfigError, log
from nat_jax.run import compiled
from nat_jax.run.resources import Resources
from nat_jax.run.translation import on_run_devices, source_lengths, translate_texts
from nat_jax.run.workdir import Run, load_run
from nat_jax.settings import BATCH_RULE
from nat_jax.views import LeftToRightScorer


@dataclasses.dataclass(frozen=True)
class Translation:
  """One sentence's translation and what its decoder reports about it (steps, passes, score, ...)."""
  text: str
  stats: dict[str, float]


def check_batch_size(batch_size):
  if not (isinstance(batch_size, int) and BATCH_RULE.holds(batch_size)):
    raise ConfigError(f'batch_size must be {BATCH_RULE.says("an integer")}, got {batch_size!r}.')


def clean_text(text: str) -> str:
  """A text as the tokenizer takes it: lone surrogates (an invalid \\u escape, a broken UTF-16 pair) replaced
  by '?'."""
  return text.encode('utf-8', errors='replace').decode('utf-8')


def checked_texts(texts) -> list[str]:
  """`texts` (any iterable of strings, not one string) as a list, cleaned; ConfigError naming what is wrong."""
  if isinstance(texts, str):
    raise ConfigError('translate takes a list of sentences, got one string; wrap it: translate([text]).')
  if isinstance(texts, (bytes, Mapping)) or not isinstance(texts, Iterable):
    raise ConfigError(f'translate takes a list of sentences (strings), got {type(texts).__name__}.')
  texts = list(texts)
  bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
  if bad is not None:
    raise ConfigError(f'translate takes a list of strings; item {bad} is {type(texts[bad]).__name__}.')
  return [clean_text(t) for t in texts]


def check_decoder_name(name) -> str:
  if not isinstance(name, str):
    raise ConfigError(f'decoder must be a decoder name (a string), got {type(name).__name__}.')
  return name


def default_decoder(run: Run) -> str:
  """The run's config.default_decoder where it names one (a converted OPUS-MT run: what its generation
  settings say), else greedy where the run's method has a left-to-right view, else the decoder its recipe
  tests with."""
  if run.config.default_decoder:
    return run.config.default_decoder
  return 'greedy' if LeftToRightScorer in run.method.views() else run.config.test_decoder


class Translator:
  """A trained run loaded once, translating lists of sentences with any decoder its method runs.

  A sentence's translation never depends on what else is translated with it. Each (decoder, rows, source width)
  shape compiles once, on first use; calls from several threads are decoded one after another.

  Args:
    workdir: a run written by `python -m nat_jax.train` (or `nat_jax.convert`).
    decoder: the default decoder; None: greedy where the run's method decodes left to right, else the decoder its
      recipe tests with (a converted OPUS-MT run: its generation settings' decoder).
    batch_size: the most sentences decoded in one batch (fewer sentences use fewer rows).
    average: how many of the newest checkpoints' parameters to average.
    checkpoint: 'latest' (the newest checkpoints) or 'best' (the best by validation BLEU).
    dtype: the activations' precision: 'float32', 'bfloat16' or 'float16' (parameters cast once at load).
    quantization: how the weight matrices are held: 'none', or 'int8' (quantized once at load).
    int8_kernel: the int8 product: 'auto', 'onednn' or 'xla' (`precision` says which runs).
    **decoder_options: the default decoder's options, as `--decoder.<option>=<value>` takes them (strings,
      numbers or booleans), typed once into `self.options`.

  Raises:
    ConfigError: a bad argument, decoder or option; CheckpointError: no trained run in `workdir`.

  Example::

    from nat_jax import Translator

    translator = Translator('runs/at_bible_tiny', decoder='beam', beam_size=5)
    translator.translate(['In the beginning God created the heavens and the earth.'])
  """

  def __init__(self, workdir: str, decoder: Optional[str] = None, *, batch_size: int = 64, average: int = 1,
               checkpoint: str = 'latest', dtype: str = 'float32', quantization: str = 'none',
               int8_kernel: str = 'auto', **decoder_options):
    if not (isinstance(average, int) and average > 0):
      raise ConfigError(f'average must be a positive integer, got {average!r}.')
    if checkpoint not in ('latest', 'best'):
      raise ConfigError(f"checkpoint must be 'latest' or 'best', got {checkpoint!r}.")
    check_batch_size(batch_size)
    if not isinstance(workdir, (str, os.PathLike)):
      raise ConfigError(f'workdir must be the path of a trained run (a string), got {type(workdir).__name__}.')
    self._attach(load_run(workdir, checkpoint, average, dtype, quantization, int8_kernel), workdir, decoder,
                 batch_size, decoder_options)

  @classmethod
  def from_run(cls, run: Run, decoder: Optional[str] = None, *, batch_size: int = 64, workdir: str = '',
               **decoder_options) -> 'Translator':
    """A Translator over an already loaded run."""
    check_batch_size(batch_size)
    self = cls.__new__(cls)
    self._attach(run, workdir, decoder, batch_size, decoder_options)
    return self

  def _attach(self, run: Run, workdir: str, decoder: Optional[str], batch_size: int, decoder_options: dict):
    """What both constructors set: the run, the decoder cache, the default decoder (checked now: bad
    options fail at load)."""
    self.run, self.workdir, self.batch_size = run, workdir, batch_size
    self._lock = threading.Lock()  # one decode at a time
    self._build_lock = threading.Lock()  # the decoder cache (never held while decoding)
    self._decoders: dict[tuple[str, decode.Options], Callable] = {}
    self.decoder = check_decoder_name(decoder or default_decoder(run))
    self.options = decode.run_options(run.method, self.decoder, decoder_options)
    self.decoder_for()  # checked and built now: bad options fail at load

  @property
  def precision(self) -> str:
    """What the run decodes in: its dtype, and for int8 the product ('int8 (onednn kernel)', 'int8 (xla dot)')."""
    model = self.run.config.model
    if model.quantization == 'none':
      return model.dtype
    product = model.get('int8_kernel', 'xla')
    return f'{model.quantization} ({product} {"kernel" if product == "onednn" else "dot"})'

  @property
  def languages(self) -> tuple[str, str]:
    """(source, target) language codes of the run's data."""
    return languages(self.run.config.data)

  def resolve(self, name: Optional[str] = None,
              options: Union[None, decode.Options, Mapping[str, Any]] = None) -> tuple[str, decode.Options]:
    """(decoder, typed options) that `decoder_for` builds: typed `options` (a decoder's Options dataclass) as
    given; option values (strings, numbers or booleans, as `--decoder.<opt>=<v>` takes them) laid over this
    translator's options (no name, or its decoder's) or the run's defaults of decoder `name`."""
    name = self.decoder if name is None else check_decoder_name(name)
    if isinstance(options, decode.Options):
      return name, options
    if options is not None and not isinstance(options, Mapping):
      raise ConfigError(f'options must be a mapping of decoder options (e.g. {{"beam_size": 4}}), got '
                        f'{type(options).__name__}.')
    if name == self.decoder:
      return name, decode.parse_options(name, options or {}, self.options)
    return name, decode.run_options(self.run.method, name, options)

  def decoder_for(self, name: Optional[str] = None,
                  options: Union[None, decode.Options, Mapping[str, Any]] = None) -> tuple[Callable, decode.Options]:
    """(decode fn, typed options) of decoder `name` with `options` (as `resolve` reads them), built once per
    decoder and options and kept; ConfigError for an unknown decoder, option or value, or a decoder the run's
    method cannot run."""
    key = self.resolve(name, options)
    with self._build_lock:
      if key not in self._decoders:
        self._decoders[key] = decode.build_decoder(self.run.method, *key, Resources(self.run.tokenizer))[0]
      return self._decoders[key], key[1]

  def mixes_widths(self, name: Optional[str], options: decode.Options) -> bool:
    """Whether this decoder's batches mix source widths (its rows bounded by their own: decode.cuts_rows)."""
    return decode.cuts_rows(self.run.method, self.decoder if name is None else name, options)

  def translate_with_stats(self, texts: Sequence[str], decoder: Optional[str] = None,
                           options: Union[None, decode.Options, Mapping[str, Any]] = None,
                           batch_size: Optional[int] = None, first_line: int = 1) -> list[Translation]:
    """Each text's translation with its decoder statistics, in order.

    Args:
      texts: a list (any iterable) of sentences; an empty or blank one translates to ''; an over-long one is
        truncated with a warning.
      decoder: a decoder other than the default (built on first use and kept); None: the default.
      options: that decoder's options (a mapping as `--decoder.<option>` takes them, or its Options dataclass).
      batch_size: the most sentences per batch for this call; None: the Translator's.
      first_line: the number of the first text in warnings (a file's line number).

    Returns:
      A Translation per text: its `text` and `stats` (the decoder's per-sentence statistics, e.g. steps).
    """
    texts = checked_texts(texts)
    if batch_size is not None:
      check_batch_size(batch_size)  # 0 or a negative count would otherwise decode nothing and say nothing
    fn, parsed = self.decoder_for(decoder, options)
    mix = self.mixes_widths(decoder, parsed)
    with self._lock:
      outputs, aux = translate_texts(self.run, texts, fn, batch_size or self.batch_size, first_line, shrink=True,
                                     mix_widths=mix)
    return [Translation(text, {k: np.asarray(v[i]).item() for k, v in aux.items()})
            for i, text in enumerate(outputs)]

  def warm_up(self, widths: str = 'narrow', decoder: Optional[str] = None,
              options: Union[None, decode.Options, Mapping[str, Any]] = None) -> int:
    """Compile the decoder for every row count translate uses (1, 2, 4, ... batch_size) at the narrowest
    source width ('narrow') or at every width the run takes ('all'), by decoding rows of padding;
    returns how many shapes it ran. It stops early, with a warning, where the process's memory maps reach
    half the kernel's limit (nat_jax.run.compiled): the rest compile when first used."""
    if widths not in ('narrow', 'all'):
      raise ConfigError(f"warm_up widths must be 'narrow' or 'all', got {widths!r}.")
    fn, parsed = self.decoder_for(decoder, options)
    counts = sorted({power_of_two_rows(n, self.batch_size) for n in range(1, self.batch_size + 1)})
    lengths = source_lengths(self.run.config.max_len, self.mixes_widths(decoder, parsed))
    shapes = [(rows, width) for width in (lengths if widths == 'all' else lengths[:1]) for rows in counts]
    with self._lock:
      for done, (rows, width) in enumerate(shapes):  # rows of padding, as every partial batch has
        if not compiled.room_to_warm_up():
          count, limit = compiled.memory_maps()
          log.warning('warm-up stopped after %d of %d shapes: this process holds %d memory maps of the kernel '
                      'limit vm.max_map_count=%d (each compiled program takes some). The rest compile when first '
                      'used; to warm up more, raise the limit (sysctl -w vm.max_map_count=262144).',
                      done, len(shapes), count, limit)
          return done
        jax.block_until_ready(fn(self.run.params, on_run_devices(np.zeros((rows, width), np.int32), self.run)))
    return len(shapes)

  def translate(self, texts: Sequence[str], decoder: Optional[str] = None,
                options: Union[None, decode.Options, Mapping[str, Any]] = None, batch_size: Optional[int] = None,
                first_line: int = 1) -> list[str]:
    """Each text's translation, in order: `translate_with_stats`'s texts (the same arguments).

    Example::

      translator.translate(['And God said.', ''], decoder='greedy')  # ['Und Gott sprach.', '']
    """
    return [t.text for t in self.translate_with_stats(texts, decoder, options, batch_size, first_line)]
