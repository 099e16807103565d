"""Decoders on hand-written views (no network): a Markov-chain LeftToRightScorer and a table-driven
GraphPredictor, against plain-Python references and brute-force enumeration; the registry's
Protocol matching; the one attention-mask function against its docstring's example matrices."""
import itertools

import flax
import jax.numpy as jnp
import numpy as np
import pytest

from nat_jax import decode
from nat_jax.core.masks import NEG_INF, attention_mask
from nat_jax.decode.beam import beam_search, best_hypotheses, length_penalty
from nat_jax.methods.autoregressive import autoregressive_inputs
from tests.support import (
  MarkovScorer,
  TableGraphs,
  dag_greedy_path,
  dag_lookahead_path,
  dat_config,
  markov,
  random_graphs,
  reference_text_tokens,
  run,
)

PAD, EOS, BOS = 0, 1, 2


@flax.struct.dataclass
class EosAtSlot(MarkovScorer):
  """The chain with EOS made (almost) certain at one slot, whatever the hypothesis."""
  eos_slot: int = flax.struct.field(pytree_node=False, default=0)

  def step_logits(self, enc, cache, tokens, start):
    logits, cache = MarkovScorer.step_logits(self, enc, cache, tokens, start)
    slots = start + jnp.arange(tokens.shape[1])  # [T]
    return logits.at[:, :, EOS].add(jnp.where(slots == self.eos_slot, 100.0, 0.0)[None]), cache


def log_softmax(x):
  x = np.asarray(x, np.float64)
  return x - np.max(x) - np.log(np.sum(np.exp(x - np.max(x))))


def reference_greedy(table, max_len: int, z: int):
  """Plain-Python greedy over the slot layout of LeftToRightScorer: step k feeds slots kz..kz+z-1
  (z start slots of BOS, then the outputs) and appends the argmax of each; stop at the first EOS."""
  seq, out, logp = [BOS] * z, [], 0.0
  for step in range(-(-max_len // z)):
    preds = []
    for s in range(step * z, step * z + z):
      older = seq[s - z] if s >= z else BOS
      lp = log_softmax(table[older, seq[s]])
      preds.append((int(np.argmax(lp)), float(np.max(lp))))
    seq += [t for t, _ in preds]
    for t, lp in preds:
      out.append(t)
      logp += lp
      if t == EOS:
        return out, logp
  return out, logp


def sequence_logp(table, seq) -> float:
  older, prev, total = BOS, BOS, 0.0
  for t in seq:
    total += log_softmax(table[older, prev])[t]
    older, prev = prev, t
  return total


@pytest.mark.parametrize('z', [1, 2, 3])
def test_greedy_follows_the_chain(z):
  src = jnp.ones((4, 3), jnp.int32)
  for seed in range(4):
    view = markov(6, seed, max_len=7, z=z)
    out = run(view, 'greedy', src)
    want, logp = reference_greedy(np.asarray(view.table), 7, z)
    for row in range(4):  # every row is the same chain
      got = np.asarray(out.tokens[row]).tolist()
      assert got[:len(want)] == want and not any(got[len(want):]), (z, seed, got, want)
      assert int(out.aux['steps'][row]) == len(want)
      assert int(out.aux['iterations'][row]) == -(-len(want) // z)  # decoder passes
      np.testing.assert_allclose(float(out.scores[row]), logp, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('alpha', [0.0, 1.0])
def test_beam_equals_brute_force(alpha):
  """Beam wide enough to keep every prefix = the best of all finished sequences by logp / lp."""
  vocab, t_max = 4, 4
  view = markov(vocab, 7, max_len=t_max, scale=1.5)
  table = np.asarray(view.table)
  out = run(view, 'beam', jnp.ones((2, 3), jnp.int32), beam_size=(vocab - 1) ** (t_max - 1), alpha=alpha)
  non_eos = [t for t in range(vocab) if t != EOS]
  candidates = [list(p) + [EOS] for n in range(t_max) for p in itertools.product(non_eos, repeat=n)]
  scores = [sequence_logp(table, c) / length_penalty(len(c), alpha) for c in candidates]
  best = candidates[int(np.argmax(scores))]
  for row in range(2):
    got = np.asarray(out.tokens[row]).tolist()
    assert got[:len(best)] == best and not any(got[len(best):])
    np.testing.assert_allclose(float(out.scores[row]), max(scores), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('eos_first', [12.0, 0.0])
def test_best_hypotheses_are_translations(eos_first):
  """Asked for more hypotheses than finished: an entry is a finished one, or an alive one only when the
  search ran to the bound; a search that stopped early (EOS first is all but certain, so its one
  finished hypothesis cannot be beaten) offers no unfinished prefix (score NEG_INF)."""
  view = markov(6, 3, max_len=8)
  view = view.replace(table=view.table.at[BOS, BOS, EOS].add(eos_first))
  enc = view.encode(jnp.ones((2, 3), jnp.int32))
  final = beam_search(view, enc, 2, 3, 0.6, 8)
  seqs, scores, logp = best_hypotheses(final, 0.6, 3)
  finished = np.asarray(final.fin_scores > NEG_INF / 2).sum(axis=1)
  at_bound = int(final.step) >= 8
  if eos_first:
    assert not at_bound and (finished < 3).all()  # the case that matters: an early stop
  for row in range(2):
    for i in range(3):
      tokens = np.asarray(seqs[row, i]).tolist()
      if i < finished[row]:
        assert EOS in tokens
        np.testing.assert_allclose(float(logp[row, i]),
                                   sequence_logp(np.asarray(view.table), tokens[:tokens.index(EOS) + 1]),
                                   rtol=1e-5, atol=1e-5)
      elif at_bound:
        assert float(scores[row, i]) > NEG_INF / 2
      else:
        assert float(scores[row, i]) <= NEG_INF / 2 and float(logp[row, i]) <= NEG_INF / 2, (tokens, scores)


@pytest.mark.parametrize('z', [1, 2, 3])
@pytest.mark.parametrize('name,options', [('jacobi_pj', {}), ('jacobi_pgj', {'block_size': 2}),
                                          ('jacobi_pgj', {'block_size': 3}), ('jacobi_hgj', {'block_size': 3})])
def test_jacobi_equals_greedy_on_the_chain(name, options, z):
  """Also with z tokens per step (SA / IBDecoder slot layout): token for token, at most greedy's steps."""
  src = jnp.ones((3, 2), jnp.int32)
  for seed in range(6):
    view = markov(5, seed, max_len=9, z=z)
    greedy, jac = run(view, 'greedy', src), run(view, name, src, **options)
    np.testing.assert_array_equal(np.asarray(jac.tokens), np.asarray(greedy.tokens))
    np.testing.assert_allclose(np.asarray(jac.scores), np.asarray(greedy.scores), rtol=1e-5, atol=1e-5)
    steps = -(-np.asarray(greedy.aux['steps']) // z)  # greedy's decoding steps
    assert (np.asarray(jac.aux['iterations']) <= steps).all()


def test_beam_refuses_several_tokens_per_step():
  with pytest.raises(ValueError, match='one token per step'):
    run(markov(5, 0, max_len=6, z=2), 'beam', jnp.ones((1, 2), jnp.int32))


def slot_log_probs(table, outputs, s: int, z: int):
  """The Markov view's log P(. | slot s) when its slots hold z BOS and then `outputs`."""
  seq = [BOS] * z + list(outputs)
  return log_softmax(table[seq[s - z] if s >= z else BOS, seq[s]])


@pytest.mark.parametrize('z', [1, 2, 3])
def test_multiword_beam_of_one_is_greedy(z):
  src = jnp.ones((3, 2), jnp.int32)
  for seed in range(5):
    view = markov(6, seed, max_len=9, z=z)
    greedy = run(view, 'greedy', src)
    beam = run(view, 'multiword_beam', src, beam_size=1, ban_first_eos=False)
    np.testing.assert_array_equal(np.asarray(beam.tokens), np.asarray(greedy.tokens))
    np.testing.assert_array_equal(np.asarray(beam.aux['steps']), np.asarray(greedy.aux['steps']))


@pytest.mark.parametrize('alpha', [0.0, 1.0])
def test_multiword_beam_equals_brute_force(alpha):
  """z = 2, two steps, a beam wider than every candidate: the best finished sequence by logp / lp(t)
  over all token pairs, EOS banned in the first step, an EOS in either slot ending the sequence."""
  vocab, z = 4, 2
  view = markov(vocab, 11, max_len=4, z=z, scale=1.5)
  table = np.asarray(view.table)
  out = run(view, 'multiword_beam', jnp.ones((2, 3), jnp.int32), beam_size=200, alpha=alpha)
  non_eos = [t for t in range(vocab) if t != EOS]
  best, best_score = None, -np.inf
  for a, b, c, d in itertools.product(non_eos, non_eos, range(vocab), range(vocab)):
    outputs = [a, b, c, d]
    if EOS not in (c, d) or (c == EOS and d != 0):
      continue  # not finished in step 2, or a duplicate of (a, b, EOS)
    text = outputs[:outputs.index(EOS) + 1]
    logp = sum(slot_log_probs(table, outputs, i, z)[t] for i, t in enumerate(text))
    if logp / length_penalty(len(text), alpha) > best_score:
      best, best_score = text, logp / length_penalty(len(text), alpha)
  for row in range(2):
    got = np.asarray(out.tokens[row]).tolist()
    assert got[:len(best)] == best and not any(got[len(best):]), (got, best)
    np.testing.assert_allclose(float(out.scores[row]), best_score, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('eos_slot', [2, 3])
@pytest.mark.parametrize('name', ['greedy', 'multiword_beam'])
def test_eos_in_any_slot_ends_the_hypothesis(name, eos_slot):
  base = markov(6, 2, max_len=10, z=2)
  view = EosAtSlot(base.table, base.max_len, 2, eos_slot=eos_slot)
  out = run(view, name, jnp.ones((2, 3), jnp.int32))
  tokens = np.asarray(out.tokens)
  assert (tokens[:, eos_slot] == EOS).all() and not tokens[:, eos_slot + 1:].any(), tokens
  assert (np.asarray(out.aux['steps']) == eos_slot + 1).all()
  if name == 'multiword_beam':
    assert (np.asarray(out.aux['loop_steps']) == 2).all()  # every hypothesis finished in step 2


def test_multiword_beam_bans_eos_in_the_first_step():
  view = markov(6, 4, max_len=8, z=2)
  view = view.replace(table=view.table.at[BOS, BOS, EOS].add(50.0))  # EOS is the first-step argmax
  assert int(run(view, 'greedy', jnp.ones((1, 2), jnp.int32)).tokens[0, 0]) == EOS
  tokens = np.asarray(run(view, 'multiword_beam', jnp.ones((1, 2), jnp.int32), beam_size=2).tokens[0])
  assert EOS not in tokens[:2].tolist() and EOS in tokens.tolist()


def test_multiword_beam_dedup_drops_repeated_tokens():
  view = markov(6, 13, max_len=9, z=2)  # greedy: 3 3 5 5 3 3 EOS
  never = jnp.zeros(6).at[jnp.array([PAD, BOS])].set(-50.0)  # text tokens only
  view = view.replace(table=view.table + 3.0 * jnp.eye(6)[None] + never)  # repeating the input token is likely
  src = jnp.ones((1, 2), jnp.int32)
  greedy = np.asarray(run(view, 'greedy', src).tokens[0]).tolist()
  text = greedy[:greedy.index(EOS)] if EOS in greedy else greedy
  want = [t for i, t in enumerate(text) if i == 0 or t != text[i - 1]]
  assert len(want) < len(text)  # the chain does repeat
  got = np.asarray(run(view, 'multiword_beam', src, beam_size=1, ban_first_eos=False, dedup=True).tokens[0]).tolist()
  assert got[:len(want) + 1] == want + [EOS] and not any(got[len(want) + 1:]), (got, want)


@pytest.mark.parametrize('seed', [0, 1])
def test_dag_decoders_on_a_hand_written_graph(seed):
  """The registered DAG decoders on a GraphPredictor without a model = the pure path functions."""
  log_trans, log_probs, lengths = random_graphs(seed)
  view = TableGraphs(log_trans, log_probs, lengths, max_len=9)
  src = jnp.ones((5, 4), jnp.int32)
  for name, (want, want_len) in (('dag_greedy', dag_greedy_path(log_trans, log_probs, lengths)),
                                 ('dag_lookahead', dag_lookahead_path(log_trans, log_probs, lengths)),
                                 ('dag_joint_viterbi', decode.dag.joint_viterbi(log_trans, log_probs, lengths, 1.0))):
    out = run(view, name, src)
    for r in range(5):
      seq = reference_text_tokens(np.asarray(want[r, :want_len[r]]).tolist(), True, 9)
      got = np.asarray(out.tokens[r]).tolist()
      assert got[:len(seq)] == seq and not any(got[len(seq):]), (name, r, got, seq)


def test_decoders_follow_the_views_a_method_offers(corpus):
  from nat_jax.methods import get_method
  from tests.support import tiny_config
  at, dat = get_method(tiny_config(corpus), 50), get_method(dat_config(), 50)
  assert decode.decoders_for(at) == ['beam', 'generate_beam', 'greedy', 'jacobi_hgj', 'jacobi_pgj', 'jacobi_pj',
                                    'multiword_beam']
  assert decode.decoders_for(dat) == ['dag_beam', 'dag_greedy', 'dag_joint_viterbi', 'dag_lookahead']
  with pytest.raises(ValueError, match="needs a GraphPredictor.*'at'.*greedy"):
    decode.make_decode_fn(at, 'dag_greedy', {'remove_repeats': False})
  with pytest.raises(ValueError, match="needs a LeftToRightScorer.*'dat'.*dag_greedy"):
    decode.make_decode_fn(dat, 'beam', decode.parse_options('beam', {}))


def brute_mask(groups, valid, query_groups):
  return np.array([[g_k <= q and v for g_k, v in zip(groups, valid)] for q in query_groups], bool)


def test_attention_mask_docstring_examples_and_definition():
  causal = attention_mask(jnp.arange(4))
  np.testing.assert_array_equal(causal, np.tril(np.ones((4, 4), bool)))
  full = attention_mask(jnp.zeros(4, jnp.int32), jnp.array([True, True, True, False]))
  np.testing.assert_array_equal(full, np.tile([True, True, True, False], (4, 1)))
  block = attention_mask(jnp.array([0, 0, 1, 1]))
  np.testing.assert_array_equal(block, [[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1]])
  cached = attention_mask(jnp.arange(5), query_groups=jnp.array([2, 3]))
  np.testing.assert_array_equal(cached, [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0]])
  rng = np.random.default_rng(0)
  for _ in range(20):  # batched, random groups and validity, against the definition
    groups, qgroups = rng.integers(0, 4, (3, 6)), rng.integers(0, 4, (3, 5))
    valid = rng.random((3, 6)) < 0.7
    got = np.asarray(attention_mask(jnp.asarray(groups), jnp.asarray(valid), query_groups=jnp.asarray(qgroups)))
    for b in range(3):
      np.testing.assert_array_equal(got[b], brute_mask(groups[b], valid[b], qgroups[b]))


def test_autoregressive_inputs_one_row():
  inputs = autoregressive_inputs(jnp.array([[5, 6, EOS, 0]]))
  np.testing.assert_array_equal(inputs.tokens, [[BOS, 5, 6, EOS]])
  np.testing.assert_array_equal(inputs.positions, [[0, 1, 2, 3]])
  np.testing.assert_array_equal(inputs.targets, [[5, 6, EOS, 0]])
  np.testing.assert_array_equal(inputs.self_mask()[0], np.tril(np.ones((4, 4), bool)))
