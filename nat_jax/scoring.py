"""Corpus BLEU and chrF (sacreBLEU, detokenized) against one or several reference streams."""
from __future__ import annotations

from typing import Any, Sequence

import sacrebleu


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
