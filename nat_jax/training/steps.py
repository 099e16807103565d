"""The pure training steps: gradients of a micro-batch's summed loss, the normalized optimizer step,
the evaluation step, and their jitted, sharded forms (compiled once per run; nat_jax.aot compiles the same)."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import optax

from nat_jax.parallel import sharding
from nat_jax.run.train_state import TrainState


def grad_step(method, params, batch, rng, step):
  """Summed loss statistics and gradients of the summed loss for one micro-batch (step i32[]: the update)."""
  def loss_fn(p):
    sums = method.loss(p, batch, rng, step=step)
    return sums['loss'], sums
  grads, sums = jax.grad(loss_fn, has_aux=True)(params)
  return grads, sums


def loss_denominator(sums: dict, normalizer: str) -> jax.Array:
  """What the summed loss is divided by: the method's normalizer count ('tokens' or 'sentences'), >= 1."""
  return jnp.maximum(sums[normalizer], 1.0)


def normalize(sums: dict, normalizer: str) -> dict:
  """Per-unit metrics from summed loss statistics: loss / the normalizer's count, nll, correct
  (-> accuracy) and every `<name>_per_token` count (e.g. the DAT's glanced tokens) / tokens; other
  counts (tokens, sentences, impossible, ...) stay sums."""
  tokens = jnp.maximum(sums['tokens'], 1.0)
  out = {k: v / tokens if k.endswith('_per_token') else v
         for k, v in sums.items() if k not in ('loss', 'nll', 'correct')}
  out.update(loss=sums['loss'] / loss_denominator(sums, normalizer), nll=sums['nll'] / tokens,
             accuracy=sums['correct'] / tokens)
  return out


def apply_step(tx, normalizer: str, state: TrainState, grads, sums):
  """Normalize the summed gradients like the loss and take one optimizer step."""
  denominator = loss_denominator(sums, normalizer)
  grads = jax.tree_util.tree_map(lambda g: g / denominator, grads)
  updates, opt_state = tx.update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  metrics = normalize(sums, normalizer)
  metrics.update(grad_norm=optax.tree.norm(grads))
  return TrainState(step=state.step + 1, params=params, opt_state=opt_state), metrics


def eval_step(method, params, batch):
  return method.loss(params, batch, jax.random.PRNGKey(0), deterministic=True)


def compile_steps(method, tx, mesh, state_sh):
  """Jitted (grad_fn, apply_fn, eval_fn) with the state sharded as `state_sh` and batches over `data`."""
  batch_sh, repl = sharding.batch_sharding(mesh), sharding.replicated(mesh)
  grad_fn = jax.jit(functools.partial(grad_step, method), in_shardings=(state_sh.params, batch_sh, repl, repl),
                    out_shardings=(state_sh.params, repl))
  apply_fn = jax.jit(functools.partial(apply_step, tx, method.normalizer),
                     in_shardings=(state_sh, state_sh.params, repl),
                     out_shardings=(state_sh, repl), donate_argnums=(0,))
  eval_fn = jax.jit(functools.partial(eval_step, method), in_shardings=(state_sh.params, batch_sh),
                    out_shardings=repl)
  return grad_fn, apply_fn, eval_fn
