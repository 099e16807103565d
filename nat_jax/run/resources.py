"""What decoders need from outside a model, loaded and checked here, in the run layer: another run to
draft with (drafted's `drafter`) and n-gram models (dag_beam's `lm`). A decoder's `prepare` receives a
`Resources` (the nat_jax.views.RunResources Protocol) and never reads a file or loads a run itself."""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable

from nat_jax.data.tokenizer import has_tokenizer, open_tokenizer
from nat_jax.decode import arpa
from nat_jax.errors import CheckpointError, ConfigError
from nat_jax.run.workdir import CONFIG_FILE, load_run


@dataclasses.dataclass
class Resources:
  """The decoding run's tokenizer (None: none, e.g. compiling a recipe ahead of time) and how runs load
  (`load(workdir)`: nat_jax.run.workdir.load_run; nat_jax.aot hands in one that builds abstract
  parameters from a recipe)."""
  tokenizer: Any = None
  load: Callable[[str], Any] = load_run

  def drafter_run(self, workdir: str):
    """The run in `workdir`, refused (before its parameters load) when its tokenizer is not the decoding
    run's: drafts are token ids."""
    if has_tokenizer(workdir):
      if self.tokenizer is None:
        raise ConfigError('drafted needs the verifier run\'s tokenizer to check the drafter\'s '
                          '(Resources(tokenizer=run.tokenizer)).')
      if not self.tokenizer.same_vocabulary(open_tokenizer(workdir)):
        raise ConfigError(f'drafter {workdir} has another tokenizer than the verifier: drafts are token ids, so '
                          'both runs must share a tokenizer (train the drafter with init_from or tokenizer_from '
                          'naming the verifier).')
    if self.load is load_run and not os.path.isfile(os.path.join(workdir, CONFIG_FILE)):  # (aot loads recipes)
      raise CheckpointError(f'--decoder.drafter={workdir}: not a run to draft with (no {CONFIG_FILE} there); give '
                            "the workdir of a trained run that shares this run's tokenizer.")
    try:
      return self.load(workdir)
    except CheckpointError as e:
      raise CheckpointError(f'--decoder.drafter={workdir}: not a run to draft with: {e}') from None

  def ngram_model(self, path: str) -> arpa.Ngrams:
    """The model of ARPA file `path`; a missing or malformed file is a ConfigError naming --decoder.lm."""
    try:
      return arpa.read_arpa(path)
    except FileNotFoundError:
      raise ConfigError(f'--decoder.lm={path!r}: no such file; write one with '
                        '`python -m nat_jax.lm --workdir=<run>`.') from None
    except ValueError as e:
      raise ConfigError(f'--decoder.lm={path!r}: {e}') from None
