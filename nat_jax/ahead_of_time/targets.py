"""Accelerators we compile for without having them: TPU slices and GPU nodes as compile-only devices.

`get_target('v5e:2x2')` gives the devices of a TPU v5e slice of 2 x 2 chips, `get_target('h100x8')` those
of eight H100 SXM cards, and with them the chip's figures the report and the roofline need. The TPU
compiler comes with libtpu, the GPU compiler with the CUDA PJRT plugin (`pip install -e .[aot]`);
neither needs the device. Names:

  v5e:2x2, v5e:4x4, v6e:2x2, v5p:2x2x1, v5p:2x2x2, v4:2x2x2, v3:2x2   a TPU slice (`<chip>:<topology>`; v4 and
                                                                    v5p: one device per chip, megacore)
  <TPU name>/<n>                                                     n such slices (multi-slice)
  h100, h100x8, a100, a100x8                                         GPU cards of one node (1 when no `xN`)

Chip figures (per device; a v3 device is one of its chip's two cores), with their sources:
  memory       what the compiler lets a program use: for a TPU the `available HBM` the TPU compiler
               reports when a program does not fit (measured with libtpu 0.0.42.1 on 2026-11-25:
               v5e 15.75, v6e 31.25, v4 30.75, v5p 95.74, v3 15.48 GiB), for a GPU the card's memory
               (the target description's device_memory_size).
  peak_flops   dense bf16 matrix FLOP/s: Google Cloud TPU documentation (v3 123 T per chip, v4 275 T,
               v5e 197 T, v5p 459 T, v6e 918 T); NVIDIA datasheets (H100 SXM 989 T dense, A100 312 T).
  bandwidth    HBM bytes/s: the same sources (v3 900 GB/s per chip, v4 1,200, v5e 819, v5p 2,765, v6e 1,640;
               H100 SXM 3.35 TB/s, A100 80 GB 2.04 TB/s as in the target descriptions; H200 4.8 TB/s).
  overhead_s   an assumed fixed cost per sequential device call (a decoding step, a pass): 10 us on a
               TPU, 20 us on a GPU (kernel launches and the loop's condition read back). Not measured here:
               the roofline projection (benchmarks/projection/roofline.py) states it next to every figure.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import re
from typing import Any, Optional

from nat_jax.errors import ConfigError

GIB = 2 ** 30
SPECS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'gpu_specs')
INSTALL_HINT = 'pip install -e ".[aot]"  (libtpu and the CUDA PJRT plugin matching the installed jax)'


@dataclasses.dataclass(frozen=True)
class Chip:
  name: str
  platform: str        # 'tpu' or 'gpu' (the platform decoders choose their implementation by)
  memory: float        # bytes a program may use per device
  peak_flops: float    # dense bf16 FLOP/s per device
  bandwidth: float     # HBM bytes/s per device
  overhead_s: float    # assumed cost of one sequential device call
  topology_kw: tuple = ()  # extra arguments of get_topology_desc (v4: megacore)
  spec_file: str = ''      # GPU: the target description in gpu_specs/


CHIPS = {
    'v3': Chip('TPU v3 (one core)', 'tpu', 15.48 * GIB, 123e12 / 2, 900e9 / 2, 10e-6),
    'v4': Chip('TPU v4 (megacore)', 'tpu', 30.75 * GIB, 275e12, 1200e9, 10e-6, (('chip_config_name', 'megacore'),)),
    'v5e': Chip('TPU v5e', 'tpu', 15.75 * GIB, 197e12, 819e9, 10e-6),
    'v5p': Chip('TPU v5p', 'tpu', 95.74 * GIB, 459e12, 2765e9, 10e-6),
    'v6e': Chip('TPU v6e', 'tpu', 31.25 * GIB, 918e12, 1640e9, 10e-6),
    'h100': Chip('NVIDIA H100 SXM 80 GB', 'gpu', 84942979072, 989e12, 3.35232e12, 20e-6, spec_file='h100_sxm.txtpb'),
    'a100': Chip('NVIDIA A100 SXM 80 GB', 'gpu', 85100068864, 312e12, 2.03904e12, 20e-6,
                 spec_file='a100_sxm_80.txtpb'),
    # no target description: a roofline for calls timed on a lent H200 (benchmarks/projection/unit_speed.py), not a
    # compile target; 141 GB (nvidia-smi: 143,771 MiB), 989 T dense bf16 and 4.8 TB/s (NVIDIA datasheet)
    'h200': Chip('NVIDIA H200 SXM 141 GB', 'gpu', 143771 * 2 ** 20, 989e12, 4.8e12, 20e-6),
}
TPU_NAME = re.compile(r'^(v3|v4|v5e|v5p|v6e):(\d+(?:x\d+){1,2})(?:/(\d+))?$')
GPU_NAME = re.compile(r'^(h100|a100)(?:x(\d+))?$')


@dataclasses.dataclass(frozen=True)
class Target:
  name: str        # as given, e.g. 'v5e:2x2'
  chip: Chip
  devices: tuple   # compile-only devices, one per chip (per core on v3), in mesh order

  @property
  def platform(self) -> str:
    return self.chip.platform

  def describe(self) -> str:
    return f'{self.name}: {len(self.devices)} x {self.chip.name}, {self.chip.memory / GIB:.2f} GiB usable per device'


def known_targets() -> str:
  return 'v5e:2x2, v5e:4x4, v6e:2x2, v5p:2x2x1, v5p:2x2x2, v4:2x2x2, v3:2x2 (TPU slices, "/<n>" for n slices), ' \
         'h100, h100x8, a100, a100x8 (GPU cards of one node)'


def _compiler_missing(platform: str, error: Exception) -> ConfigError:
  what = 'libtpu' if platform == 'tpu' else 'the CUDA PJRT plugin (jax-cuda12-plugin, jax-cuda12-pjrt)'
  return ConfigError(f'no {platform.upper()} compiler here: {what} is not installed or does not load '
                     f'({str(error).splitlines()[0][:200]}); install it with {INSTALL_HINT}.')


@functools.lru_cache(maxsize=None)
def _tpu_devices(chip: str, topology: str, slices: int, kw: tuple) -> tuple:
  from jax.experimental import topologies
  os.environ.setdefault('ALLOW_MULTIPLE_LIBTPU_LOAD', '1')  # another process (a test, a training) may hold libtpu
  extra = dict(kw, **({'num_slices': slices} if slices > 1 else {}))
  try:
    return tuple(topologies.get_topology_desc(platform='tpu', topology_name=f'{chip}:{topology}', **extra).devices)
  except (RuntimeError, ImportError, ValueError) as e:
    if 'topology' in str(e).lower() and 'libtpu' not in str(e).lower():
      raise ConfigError(f'TPU topology {chip}:{topology} is not one libtpu knows: '
                        f'{str(e).splitlines()[0][:200]}') from e
    raise _compiler_missing('tpu', e) from e


@functools.lru_cache(maxsize=None)
def _gpu_devices(spec_file: str, count: int) -> tuple:
  from jax.experimental import topologies
  os.environ.setdefault('JAX_SKIP_CUDA_CONSTRAINTS_CHECK', '1')  # no CUDA libraries are needed to compile
  with open(os.path.join(SPECS_DIR, spec_file)) as f:
    spec = f.read()
  try:
    return tuple(topologies.get_topology_desc(platform='cuda', topology_name='', topology=f'1x1x{count}',
                                              target_config=spec).devices)
  except (RuntimeError, ImportError, NotImplementedError) as e:
    raise _compiler_missing('gpu', e) from e


def get_target(name: str) -> Target:
  """The compile-only devices and chip figures of a target name (module docstring); ConfigError for an
  unknown name or a compiler that is not installed (naming how to install it)."""
  name = name.strip().lower()
  tpu, gpu = TPU_NAME.match(name), GPU_NAME.match(name)
  if tpu:
    chip = CHIPS[tpu.group(1)]
    devices = _tpu_devices(tpu.group(1), tpu.group(2), int(tpu.group(3) or 1), chip.topology_kw)
  elif gpu:
    chip = CHIPS[gpu.group(1)]
    count = int(gpu.group(2) or 1)
    if not 1 <= count <= 16:
      raise ConfigError(f'--target={name}: 1 to 16 GPUs of one node, got {count}.')
    devices = _gpu_devices(chip.spec_file, count)
  else:
    raise ConfigError(f'--target={name!r}: not a target; known: {known_targets()}.')
  return Target(name, chip, devices)


def compiler_available(platform: str) -> Optional[str]:
  """None when the compiler for `platform` ('tpu' or 'gpu') loads here, else why not (for test skips)."""
  try:
    get_target('v5e:2x2' if platform == 'tpu' else 'h100')
  except ConfigError as e:
    return str(e)
  return None


def shard_bytes(struct: Any) -> int:
  """Bytes one device holds of an abstract array with a sharding (ShapeDtypeStruct)."""
  shape = struct.sharding.shard_shape(struct.shape) if getattr(struct, 'sharding', None) is not None else struct.shape
  size = 1
  for d in shape:
    size *= d
  return size * struct.dtype.itemsize
