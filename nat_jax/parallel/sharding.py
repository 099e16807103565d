"""Device mesh (`data`, `model`) and logical axis rules: data parallel + tensor parallel over heads/FFN/vocabulary.

The same code runs on 1 CPU, on 8 fake CPU devices
(XLA_FLAGS=--xla_force_host_platform_device_count=8), on GPUs, on TPU pods, and on the devices of
an accelerator we do not have (nat_jax.aot compiles for a TPU or GPU topology's devices).
"""
from __future__ import annotations

from typing import Optional, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from nat_jax.errors import ConfigError

# Logical parameter/activation axis -> mesh axis. Attention heads, FFN hidden units and the
# vocabulary (the shared embedding / output projection) are split over `model`; everything else is
# replicated across `model`, and batch rows are split over `data`.
LOGICAL_AXIS_RULES = (
    ('batch', 'data'),
    ('heads', 'model'),
    ('mlp', 'model'),
    ('vocab', 'model'),
    ('kv', None),
    ('embed', None),
    ('relpos', None),
)


def make_mesh(model_parallel: int = 1, devices: Optional[Sequence] = None) -> Mesh:
  """Mesh with axes ('data', 'model') over `devices` (default: all devices of all processes)."""
  devices = list(jax.devices() if devices is None else devices)
  if model_parallel < 1 or len(devices) % model_parallel:
    raise ConfigError(f'mesh.model_parallel={model_parallel} must divide the device count {len(devices)}.')
  grid = np.asarray(devices).reshape(len(devices) // model_parallel, model_parallel)
  return Mesh(grid, ('data', 'model'))


def fit_spec(spec: P, shape: Sequence[int], mesh: Mesh) -> P:
  """`spec` with every mesh axis dropped from a dimension it does not divide (that dimension is
  then replicated): a vocabulary of 7,999 pieces stays whole on a 2-way `model` axis."""
  fitted = []
  for dim, axes in zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec))):
    names = axes if isinstance(axes, tuple) else (axes,) if axes is not None else ()
    size = int(np.prod([mesh.shape[a] for a in names])) if names else 1
    fitted.append(axes if dim % size == 0 else None)
  return P(*fitted)


def batch_sharding(mesh: Mesh) -> NamedSharding:
  """Batch rows over `data`, everything else replicated."""
  return NamedSharding(mesh, P('data'))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def rows_sharding(mesh: Mesh, rows: int) -> NamedSharding:
  """Rows over `data` when they divide evenly, else replicated (a batch of 1 on 4 devices)."""
  return batch_sharding(mesh) if rows % mesh.shape['data'] == 0 else replicated(mesh)


def place_rows(array: np.ndarray, mesh: Mesh) -> jax.Array:
  """A host array that every process holds whole (e.g. an inference batch) -> a global array with
  its rows over `data` (`rows_sharding`), so each device decodes its own rows."""
  array = np.asarray(array)
  return jax.make_array_from_callback(array.shape, rows_sharding(mesh, array.shape[0]), lambda index: array[index])


def global_batch(local: dict[str, np.ndarray], mesh: Mesh, leading_axes: int = 0) -> dict[str, jax.Array]:
  """Process-local rows -> global arrays sharded over `data` (rows on axis `leading_axes`)."""
  spec = P(*([None] * leading_axes), 'data')
  sharding = NamedSharding(mesh, spec)
  return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in local.items()}
