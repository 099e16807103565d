"""Decoders: method-agnostic functions over the views a method offers (nat_jax.views).

  registry.py    `--decoder=<name> [--decoder.<opt>=<v>]` -> jitted (params, src) -> DecodeOutput
  lengths.py     a decoder's max_len option against its view's bound, in steps (the bound itself and
                 where a sequence ends, first EOS: nat_jax.core.tokens)
  greedy.py, beam.py, jacobi.py    left-to-right decoders (LeftToRightScorer; greedy and Jacobi take
                                   z tokens per step)
  generate_beam.py                 beam search as Hugging Face's generate searches (converted runs)
  drafted.py                       drafted (speculative) decoding: another run drafts, the
                                   LeftToRightScorer verifies a window per pass
  multiword_beam.py                beam search over steps of z tokens (IBDecoder / SA / IMDecoder)
  dag.py                           DA-Transformer decoders (GraphPredictor)
  dag_beam.py                      DA-Transformer beam search over the marginal of every path
  mask_predict.py                  Mask-Predict (MaskPredictor: CMLM)
  hrt.py                           Skip-AT then one Skip-CMLM fill (HybridScorer: HRT)

  options.py                       each decoder's options: a frozen dataclass, its fields' rules and help

A new decoder is one module here: a function `fn(view, src, **options) -> DecodeOutput` registered
with `@register_decoder('name', <Protocol>, <its Options dataclass>)` where it is defined. Every module
of this package is imported (so registered) with it, and so is every module another installed package
names under the entry-point group `nat_jax.decoders`; a decoder then runs on every method whose
`views()` offers its Protocol, in every command, the server and the `Translator`.
"""
import importlib
import importlib.metadata
import pkgutil

from nat_jax.decode.options import Options
from nat_jax.decode.registry import (DECODERS, Decoder, build_decoder, check_decoder, cuts_rows, decode_program,
                                     decoders_for, describe_options, jit_decoding, make_decode_fn, method_view,
                                     parse_options, register_decoder, run_options)
from nat_jax.errors import log
from nat_jax.views import (DecodeOutput, Graph, GraphPredictor, HybridScorer, LeftToRightScorer, MaskPredictor,
                           RunResources, WindowDrafter)

PLUGIN_GROUP = 'nat_jax.decoders'  # entry points of other packages: modules that register decoders


def import_decoders():
  """Import (so register) every module of this package, then every decoder module other packages name
  under PLUGIN_GROUP; one that fails to import is a warning naming it, not a failed command."""
  for module in pkgutil.iter_modules(__path__):
    importlib.import_module(f'{__name__}.{module.name}')
  for entry in importlib.metadata.entry_points(group=PLUGIN_GROUP):
    try:
      entry.load()
    except Exception as e:  # noqa: BLE001 - another package's bug must not stop ours
      log.warning('decoder plugin %s (%s) failed to import: %s: %s', entry.name, entry.value, type(e).__name__, e)


import_decoders()
