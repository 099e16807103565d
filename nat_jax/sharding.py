"""Device mesh (`data`, `model`) and logical axis rules: data parallel + tensor parallel over heads/FFN.

The same code runs on 1 CPU, on 8 fake CPU devices
(XLA_FLAGS=--xla_force_host_platform_device_count=8), on GPUs and on TPU pods.
"""
from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from nat_jax.errors import ConfigError

# Logical parameter/activation axis -> mesh axis. Attention heads and FFN hidden units are split
# over `model`; everything else is replicated across `model` and batch rows split over `data`.
LOGICAL_AXIS_RULES = (
    ('batch', 'data'),
    ('heads', 'model'),
    ('mlp', 'model'),
    ('kv', None),
    ('embed', None),
    ('vocab', None),
    ('relpos', None),
)


def make_mesh(model_parallel: int = 1) -> Mesh:
  """Mesh over all devices (all processes) with axes ('data', 'model')."""
  devices = jax.devices()
  if model_parallel < 1 or len(devices) % model_parallel:
    raise ConfigError(f'mesh.model_parallel={model_parallel} must divide the device count {len(devices)}.')
  grid = np.asarray(devices).reshape(len(devices) // model_parallel, model_parallel)
  return Mesh(grid, ('data', 'model'))


def batch_sharding(mesh: Mesh) -> NamedSharding:
  """Batch rows over `data`, everything else replicated."""
  return NamedSharding(mesh, P('data'))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def global_batch(local: dict[str, np.ndarray], mesh: Mesh, leading_axes: int = 0) -> dict[str, jax.Array]:
  """Process-local rows -> global arrays sharded over `data` (rows on axis `leading_axes`)."""
  spec = P(*([None] * leading_axes), 'data')
  sharding = NamedSharding(mesh, spec)
  return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in local.items()}
