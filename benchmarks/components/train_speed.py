"""Training throughput of a recipe and of its variants, timed side by side: tokens/s of the jitted
train step on the recipe's real training batches.

  python -m benchmarks.components.train_speed --config=configs/at_bible_tiny.py [--steps=40]
  python -m benchmarks.components.train_speed --config=configs/at_student_bible_tiny.py --workdir=runs/at_bible_tiny \
      --config.data.distill_dir=runs/distill_greedy --variants='packed:data.pack=8' --passes=4 --steps=20

Each variant (`name:key=value,key=value`, `;` between variants) is the recipe with those config
overrides (values parsed as Python literals where they parse); the recipe itself is the first row,
`base`. Every variant compiles its shapes first (not timed), then the variants take turns, pass
by pass (the order reversed every other pass), each timing `--steps` consecutive real batches
(each step blocked on) from where it left off. Reports per variant the median step, target
tokens/s (the non-pad target tokens the loss sees), padded tokens/s (source + target slots the
hardware processes), CPU time (user + system, all threads) per step, and its speed over base's
pass by pass: median (min-max). Like every command line here it runs with glibc's huge-page
malloc on Linux (nat_jax/hugepages.py); NAT_JAX_HUGEPAGES=0 measures without it.
"""
from __future__ import annotations

import ast
import copy
import os
import tempfile
import time

import jax
import numpy as np
from absl import flags

from nat_jax.commands import cli
from nat_jax.data import bucket_shapes
from nat_jax.errors import ConfigError
from nat_jax.methods import get_method
from nat_jax.metrics.timing import machine, timed
from nat_jax.parallel import sharding
from nat_jax.run.train_state import create_train_state, make_optimizer, state_shardings
from nat_jax.training.loop import load_data, training_batches
from nat_jax.training.steps import compile_steps

flags.DEFINE_integer('steps', 40, 'Timed steps per variant and pass.')
flags.DEFINE_integer('passes', 1, 'Passes over the variants (alternating order).')
flags.DEFINE_string('variants', '', "Variants timed beside the recipe: 'name:key=value,key=value;name2:...'.")
FLAGS = flags.FLAGS
RECIPE_FLAGS = (cli.recipe_flag(),
                cli.Flag('workdir', 'str', None, "Where the recipe's tokenizer is trained or found (a distillation "
                         "student's: its teacher's run); default: a temporary directory."))


def parse_variants(spec: str) -> list[tuple[str, dict]]:
  """'packed:data.pack=8;b12:num_buckets=12' -> [('packed', {'data.pack': 8}), ('b12', {'num_buckets': 12})]."""
  out = []
  for part in filter(None, (p.strip() for p in spec.split(';'))):
    name, _, assignments = part.partition(':')
    overrides = {}
    for item in filter(None, assignments.split(',')):
      key, eq, value = item.partition('=')
      if not eq:
        raise ConfigError(f'--variants: {item!r} in variant {name!r} is not key=value.')
      try:
        overrides[key.strip()] = ast.literal_eval(value.strip())
      except (ValueError, SyntaxError):
        overrides[key.strip()] = value.strip()
    out.append((name.strip(), overrides))
  return out


def with_overrides(config, overrides: dict):
  config = copy.deepcopy(config)
  for key, value in overrides.items():
    node, *path = config, *key.split('.')
    for name in path[:-1]:
      node = node[name]
    if path[-1] not in node:
      raise ConfigError(f'--variants: the config has no key {key!r}.')
    node[path[-1]] = value
  return config


class Variant:
  """One config's method, batches, compiled steps and state, timed a chunk of steps at a time."""

  def __init__(self, name, config, splits, tokenizer):
    self.name, self.config = name, config
    method = get_method(config, tokenizer.vocab_size)
    mesh = sharding.make_mesh(config.mesh.model_parallel)
    shapes = bucket_shapes(config.max_len, config.tokens_per_batch, config.num_buckets, mesh.shape['data'])
    self.batches, _ = training_batches(config, splits['train'], tokenizer, shapes, method, mesh.shape['data'])
    tx = make_optimizer(config)
    first = self.batches(0)
    _, state_sh = state_shardings(method, tx, first, mesh)
    self.state = create_train_state(method, tx, first, mesh, jax.random.PRNGKey(0))
    grad_fn, apply_fn, _ = compile_steps(method, tx, mesh, state_sh)
    rng = jax.random.PRNGKey(0)

    def step(state, local):
      g, s = grad_fn(state.params, sharding.global_batch(local, mesh), rng, state.step)
      return apply_fn(state, g, s)
    self.step_fn, self.next_step = step, 0
    self.compile_s = 0.0
    for rows, length in self.batches.shapes:  # compile + warm every shape on a real batch of it
      local = next(b for b in map(self.batches, range(10_000)) if b['source'].shape == (rows, length))
      (self.state, _), seconds = timed(lambda: step(self.state, local))
      self.compile_s += seconds
    self.times, self.target_tokens, self.padded, self.cpu = [], [], [], []
    self.n_params = sum(x.size for x in jax.tree_util.tree_leaves(self.state.params))

  def run(self, steps: int) -> float:
    """Times `steps` steps; returns their target tokens/s."""
    times, tokens, padded = [], 0.0, 0
    cpu0 = time.process_time()
    for _ in range(steps):
      local = self.batches(self.next_step)
      self.next_step += 1
      (self.state, m), seconds = timed(lambda: self.step_fn(self.state, local))
      times.append(seconds)
      tokens += float(m['tokens'])
      padded += local['source'].size + local['target'].size
    self.cpu.append((time.process_time() - cpu0) / steps)
    self.times += times
    self.target_tokens.append(tokens / sum(times))
    self.padded.append(padded / sum(times))
    return self.target_tokens[-1]


def main(_):
  cli.quiet_logs()
  config = FLAGS.config
  workdir = FLAGS.workdir or tempfile.mkdtemp()
  splits, tokenizer = load_data(config, workdir)
  variants = [Variant('base', config, splits, tokenizer)]
  variants += [Variant(name, with_overrides(config, overrides), splits, tokenizer)
               for name, overrides in parse_variants(FLAGS.variants)]
  ratios = {v.name: [] for v in variants}
  for p in range(FLAGS.passes):
    speeds = {v.name: v.run(FLAGS.steps) for v in (variants if p % 2 == 0 else variants[::-1])}
    for v in variants:
      ratios[v.name].append(speeds[v.name] / speeds['base'])
    print(f'pass {p + 1}/{FLAGS.passes}: ' + ', '.join(f'{k} {s:.0f} tok/s' for k, s in speeds.items()), flush=True)
  c = config
  print(f'\n{c.model.method} d={c.model.d_model} E{c.model.enc_layers}D{c.model.dec_layers}, '
        f'{variants[0].n_params / 1e6:.2f}M params; {FLAGS.passes} passes x {FLAGS.steps} steps per variant\n')
  print('| variant | batch shapes | median step (s) | target tokens/s (median of passes) | padded tokens/s | '
        'CPU s/step | speed over base, per pass: median (min-max) | compile+warm-up (s) |')
  print('|---|---|---|---|---|---|---|---|')
  for v in variants:
    r = ratios[v.name]
    print(f'| {v.name} | {len(v.batches.shapes)} | {np.median(v.times):.3f} | {np.median(v.target_tokens):.0f} | '
          f'{np.median(v.padded):.0f} | {np.median(v.cpu):.2f} | {np.median(r):.2f}x ({min(r):.2f}-{max(r):.2f}) | '
          f'{v.compile_s:.1f} |')
  tunables = os.environ.get('GLIBC_TUNABLES', '(none)')
  print(f'\nmachine: {machine()}; GLIBC_TUNABLES={tunables}')


if __name__ == '__main__':
  cli.define_flags(RECIPE_FLAGS)
  cli.run_command(main)
