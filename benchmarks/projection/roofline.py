"""Projected decoding speed on an accelerator we do not have: compiled costs on a roofline.

A decoder makes sequential device calls (a left-to-right step, a verification pass, a DAG graph pass,
a mask-predict iteration, an HRT phase). One call on a chip takes, on the roofline,

  t(call) = max(FLOPs / peak FLOP/s, bytes accessed / HBM bytes/s) + overhead,

with FLOPs and bytes from XLA's cost analysis of that call compiled alone for the chip
(nat_jax.ahead_of_time.programs' units: a loop's cost analysis counts its body once) and the chip's figures
and assumed per-call overhead from nat_jax.ahead_of_time.targets. A sentence costs the sum over its calls of
t(call) x the number of such calls it makes. Those numbers are measured, not assumed: the means per
Acts test sentence of the trained tiny runs' decoders (the `aux` of results.json in
docs/results/benchmark_tiny/, docs/results/drafted_tiny/*/ and docs/lab-notes/data/benchmark_*/: steps, iterations,
loop steps),
`PLANS` below with the row each comes from. Every figure is a projection, not a measurement; what it
leaves out: docs/lab-notes/2026-11-25-accelerators.md.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from nat_jax.ahead_of_time.targets import Chip


def call_seconds(flops: float, bytes_accessed: float, chip: Chip, overhead: Optional[float] = None) -> float:
  """One call on the roofline: the slower of compute and memory traffic, plus the per-call overhead."""
  return max(flops / chip.peak_flops, bytes_accessed / chip.bandwidth) + (chip.overhead_s if overhead is None
                                                                          else overhead)


@dataclasses.dataclass(frozen=True)
class Call:
  recipe: str    # configs/<recipe>.py whose program it is
  unit: str      # the program's label ('step', 'pass4', 'beam4 step', 'fill', 'decode dag_lookahead', ...)
  count: float   # calls per sentence


@dataclasses.dataclass(frozen=True)
class Plan:
  label: str
  calls: tuple   # of Call
  source: str    # where the call counts come from


# Calls per sentence, measured on the Acts test set (1,007 verses) with the trained tiny runs (d=128):
# the `aux` means of <folder>/results.json (folder and run:decoder named in each source: `benchmark` is
# docs/results/benchmark_tiny/, `drafted_tiny/<drafter>` docs/results/drafted_tiny/<drafter>/, the others
# docs/lab-notes/data/benchmark_*/).
PLANS = {
    'at greedy': Plan('AT greedy', (Call('at_base', 'encode', 1), Call('at_base', 'step', 36.81)),
                      'benchmark_loop at_bible_tiny:greedy steps 36.81'),
    'at beam4': Plan('AT beam 4', (Call('at_base', 'encode', 1), Call('at_base', 'beam4 step', 50.35)),
                     'benchmark_loop at_bible_tiny:beam loop_steps 50.35'),
    'at jacobi_hgj': Plan('AT Jacobi HGJ (block 3)', (Call('at_base', 'encode', 1), Call('at_base', 'pass3', 31.18)),
                          'benchmark at_student_bible_tiny:jacobi_hgj iterations 31.18'),
    'selfdraft drafted': Plan('AT drafted by its self-draft head (block 4)',
                              (Call('selfdraft_base', 'encode', 1), Call('selfdraft_base', 'pass4', 24.94),
                               Call('selfdraft_base', 'draft head', 24.94)),
                              'drafted_tiny/self_draft_head at_bible_tiny:drafted block=4 iterations 24.94'),
    'at drafted dat': Plan('AT drafted by a DA-Transformer (re-draft, block 4)',
                           (Call('at_base', 'encode', 1), Call('dat_drafter_base', 'decode dag_lookahead', 1),
                            Call('at_base', 'pass4', 26.18)),
                           'benchmark_ct2 at_bible_tiny:drafted update=redraft iterations 26.18'),
    'at drafted perfect': Plan('AT drafted, a perfect free draft (block 4): the ceiling',
                               (Call('at_base', 'encode', 1), Call('at_base', 'pass4', 36.81 / 4)),
                               'at_bible_tiny:greedy steps 36.81 / 4 tokens per pass, no drafter cost'),
    'dat lookahead': Plan('DA-Transformer lookahead', (Call('dat_wmt14_ende', 'decode dag_lookahead', 1),),
                          'one loop-free program (graph, best tokens, path by pointer doubling)'),
    'cmlm mask_predict': Plan('CMLM mask-predict (10 iterations, 5 lengths)',
                              (Call('cmlm_wmt14_ende', 'encode+length', 1),
                               Call('cmlm_wmt14_ende', 'fill(5 lengths)', 10)),
                              'benchmark cmlm_bible_tiny:mask_predict iterations 10'),
    'hrt': Plan('HRT k=2 (Skip-AT greedy + one fill)', (Call('hrt_wmt14_ende', 'encode', 1),
                                                        Call('hrt_wmt14_ende', 'step', 16.47),
                                                        Call('hrt_wmt14_ende', 'fill', 1)),
                'benchmark hrt_bible_tiny:hrt steps 16.47'),
    'at_e12d1 greedy': Plan('AT E12D1 greedy', (Call('at_e12d1', 'encode', 1), Call('at_e12d1', 'step', 33.34)),
                            'benchmark at_e6d1_bible_tiny:greedy steps 33.34'),
    'royalflush': Plan('RoyalFlush HRT E12D1 k=2', (Call('royalflush_e12d1', 'encode', 1),
                                                    Call('royalflush_e12d1', 'step', 16.91),
                                                    Call('royalflush_e12d1', 'fill', 1)),
                       'benchmark hrt_e6d1_bible_tiny:hrt steps 16.91'),
    'ibdecoder greedy': Plan('IBDecoder greedy (h=2, c=1)', (Call('ibdec_wmt14_ende', 'encode', 1),
                                                             Call('ibdec_wmt14_ende', 'step', 19.74)),
                             'benchmark ibdec_bible_tiny:greedy iterations 19.74'),
    'sa greedy': Plan('SA greedy (h=1, c=2)', (Call('sa_wmt14_ende', 'encode', 1),
                                               Call('sa_wmt14_ende', 'step', 17.57)),
                      'benchmark sa_bible_tiny:greedy iterations 17.57'),
    'ibsa greedy': Plan('IBDecoder+SA greedy (h=2, c=2)', (Call('ibsa_wmt14_ende', 'encode', 1),
                                                           Call('ibsa_wmt14_ende', 'step', 10.02)),
                        'benchmark ibsa_bible_tiny:greedy iterations 10.02'),
    'imdec greedy': Plan('IMDecoder greedy (h=4, c=1)', (Call('imdec_wmt14_ende', 'encode', 1),
                                                         Call('imdec_wmt14_ende', 'step', 9.90)),
                         'benchmark imdec_bible_tiny:greedy iterations 9.90'),
}

# (plan, baseline plan, the seed's measured GPU speed-up of that pair, where it is from)
CLAIMS = (
    ('dat lookahead', 'at beam4', 13.9, 'DA-Transformer lookahead vs AT beam (WMT14 En-De)'),
    ('hrt', 'at greedy', 1.5, 'HRT: at least 50% faster than AT'),
    ('royalflush', 'at_e12d1 greedy', 1.81, 'RoyalFlush HRT E12D1 k=2 vs AT E12D1, batch 1'),
    ('ibdecoder greedy', 'at beam4', 2.33, 'IBDecoder greedy vs Transformer beam 4, batch 1'),
    ('ibsa greedy', 'at beam4', 4.35, 'IBDecoder+SA greedy vs Transformer beam 4, batch 1'),
    ('imdec greedy', 'at beam4', 4.55, 'IMDecoder greedy vs Transformer beam 4, batch 1'),
    ('at jacobi_hgj', 'at greedy', 1.38, 'Jacobi decoding, best case vs greedy'),
    ('selfdraft drafted', 'at greedy', 3.0, 'SpecDec exact (beta = 1) vs greedy'),
    ('at drafted dat', 'at greedy', 3.0, 'SpecDec exact (beta = 1) vs greedy'),
    ('at drafted perfect', 'at greedy', 3.0, 'SpecDec exact (beta = 1) vs greedy'),
)


def recipes_needed(plans=None) -> dict[str, set]:
  """{recipe: the unit labels the plans need from it}."""
  out: dict[str, set] = {}
  for plan in (plans or PLANS).values():
    for call in plan.calls:
      out.setdefault(call.recipe, set()).add(call.unit)
  return out


def plan_seconds(plan: Plan, costs: dict, chip: Chip, batch: int, overhead: Optional[float] = None) -> Optional[float]:
  """Projected seconds per batch of `batch` sentences: the plan's calls at that batch size on the
  roofline. costs: {(recipe, unit, batch): (flops, bytes accessed)}; None if one is missing."""
  keys = [(c.recipe, c.unit, batch) for c in plan.calls]
  return composed_seconds(plan, {k: call_seconds(*costs[k], chip, overhead) for k in keys if k in costs}, batch)


def composed_seconds(plan: Plan, seconds: dict, batch: int) -> Optional[float]:
  """Seconds per batch of `batch` sentences of a plan whose calls take `seconds` {(recipe, unit,
  batch): seconds of one call} (measured, or projected by `plan_seconds`): the count-weighted sum;
  None if one is missing."""
  calls = [seconds.get((c.recipe, c.unit, batch)) for c in plan.calls]
  return None if None in calls else sum(c.count * t for c, t in zip(plan.calls, calls))


def fitted_overhead(measured_seconds: float, flops: float, bytes_accessed: float, chip: Chip) -> float:
  """The per-call overhead that makes the roofline give a call's measured time (0 if the roofline
  alone already exceeds it): measured less max(FLOPs / peak, bytes / bandwidth)."""
  return max(measured_seconds - call_seconds(flops, bytes_accessed, chip, overhead=0.0), 0.0)


def projection_rows(costs: dict, chip: Chip, batches=(1, 64), overhead: Optional[float] = None) -> list[dict]:
  """One row per plan: projected ms per batch and sentences/s at each batch size."""
  rows = []
  for key, plan in PLANS.items():
    row = {'plan': key, 'label': plan.label, 'source': plan.source}
    for b in batches:
      seconds = plan_seconds(plan, costs, chip, b, overhead)
      row[f'ms_b{b}'] = None if seconds is None else seconds * 1e3
      row[f'sent_s_b{b}'] = None if seconds is None else b / seconds
    rows.append(row)
  return rows


def claim_rows(rows: list[dict], batches=(1, 64)) -> list[dict]:
  """Projected speed-up of each claimed pair beside the seed's number and their ratio."""
  by_plan = {r['plan']: r for r in rows}
  out = []
  for plan, base, claimed, what in CLAIMS:
    row = {'plan': plan, 'baseline': base, 'claimed': claimed, 'what': what}
    for b in batches:
      mine, theirs = by_plan.get(plan, {}).get(f'ms_b{b}'), by_plan.get(base, {}).get(f'ms_b{b}')
      row[f'speedup_b{b}'] = None if not mine or not theirs else theirs / mine
    row['within_2x'] = row.get('speedup_b1') is not None and row['speedup_b1'] >= claimed / 2
    out.append(row)
  return out
