"""Decoders: method-agnostic functions over the views a method offers (nat_jax.views).

  registry.py    `--decoder=<name> [--decoder.<opt>=<v>]` -> jitted (params, src) -> DecodeOutput
  lengths.py     a decoder's max_len option against its view's bound, in steps (the bound itself and
                 where a sequence ends, first EOS: nat_jax.core.tokens)
  greedy.py, beam.py, jacobi.py    left-to-right decoders (LeftToRightScorer; greedy and Jacobi take
                                   z tokens per step)
  drafted.py                       drafted (speculative) decoding: another run drafts, the
                                   LeftToRightScorer verifies a window per pass
  multiword_beam.py                beam search over steps of z tokens (IBDecoder / SA / IMDecoder)
  dag.py                           DA-Transformer decoders (GraphPredictor)
  dag_beam.py                      DA-Transformer beam search over the marginal of every path
  mask_predict.py                  Mask-Predict (MaskPredictor: CMLM)
  hrt.py                           Skip-AT then one Skip-CMLM fill (HybridScorer: HRT)

A new decoder is a function `fn(view, src, **options) -> DecodeOutput` registered with
`@register_decoder('name', <Protocol>, **typed option defaults)`; it then runs on every method
whose `views()` offers that Protocol.
"""
from nat_jax.views import (DecodeOutput, Graph, GraphPredictor, HybridScorer, LeftToRightScorer, MaskPredictor,
                           RunResources, WindowDrafter)
from nat_jax.decode.registry import (DECODERS, Decoder, build_decoder, check_decoder, cuts_rows, decode_program,
                                     decoders_for, describe_options, make_decode_fn, method_view, parse_options,
                                     register_decoder)

from nat_jax.decode import beam, dag, dag_beam, greedy, hrt, jacobi, mask_predict, multiword_beam  # noqa: E402,F401  (register decoders)
from nat_jax.decode import drafted  # noqa: E402,F401  (registered last: it builds on greedy and jacobi)
