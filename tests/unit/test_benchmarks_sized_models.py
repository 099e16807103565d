"""benchmarks.components.sized_models' draft at a chosen acceptance, against a sequential count of what exact
drafted decoding finalises per pass (the independent truth), on a Markov-chain verifier."""
import jax
import numpy as np
import pytest

from benchmarks.components.sized_models import corrupt, source_batch
from nat_jax.decode.drafted import drafted_decode
from nat_jax.decode.greedy import greedy_decode
from tests.support import markov

VOCAB, EOS = 40, 1


def passes_by_hand(greedy: list[int], draft: list[int], block: int) -> int:
  """Passes of exact drafted decoding (update='draft'): each pass finalises the draft's leading run of
  agreeing tokens plus the verifier's own next one, at most `block`, until EOS is final."""
  n = greedy.index(EOS) + 1 if EOS in greedy else len(greedy)
  fixed = passes = 0
  while fixed < n:
    run = 0
    while run < block and fixed + run < n and draft[fixed + run] == greedy[fixed + run]:
      run += 1
    fixed += min(run + 1, block)
    passes += 1
  return passes


@pytest.mark.parametrize('acceptance', [1.0, 1.43, 2.0, 3.0])
def test_drafted_decoding_of_the_corrupted_draft_is_greedy_at_the_chosen_acceptance(acceptance):
  scorer = markov(VOCAB, seed=5, max_len=24, scale=0.5)  # a flat chain: long outputs
  src = np.full((6, 8), 7, np.int32)
  want = np.asarray(jax.jit(lambda s: greedy_decode(scorer, s))(src).tokens)
  draft = corrupt(want, acceptance, VOCAB)
  out = jax.jit(lambda s, d: drafted_decode(scorer, s, d, block=4, update='draft'))(src, draft)
  np.testing.assert_array_equal(np.asarray(out.tokens), want)
  for row in range(src.shape[0]):
    expected = passes_by_hand(list(want[row]), list(draft[row]), block=4)
    assert int(out.aux['iterations'][row]) == expected
  steps = np.asarray(out.aux['steps']).sum()
  per_pass = steps / np.asarray(out.aux['iterations']).sum()
  assert abs(per_pass - acceptance) <= 0.35  # the last pass of a row may finalise fewer tokens


def test_source_batch_takes_the_median_sentences():
  seqs = [[5] * n + [EOS] for n in (3, 9, 1, 20, 6, 12, 4)]
  batch = source_batch(seqs, 3)  # lengths sorted: 2 4 5 7 10 13 21 -> the middle three: 5 7 10
  assert batch.shape == (3, 16)
  assert sorted(int((r > 0).sum()) for r in batch) == [5, 7, 10]
