"""Corpus BLEU and chrF (sacreBLEU, detokenized) against one or several reference streams, and the
multi-reference view: BLEU against each reference alone and together, and which references each
output n-gram matches (both, one of them, neither)."""
from __future__ import annotations

import collections
from typing import Any, Sequence

import sacrebleu
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a


def bleu_scores(hyps: Sequence[str], references: Sequence[Sequence[str]]) -> dict[str, Any]:
  """sacreBLEU BLEU and chrF with their signatures. references: one list per reference stream."""
  bleu = sacrebleu.metrics.BLEU()
  chrf = sacrebleu.metrics.CHRF()
  b = bleu.corpus_score(list(hyps), [list(r) for r in references])
  c = chrf.corpus_score(list(hyps), [list(r) for r in references])
  return {'bleu': round(b.score, 2), 'chrf': round(c.score, 2), 'bleu_signature': str(bleu.get_signature()),
          'chrf_signature': str(chrf.get_signature()), 'num_refs': len(references)}


def reference_streams(examples) -> list[list[str]]:
  """Examples with a varying number of references -> streams; the common number is used."""
  n = min(len(e.references) for e in examples)
  return [[e.references[r] for e in examples] for r in range(n)]


def score_translations(hyps: Sequence[str], examples) -> dict[str, Any]:
  """{'first_ref': scores against the first reference, 'all_refs': against all (when > 1)}."""
  refs = reference_streams(examples)
  result = {'first_ref': bleu_scores(hyps, refs[:1])}
  if len(refs) > 1:
    result['all_refs'] = bleu_scores(hyps, refs)
  return result


MATCH_CLASSES = ('both', 'first_only', 'second_only', 'neither')


def _ngrams(words: list[str], n: int) -> collections.Counter:
  return collections.Counter(tuple(words[i:i + n]) for i in range(len(words) - n + 1))


def ngram_match_shares(hyps: Sequence[str], first: Sequence[str], second: Sequence[str], n: int) -> dict[str, float]:
  """Share (%) of the outputs' n-grams (sacreBLEU's 13a tokens) matched by both references, by only
  the first, by only the second, and by neither, with BLEU's clipping: of an n-gram occurring c
  times in an output and a, b times in its two references, min(c, a, b) are matched by both,
  min(c, a) - min(c, a, b) by the first only, min(c, b) - min(c, a, b) by the second only and
  c - min(c, max(a, b)) by neither (the four add up to c). 'neither' is 100 - the n-gram precision
  of multi-reference BLEU; 'first_only' and 'second_only' show an output mixing the two
  references' wordings (multi-modality)."""
  tokenize = Tokenizer13a()
  totals = dict.fromkeys(MATCH_CLASSES, 0)
  count = 0
  for hyp, ref_a, ref_b in zip(hyps, first, second, strict=True):
    h, a, b = (_ngrams(tokenize(t).split(), n) for t in (hyp, ref_a, ref_b))
    for gram, c in h.items():
      both = min(c, a[gram], b[gram])
      totals['both'] += both
      totals['first_only'] += min(c, a[gram]) - both
      totals['second_only'] += min(c, b[gram]) - both
      totals['neither'] += c - min(c, max(a[gram], b[gram]))
      count += c
  return {k: round(100.0 * v / max(count, 1), 2) for k, v in totals.items()}


def reference_view(hyps: Sequence[str], examples) -> dict[str, Any]:
  """BLEU and chrF against each reference stream alone and against all of them; with two or more,
  the unigram and bigram match shares against the first two (`ngram_match_shares`)."""
  refs = reference_streams(examples)
  view: dict[str, Any] = {'per_ref': [bleu_scores(hyps, [r]) for r in refs]}
  if len(refs) > 1:
    view['all_refs'] = bleu_scores(hyps, refs)
    view['match'] = {f'{n}gram': ngram_match_shares(hyps, refs[0], refs[1], n) for n in (1, 2)}
  return view
