"""benchmarks/projection/roofline.py: a call's roofline time is the hand-computed formula, fitted overheads reproduce
the measured call, and every plan names units the compiler builds."""
import jax
import jax.numpy as jnp
import pytest

from benchmarks.projection import roofline
from nat_jax import decode
from nat_jax.ahead_of_time import targets


def test_roofline_of_one_matmul():
  """The compiler's FLOPs of a [M, K] x [K, N] matmul are 2 M K N, and a call's roofline time is the
  hand-computed max(FLOPs / peak, bytes / bandwidth) + overhead, compute- or memory-bound."""
  m, k, n = 64, 128, 256
  a, b = jax.ShapeDtypeStruct((m, k), jnp.float32), jax.ShapeDtypeStruct((k, n), jnp.float32)
  cost = jax.jit(lambda x, y: x @ y).lower(a, b).compile().cost_analysis()
  assert cost['flops'] == pytest.approx(2 * m * k * n)
  assert cost['bytes accessed'] >= 4 * (m * k + k * n + m * n)
  chip = targets.Chip('test', 'tpu', 1e9, peak_flops=1e12, bandwidth=1e9, overhead_s=1e-5)
  flops, traffic = 2 * m * k * n, 4 * (m * k + k * n + m * n)
  assert roofline.call_seconds(flops, traffic, chip) == pytest.approx(traffic / 1e9 + 1e-5)  # memory-bound
  fast_memory = targets.Chip('test', 'tpu', 1e9, peak_flops=1e9, bandwidth=1e15, overhead_s=0.0)
  assert roofline.call_seconds(flops, traffic, fast_memory) == pytest.approx(flops / 1e9)  # compute-bound
  plan = roofline.Plan('two steps', (roofline.Call('r', 'step', 2.0), roofline.Call('r', 'pass4', 0.5)), '')
  costs = {('r', 'step', 1): (flops, traffic), ('r', 'pass4', 1): (4 * flops, traffic)}
  want = 2 * roofline.call_seconds(flops, traffic, chip) + 0.5 * roofline.call_seconds(4 * flops, traffic, chip)
  assert roofline.plan_seconds(plan, costs, chip, 1) == pytest.approx(want)
  assert roofline.plan_seconds(plan, costs, chip, 64) is None  # a missing cost is not a zero


def test_a_fitted_overhead_reproduces_the_measured_call_and_measured_calls_compose():
  """Fitting the per-call overhead to a measured call (benchmarks/projection/unit_speed.py) makes the roofline give
  exactly that call's time, for a call above the roofline; a call faster than its roofline fits no
  negative overhead. A plan of measured calls is the count-weighted sum, None with a call missing."""
  chip = targets.Chip('test', 'gpu', 1e9, peak_flops=1e12, bandwidth=1e9, overhead_s=2e-5)
  flops, traffic = 1e6, 3e4  # roofline: max(1e-6, 3e-5) = 30 us
  overhead = roofline.fitted_overhead(2.6e-4, flops, traffic, chip)
  assert overhead == pytest.approx(2.3e-4)
  assert roofline.call_seconds(flops, traffic, chip, overhead) == pytest.approx(2.6e-4)
  assert roofline.fitted_overhead(1e-5, flops, traffic, chip) == 0.0
  plan = roofline.PLANS['at greedy']
  seconds = {('at_base', 'encode', 1): 8.4e-4, ('at_base', 'step', 1): 2.6e-4}
  steps = next(c.count for c in plan.calls if c.unit == 'step')
  assert roofline.composed_seconds(plan, seconds, 1) == pytest.approx(8.4e-4 + steps * 2.6e-4)
  assert roofline.composed_seconds(plan, seconds, 64) is None


def test_projection_plans_name_real_units_and_claims():
  """Every plan names recipes in configs/ and units nat_jax.ahead_of_time.programs builds; every claim pairs two
  plans."""
  from nat_jax import recipes
  labels = {'encode', 'step', 'pass3', 'pass4', 'pass8', 'beam4 step', 'fill', 'fill(5 lengths)', 'encode+length',
            'draft head'}
  for recipe, units in roofline.recipes_needed().items():
    assert recipes.recipe_path(recipe) is not None, recipe
    assert all(u in labels or u.startswith('decode ') and u[7:] in decode.DECODERS for u in units), units
  for plan, base, claimed, _ in roofline.CLAIMS:
    assert plan in roofline.PLANS and base in roofline.PLANS and claimed > 1
