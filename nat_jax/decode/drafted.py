"""Drafted (speculative) decoding: a drafter proposes the whole output, the left-to-right verifier
checks a window of it per pass and keeps the longest prefix it agrees with, plus its own next token.

Exact mode (beta = 1) returns the verifier's greedy output token for token, whatever the draft: a
draft token is accepted only when it equals the verifier's argmax given a prefix that is already
final, so the accepted prefix is the one greedy would have written. A good draft only changes how
many passes it takes: a pass over a window of W slots finalises between z and W tokens (z =
tokens_per_step), so at most greedy's number of steps, and ceil(n / W) + 1 passes or fewer for a
perfect draft of n tokens.

Relaxed mode (SpecDec's rule, beta > 1): a drafted token is accepted while it is among the
verifier's top `beta` at its position and its log-probability is within `tau` of the top one (the
same as its logit within tau of the top logit); at the first failure the verifier's own top-1 token
is kept. The output then differs from greedy; beta = 1 is exact mode whatever tau is.

The loop (fixed shapes, nat_jax.decode.loop's: a growing cache, a batch that shrinks to its
live rows): every row has its own window start, its
number of final tokens `fixed`; a pass feeds each row's slots [fixed, fixed + W) to the scorer
(rows vmapped, so each writes its own cache slots; the cache of the final prefix is reused as it
is) and reads the predictions of output tokens fixed .. fixed + W - 1. With z tokens per step
(IBDecoder family) acceptance goes by whole steps of z tokens, as in Jacobi decoding.

After a rejection, the window's later tokens are either the verifier's own predictions there
(`update='jacobi'`: Jacobi's update, conditioned on the rejected draft) or the drafter's tokens
(`update='draft'`: the draft stays in place; good when the drafter substitutes a word but keeps
the alignment), or, with a draft head, the head's new drafts. `update='redraft'` makes a
DA-Transformer or CMLM drafter such a head: after every pass it drafts the next window again,
conditioned on the final prefix (nat_jax.decode.redraft: a prefix-constrained walk over the DAT
graph, no network pass; one CMLM fill pass with the prefix unmasked).

Self-drafting (nat_jax.methods.selfdraft): a small draft head trained on the frozen verifier reads
the verifier's final state at the last final token, which the pass just computed, and drafts the
next window; no second encoder and no drafter pass over the whole sentence. The first window is
drafted from the source alone.

The draft comes from another run (`--decoder.drafter=<workdir>[:<decoder>[/opt=value...]]`, its
output in text order, turned into the verifier's slot order by `scorer.write_in`; a self-drafting
run named without a decoder lends its head), from the verifier run's own head (a self-drafting
run, no drafter named), or from any function of the source or any WindowDrafter for tests.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import flax
import jax
import jax.numpy as jnp

from nat_jax.core.reduce import scored_argmax
from nat_jax.core.rows import row_slices, row_updates
from nat_jax.core.tokens import BOS_ID, through_first_eos
from nat_jax.decode.jacobi import final_eos, leading_run
from nat_jax.decode.lengths import decode_steps
from nat_jax.decode.loop import decode_loop
from nat_jax.decode.options import Bounded, Rule, choice, option, steps, weight
from nat_jax.decode.redraft import REDRAFTERS
from nat_jax.decode.registry import DECODERS, check_decoder, method_view, parse_options, register_decoder
from nat_jax.errors import ConfigError
from nat_jax.views import DecodeOutput, LeftToRightScorer, RunResources, WindowDrafter, one_token_per_step_message

UPDATES = ('jacobi', 'draft', 'redraft')  # what a window's tokens after a pass become (module docstring)


@flax.struct.dataclass
class DraftedState:
  tokens: jax.Array      # i32[B, z+P]: start slots, then the final output tokens, then the draft
  logp: jax.Array        # f32[B, z+P]: the verifier's log-probability of each final token
  fixed: jax.Array       # i32[B]: output tokens 0..fixed-1 are final (a multiple of z)
  done: jax.Array        # bool[B]: an EOS is final, or the length bound is reached
  iterations: jax.Array  # i32[B]: passes the row itself needed
  accepted: jax.Array    # i32[B]: draft tokens accepted (final tokens the verifier did not write itself)
  passes: jax.Array      # i32[]: passes the batch ran
  cache: Any
  head: Any = None       # the draft head's state (WindowDrafter.start), if a head drafts
  z: int = flax.struct.field(pytree_node=False, default=1)


def rows_step(scorer: LeftToRightScorer, enc, cache, tokens: jax.Array, starts: jax.Array, states: bool = False):
  """step_logits with a start per row: tokens i32[B, W] written to slots [starts[b], starts[b] + W)
  -> (logits f32[B, W, V], final decoder states [B, W, D] when `states` (the scorer's step_states)
  else None, cache). Batch 1 calls the scorer directly; more rows are vmapped, each row a batch of one."""
  def step(enc_, cache_, tokens_, start):
    if states:
      return scorer.step_states(enc_, cache_, tokens_, start)
    logits, new = scorer.step_logits(enc_, cache_, tokens_, start)
    return logits, None, new

  if tokens.shape[0] == 1:
    return step(enc, cache, tokens, starts[0])

  def one(enc_row, cache_row, tokens_row, start):
    add, drop = (lambda x: x[None]), (lambda x: x[0])
    out = step(jax.tree_util.tree_map(add, enc_row), jax.tree_util.tree_map(add, cache_row), tokens_row[None], start)
    return jax.tree_util.tree_map(drop, out)
  return jax.vmap(one)(enc, cache, tokens, starts)


def acceptable(logits: jax.Array, top: jax.Array, top_lp: jax.Array, draft: jax.Array, draft_lp: jax.Array,
               beta: int, tau: float) -> jax.Array:
  """ok bool[B, W]: whether each drafted token may be kept given the verifier's logits f32[B, W, V]
  there, their argmax `top`, its log-probability `top_lp` and the draft's `draft_lp` (f32[B, W]).
  beta = 1: it is the argmax (exact)."""
  if beta == 1:
    return draft == top
  draft_logit = jnp.take_along_axis(logits, draft[..., None], axis=-1)  # [B, W, 1]
  rank = jnp.sum(logits > draft_logit, axis=-1)  # [B, W]: tokens strictly more probable
  return (rank < beta) & (draft_lp >= top_lp - tau)


def verify_pass(scorer: LeftToRightScorer, enc, state: DraftedState, width: int, t_max: int, beta: int, tau: float,
                keep_draft: bool, head: Optional[WindowDrafter] = None) -> DraftedState:
  """One verifier pass over every row's window; the single implementation of a pass. With a draft
  `head`, the window after the new final prefix is re-drafted by the head from the verifier's
  states of this pass."""
  z, batch = state.z, state.tokens.shape[0]
  starts = state.fixed  # [B]: first fed slot = first non-final output token
  logits, hidden, cache = rows_step(scorer, enc, state.cache, row_slices(state.tokens, starts, width), starts,
                                    states=head is not None and head.reads_states)
  logits = logits.astype(jnp.float32)  # [B, W, V]
  draft = row_slices(state.tokens, starts + z, width)  # [B, W]: the draft of outputs fixed .. fixed+W-1
  top, top_lp, draft_lp = scored_argmax(logits, draft)  # [B, W]: the verifier's argmax there, log-probabilities
  ok = acceptable(logits, top, top_lp, draft, draft_lp, beta, tau)
  groups = leading_run(jnp.all(ok.reshape(batch, width // z, z), axis=2))  # [B]: whole steps accepted
  index = jnp.arange(width)[None]  # [1, W]
  took = index < z * groups[:, None]  # [B, W]: accepted draft tokens
  final = index < z * jnp.minimum(groups[:, None] + 1, width // z)  # + the verifier's own step after them
  later = draft if keep_draft else top
  new = jnp.where(took, draft, jnp.where(final, top, later))
  new_lp = jnp.where(took, draft_lp, top_lp)
  live = ~state.done
  new = jnp.where(live[:, None], new, draft)
  old_lp = row_slices(state.logp, starts + z, width)
  tokens = row_updates(state.tokens, new, starts + z)
  all_logp = row_updates(state.logp, jnp.where(live[:, None] & final, new_lp, old_lp), starts + z)
  gained = jnp.sum(final, axis=1).astype(jnp.int32)  # [B]
  fixed = jnp.where(live, starts + gained, state.fixed)
  accepted = state.accepted + jnp.where(live, z * groups, 0)
  done = state.done | final_eos(tokens[:, z:], fixed, t_max)
  head_state = state.head
  if head is not None:  # z = 1: window slot j predicted output token starts + j
    drafts, head_state = head.draft(head_state, hidden, starts, fixed, tokens[:, z:])
    redraft = row_updates(tokens, drafts[:, :width], fixed + z)  # outputs fixed .. (at most the window)
    tokens = jnp.where((live & ~done)[:, None], redraft, tokens)
  return state.replace(tokens=tokens, logp=all_logp, fixed=fixed, done=done,
                       iterations=state.iterations + live.astype(jnp.int32), accepted=accepted,
                       passes=state.passes + 1, cache=cache, head=head_state)


def init_state(scorer: LeftToRightScorer, enc, draft_slots: jax.Array, width: int, t_max: int) -> DraftedState:
  """Draft (slot order, i32[B, any]) fitted into P = t_max + width output slots after z start slots."""
  z = scorer.tokens_per_step
  batch = draft_slots.shape[0]
  size = t_max + width
  draft = jnp.zeros((batch, size), jnp.int32).at[:, :min(size, draft_slots.shape[1])].set(
      draft_slots[:, :size].astype(jnp.int32))
  tokens = jnp.concatenate([jnp.full((batch, z), BOS_ID, jnp.int32), draft], axis=1)  # [B, z+P]
  zeros = jnp.zeros((batch,), jnp.int32)
  return DraftedState(tokens=tokens, logp=jnp.zeros(tokens.shape, jnp.float32), fixed=zeros,
                      done=jnp.zeros((batch,), bool), iterations=zeros, accepted=zeros, passes=jnp.int32(0),
                      cache=scorer.init_cache(enc, size), z=z)


def drafted_search(scorer: LeftToRightScorer, enc, draft_slots: Optional[jax.Array], num_steps: int, block: int,
                   beta: int = 1, tau: float = 0.0, keep_draft: bool = False,
                   head: Optional[WindowDrafter] = None) -> DraftedState:
  """Verification of a slot-order draft in windows of `block` steps (block * z slots), as one
  while_loop, from an encoder state; at most `num_steps` steps of z tokens. With a draft `head`
  (z = 1) the draft comes from the head, first from the source alone, then after every pass."""
  z = scorer.tokens_per_step
  t_max, width = num_steps * z, block * z
  head_state = None
  if head is not None:
    if z != 1:
      raise ConfigError(one_token_per_step_message('drafted with a draft head', z))
    head_state = head.start(enc, t_max + width)
    draft_slots = head.first(head_state)
  state = init_state(scorer, enc, draft_slots, width, t_max).replace(head=head_state)
  # Rows that are done write where their window is clamped to: their cache is no longer read. A draft
  # head holds per-sentence arrays of its own (a re-drafter's graph), so with one the batch keeps its rows.
  return decode_loop(scorer, lambda s: ~jnp.all(s.done),
                     lambda e, s: verify_pass(scorer, e, s, width, t_max, beta, tau, keep_draft, head), enc, state,
                     t_max + width, width, lambda s: jnp.max(jnp.where(s.done, 0, s.fixed)) + width,
                     state.done.shape[0], live=(lambda s: ~s.done) if head is None else None)


def finish(scorer: LeftToRightScorer, state: DraftedState, t_max: int) -> DecodeOutput:
  """Greedy's output format with aux: iterations (the row's passes), passes (the batch's), steps
  (tokens incl. EOS), accepted (draft tokens kept)."""
  tokens, logp = state.tokens[:, state.z:state.z + t_max], state.logp[:, state.z:state.z + t_max]
  valid, steps = through_first_eos(tokens)
  aux = {'iterations': state.iterations, 'passes': jnp.full_like(steps, state.passes), 'steps': steps,
         'accepted': jnp.minimum(state.accepted, steps)}
  return DecodeOutput(scorer.read_out(jnp.where(valid, tokens, 0)), jnp.sum(jnp.where(valid, logp, 0.0), axis=1), aux)


def drafted_decode(scorer: LeftToRightScorer, src: jax.Array, draft: Optional[jax.Array] = None, *, block: int,
                   beta: int = 1, tau: float = 0.0, update: str = 'jacobi', max_len: int = 0,
                   head: Optional[WindowDrafter] = None) -> DecodeOutput:
  """src i32[B, S] and a draft of the output in text order i32[B, D] (EOS after the text, 0 after it),
  or a draft `head` on the verifier's states instead -> the verified output (greedy's format).
  block: steps per pass (window of block * z slots)."""
  if update not in UPDATES:
    raise ConfigError(f'drafted: update must be one of {UPDATES}, got {update!r}.')
  if (draft is None) == (head is None):
    raise ValueError('drafted_decode takes a draft or a draft head (exactly one).')
  if update == 'redraft' and head is None:
    raise ValueError('drafted: update=redraft re-drafts with a WindowDrafter (head=...), not a fixed draft.')
  num_steps = decode_steps(scorer, src, max_len)
  enc = scorer.encode(src)
  slots = None if draft is None else scorer.write_in(draft)
  final = drafted_search(scorer, enc, slots, num_steps, block, beta, tau, update == 'draft', head)
  return finish(scorer, final, num_steps * scorer.tokens_per_step)


# --- the registered decoder: a drafter run, checked and loaded once ------------------------------
def parse_drafter(spec: str) -> tuple[str, str, dict[str, str]]:
  """'runs/dat:dag_lookahead' -> ('runs/dat', 'dag_lookahead', {}); 'runs/cmlm:mask_predict:iterations=2'
  -> ('runs/cmlm', 'mask_predict', {'iterations': '2'}); 'runs/at' -> ('runs/at', '', {})."""
  workdir, *rest = spec.split(':')
  name, *opts = rest or ['']
  if not workdir or (rest and not name) or any('=' not in o for o in opts):
    raise ConfigError(f'--decoder.drafter={spec!r}: expected <workdir>[:<decoder>[:option=value...]]')
  return workdir, name, dict(o.split('=', 1) for o in opts)


def check_drafted(method, options: 'DraftedOptions'):
  if options.update == 'redraft' and not options.drafter:
    raise ConfigError('--decoder.update=redraft re-drafts with a drafter run: add --decoder.drafter=<workdir of a '
                      f'DA-Transformer or CMLM run> (decoder {[r.decoder for r in REDRAFTERS.values()]}).')
  if not options.drafter and WindowDrafter not in method.views():
    raise ConfigError('drafted needs a drafter: --decoder.drafter=<workdir of a trained run>[:<decoder>] (any run '
                      'with the same tokenizer; a non-autoregressive one drafts in one or a few passes; a '
                      'self-drafting run, configs/selfdraft_bible_tiny.py, drafts with its own head).')
  if options.drafter:
    parse_drafter(options.drafter)
  if options.update == 'redraft' and not method.feeds_draft_heads:
    raise ConfigError(f'--decoder.update=redraft needs a verifier that writes the output one token per step in '
                      f'text order (an AT run); method {method.name!r} does not: use update=jacobi or draft.')


def load_drafter(method, options, resources: Optional[RunResources], platform: str = 'cpu'):
  """The registry's prepare: (draft fn, drafter params, options of drafted_decode). The drafter run comes
  from the run layer (`resources.drafter_run(workdir)`, which refuses one with another tokenizer;
  nat_jax.aot's builds abstract parameters from a recipe); here its decoder and options are checked."""
  fn_options = {k: v for k, v in options.kwargs().items() if k != 'drafter'}
  if not options.drafter:  # a self-drafting run: its scorer carries its head
    return (lambda params, src: {}), None, fn_options
  workdir, name, overrides = parse_drafter(options.drafter)
  if resources is None:
    raise ConfigError('drafted needs the run layer to load the drafter run (build_decoder(..., '
                      'resources=nat_jax.run.resources.Resources(run.tokenizer))).')
  run = resources.drafter_run(workdir)
  if options.update == 'redraft':
    return redrafter(run, name, overrides, options.block), run.params, fn_options
  if not name and WindowDrafter in run.method.views():
    return head_drafter(method, run), run.params, fn_options
  name = name or run.config.test_decoder
  if name not in DECODERS or DECODERS[name].prepare is not None:
    raise ConfigError(f'drafter decoder {name!r}: a registered decoder that needs no other model '
                      f'(e.g. {[n for n, d in DECODERS.items() if d.prepare is None][:6]}).')
  drafter_options = parse_options(name, overrides)
  check_decoder(run.method, name, drafter_options)
  build, fn = method_view(run.method, DECODERS[name].needs, f'drafter decoder {name!r}'), DECODERS[name].fn

  def draft(params, src):
    return {'draft': fn(build(params), src, **drafter_options.kwargs()).tokens}
  return draft, run.params, fn_options


def redrafter(run, name: str, overrides: dict[str, str], block: int):
  """extra_fn of a drafter run that re-drafts after every pass (nat_jax.decode.redraft): its view
  of the source as a WindowDrafter of `block` tokens, first drafted by its decoder `name`."""
  views = run.method.views()
  found = [(protocol, r) for protocol, r in REDRAFTERS.items() if protocol in views]
  if not found:
    raise ConfigError(f'--decoder.update=redraft: drafter {run.method.label()} cannot re-draft; a DA-Transformer '
                      f'(dag_lookahead) or CMLM (mask_predict) run can (or use update=jacobi or draft).')
  protocol, how = found[0]
  if name and name != how.decoder:
    raise ConfigError(f'--decoder.update=redraft continues the drafter decoder {how.decoder!r}; name that one '
                      f'(--decoder.drafter=<workdir>:{how.decoder}) or no decoder, not {name!r}.')
  drafter_options = parse_options(how.decoder, overrides)
  check_decoder(run.method, how.decoder, drafter_options)
  build = views[protocol]
  return lambda params, src: {'head': how.build(build(params), src, block, **drafter_options.kwargs())}


def head_drafter(method, run):
  """extra_fn of a drafter run that is a draft head (self-drafting) for the verifier `method`."""
  if not method.feeds_draft_heads:
    raise ConfigError(f'drafter {run.method.label()} is a draft head on an autoregressive model\'s decoder states; '
                      f'method {method.name!r} does not feed one (use an AT verifier, or a drafter run that '
                      'writes whole drafts, e.g. <workdir>:greedy).')
  want, have = run.method.model.cfg, method.model.cfg
  if (want.d_model, want.vocab_size) != (have.d_model, have.vocab_size):
    raise ConfigError(f'the draft head reads states of width {want.d_model} over {want.vocab_size} tokens; this '
                      f'verifier has {have.d_model} over {have.vocab_size}: train the head on this verifier.')
  build = run.method.views()[WindowDrafter]
  return lambda params, src: {'head': build(params)}


@dataclasses.dataclass(frozen=True)
class DraftedOptions(Bounded):
  drafter: str = option('', '<workdir>[:<decoder>[:opt=value...]] of a run with the same tokenizer (set by the '
                            'command line or the server, never by a request)', names_file=True)
  block: int = steps(4, 'decoding steps the verifier checks per pass')
  beta: int = option(1, "1: exact; > 1: accept a drafted token among the verifier's top beta within tau of its best "
                        "(SpecDec's relaxed rule; the output then differs from greedy)",
                     Rule(1, words="an integer >= 1 (the verifier's top beta tokens; 1: exact)"))
  tau: float = weight(3.0, 'log-probability margin of the relaxed rule (with beta > 1)')
  update: str = choice('jacobi', "after a rejection the window's later tokens become the verifier's own predictions "
                                 "(jacobi), stay the drafter's (draft), or the drafter drafts again from the final "
                                 'prefix (redraft: a DA-Transformer or CMLM drafter)', UPDATES)


@register_decoder('drafted', LeftToRightScorer, DraftedOptions, check=check_drafted, prepare=load_drafter,
                  about='Drafted (speculative) decoding of any left-to-right run: another run drafts the output, the '
                        'verifier scores a window of it per pass and keeps the prefix it agrees with plus its own next '
                        "token. Exact by default (beta 1): the output is the verifier's `greedy` output token for "
                        'token. A self-drafting run drafts with its own head (no drafter needed).')
def drafted(scorer: LeftToRightScorer, src: jax.Array, draft: Optional[jax.Array] = None,
            head: Optional[WindowDrafter] = None, block: int = 4, beta: int = 1, tau: float = 3.0,
            update: str = 'jacobi', max_len: int = 0) -> DecodeOutput:
  """The drafter's output verified `block` steps per pass; exact (the verifier's greedy output) with
  beta = 1. Without a drafter run, a self-drafting run drafts with its own head. Default block 4: a longer
  window costs more per pass than its extra accepted tokens save (measured: docs/lab-notes/2026-11-24-drafted.md)."""
  if draft is None and head is None:
    head = scorer.draft_head
  return drafted_decode(scorer, src, draft, head=head, block=block, beta=beta, tau=tau, update=update,
                        max_len=max_len)
