"""Train state, optimizer and sharded initialisation shared by train, translate and evaluate."""
from __future__ import annotations

from typing import Any

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding

from nat_jax.parallel import sharding


@flax.struct.dataclass
class TrainState:
  step: jax.Array  # i32[] optimizer updates done
  params: Any
  opt_state: Any


def lr_schedule(config) -> optax.Schedule:
  """Inverse square root with linear warm-up, lr * min(s / w, sqrt(w / s)), optionally times a
  linear cool-down to 0 over the last `cooldown_steps` of `total_steps` (0 = none)."""
  lr, warmup = config.learning_rate, max(config.warmup_steps, 1)
  total, cooldown = config.total_steps, config.cooldown_steps

  def schedule(step):
    s = jnp.maximum(step.astype(jnp.float32) + 1.0, 1.0)
    rate = lr * jnp.minimum(s / warmup, jnp.sqrt(warmup / s))
    if cooldown > 0:
      rate = rate * jnp.clip((total - step.astype(jnp.float32)) / cooldown, 0.0, 1.0)
    return rate
  return schedule


def make_optimizer(config) -> optax.GradientTransformation:
  """Adam(W) with inverse-sqrt warm-up, global-norm clipping, decoupled weight decay."""
  parts = []
  if config.clip_norm > 0:
    parts.append(optax.clip_by_global_norm(config.clip_norm))
  parts.append(optax.adamw(lr_schedule(config), b1=config.adam_b1, b2=config.adam_b2, eps=1e-9,
                           weight_decay=config.weight_decay))
  return optax.chain(*parts)


def _init_fn(method, tx, batch):
  def init(rng):
    params = method.init_params(rng, batch)  # boxed with logical axis names
    return TrainState(step=jnp.int32(0), params=params, opt_state=tx.init(params))
  return init


def state_shardings(method, tx, batch, mesh):
  """(abstract unboxed TrainState with shardings attached, shardings tree) over `mesh`: what training
  restores into and what nat_jax.aot compiles against (no array is allocated)."""
  init = _init_fn(method, tx, batch)
  abstract = jax.eval_shape(init, jax.random.PRNGKey(0))
  logical = nn.logical_to_mesh_sharding(nn.get_partition_spec(abstract), mesh, sharding.LOGICAL_AXIS_RULES)
  unboxed = nn.meta.unbox(abstract)
  shardings = jax.tree_util.tree_map(  # a mesh axis that does not divide a dimension leaves it whole
      lambda a, s: NamedSharding(mesh, sharding.fit_spec(s.spec, a.shape, mesh)), unboxed, logical)
  abstract_sharded = jax.tree_util.tree_map(
      lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), unboxed, shardings)
  return abstract_sharded, shardings


def create_train_state(method, tx, batch, mesh, rng) -> TrainState:
  """Initialise params and optimizer state directly into their shardings."""
  _, shardings = state_shardings(method, tx, batch, mesh)
  init = _init_fn(method, tx, batch)
  return jax.jit(lambda r: nn.meta.unbox(init(r)), out_shardings=shardings)(rng)


def dummy_batch(rows: int = 1, length: int = 8) -> dict[str, jax.Array]:
  """Shape-only batch for initialisation (parameter shapes do not depend on it)."""
  return {'source': jnp.ones((rows, length), jnp.int32), 'target': jnp.ones((rows, length), jnp.int32)}
