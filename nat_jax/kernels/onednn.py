"""int8 matrix products through oneDNN, called by XLA:CPU as an FFI custom call (nat_jax/kernels/int8_onednn.cc).

XLA:CPU sends small int8 dots to a kernel that streams the weights at a fraction of what the core can read
(docs/lab-notes/2026-12-04-int8-kernel.md). oneDNN's int8 matmul reads them from its own blocked layout:
each weight matrix is packed into it once, at load (`pack`), and every product afterwards is
`matmul(x, packed, n)`: int8 rows times the packed weight, accumulated exactly in int32, so it equals
`jax.lax.dot_general(x, w, preferred_element_type=int32)` bit for bit. One packed copy serves every row count.

Where it runs: Linux on x86-64 CPUs with VNNI int8 instructions (AVX512-VNNI, AVX-VNNI or AMX; without them
oneDNN's int8 kernels may saturate 16-bit sums, and the product would no longer be exact), with the library
built at install (setup.py) and oneDNN's runtime (the `onednn-cpu-gomp` wheel, a dependency on Linux x86-64)
present. `unavailable()` names what is missing; `resolve('auto')` then takes XLA's dot.

Threads (`threads_for`): oneDNN's GNU OpenMP build would start a team of spinning threads beside XLA's own
pool. A product of fewer than THREADED_WORK multiply-adds (every product of batch-1 decoding, and attention's
projections at batch 64 and d=512) runs on the one thread XLA calls it from; a larger one (the feed-forward
and output products at batch 64) on as many threads as the machine has cores: starting a thread team costs
a small product more than it saves (the threshold is measured in docs/lab-notes/2026-12-04-int8-kernel.md).
OMP_WAIT_POLICY=PASSIVE (set before the library loads, unless the environment says otherwise) puts those
threads to sleep between products instead of spinning against XLA's.
"""
from __future__ import annotations

import ctypes
import functools
import importlib.metadata
import importlib.util
import os
import platform
import sys
import threading

import numpy as np

from nat_jax.errors import ConfigError

CHOICES = ('auto', 'onednn', 'xla')  # the setting: the kernel where it runs, the kernel (or an error), XLA's dot
KERNEL_NAME = 'nat_int8_matmul'
THREADED_WORK = 1 << 25  # multiply-adds from which a product runs on every core (see the module docstring)
VNNI_FLAGS = ('avx512_vnni', 'avx_vnni', 'amx_int8')  # /proc/cpuinfo names of the exact int8 instructions
RUNTIME_PACKAGE = 'onednn-cpu-gomp'
EXTENSION = '_int8_onednn'  # the library setup.py builds (a shared library that Python never imports)

_lock = threading.Lock()
pack_count = 0  # weight matrices packed in this process (tests count them: once per matrix, at load)


def resolve(choice: str) -> str:
  """The product a setting selects: 'onednn' or 'xla'. 'auto': the kernel where it can run, else XLA's dot
  (silently: that is what auto means); 'onednn' where it cannot run: ConfigError saying why and what to do."""
  if choice not in CHOICES:
    raise ConfigError(f'int8_kernel must be one of {", ".join(CHOICES)}, got {choice!r}.')
  if choice == 'xla':
    return 'xla'
  problem = unavailable()
  if problem is None:
    return 'onednn'
  if choice == 'auto':
    return 'xla'
  raise ConfigError(f'int8_kernel=onednn cannot run here: {problem}. Use --int8_kernel=auto or xla (XLA\'s int8 '
                    'dot: the same results).')


def unavailable() -> str | None:
  """Why the kernel cannot run in this process, or None when it can."""
  try:
    _library()
  except _Unavailable as e:
    return str(e)
  return None


def packed_bytes(k: int, n: int) -> int:
  """Bytes of a [k, n] int8 weight in the packed layout (the blocks and oneDNN's compensation sums)."""
  size = _library().nat_int8_packed_bytes(k, n)
  if size < 0:
    raise ConfigError(f'oneDNN has no int8 product for a [{k}, {n}] weight here; use int8_kernel=xla.')
  return int(size)


def pack(q: np.ndarray, transposed: bool = False) -> np.ndarray:
  """An int8 weight [k, n] (or [n, k] when `transposed`: an embedding used as the output projection) ->
  u8[packed_bytes(k, n)], the layout `matmul` reads. Done on the host, once per weight, at load."""
  global pack_count
  q = np.ascontiguousarray(q, dtype=np.int8)
  n, k = q.shape if transposed else q.shape[::-1]
  out = np.zeros(packed_bytes(k, n), np.uint8)
  if _library().nat_int8_pack(q.ctypes.data, k, n, int(transposed), out.ctypes.data):
    raise ConfigError(f'oneDNN could not pack a [{k}, {n}] int8 weight; use int8_kernel=xla.')
  with _lock:
    pack_count += 1
  return out


def threads_for(m: int, k: int, n: int) -> int:
  """OpenMP threads of a [m, k] x [k, n] product: one below THREADED_WORK multiply-adds, else one per core."""
  return 1 if m * k * n < THREADED_WORK else max(1, os.cpu_count() or 1)


def matmul(x, packed, n: int, threads: int = 0):
  """s8[m, k] times the packed int8 weight [k, n] -> s32[m, n] (exact), as an XLA custom call on `threads`
  OpenMP threads (0: threads_for(m, k, n)). Under vmap (drafted decoding's rows) the mapped rows join the
  product's rows: one call, not one per row."""
  _library()  # registers the target with XLA (once)
  return _product(n, threads)(x, packed)


@functools.cache
def _product(n: int, threads: int):
  import jax
  import jax.numpy as jnp

  @jax.custom_batching.custom_vmap
  def product(x, packed):
    call = jax.ffi.ffi_call(KERNEL_NAME, jax.ShapeDtypeStruct((x.shape[0], n), jnp.int32))
    return call(x, packed, threads=np.int64(threads or threads_for(*x.shape, n)))

  @product.def_vmap
  def _rows(axis_size, in_batched, x, packed):  # x [B, m, k] where batched (the mapped axis first)
    x_batched, packed_batched = in_batched
    if packed_batched:  # a weight per mapped item (not met in decoding): one product each
      x = x if x_batched else jnp.broadcast_to(x, (axis_size, *x.shape))
      return jax.lax.map(lambda xp: product(*xp), (x, packed)), True
    return product(x.reshape(-1, x.shape[-1]), packed).reshape(*x.shape[:-1], n), x_batched

  return product


class _Unavailable(Exception):
  pass


@functools.cache
def _library() -> ctypes.CDLL:
  """The kernel library, loaded with oneDNN's runtime and registered with XLA (once per process);
  _Unavailable naming what is missing."""
  if sys.platform != 'linux' or platform.machine() not in ('x86_64', 'AMD64'):
    raise _Unavailable(f'the oneDNN kernel is built for Linux on x86-64, this is {sys.platform} on '
                       f'{platform.machine()}')
  if not _cpu_has_vnni():
    raise _Unavailable(f'this CPU has no VNNI int8 instructions ({", ".join(VNNI_FLAGS)}), without which oneDNN\'s '
                       'int8 sums may saturate')
  built = importlib.util.find_spec(f'{__package__}.{EXTENSION}')  # where the install put it (editable or not)
  if built is None or not built.origin:
    raise _Unavailable('nat_jax was installed without its oneDNN kernel (setup.py builds it when pip installs '
                       'nat_jax with a C++ compiler: reinstall with the README\'s command and read its build output)')
  runtime = _runtime_path()
  os.environ.setdefault('OMP_WAIT_POLICY', 'PASSIVE')  # before libgomp starts: no thread spins beside XLA's
  try:
    ctypes.CDLL(runtime, mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(built.origin)
  except OSError as e:
    raise _Unavailable(f'the oneDNN kernel does not load ({e})') from None
  lib.nat_int8_packed_bytes.restype = ctypes.c_int64
  lib.nat_int8_packed_bytes.argtypes = [ctypes.c_int64, ctypes.c_int64]
  lib.nat_int8_pack.restype = ctypes.c_int
  lib.nat_int8_pack.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int, ctypes.c_void_p]
  import jax
  jax.ffi.register_ffi_target(KERNEL_NAME, jax.ffi.pycapsule(lib.NatInt8Matmul), platform='cpu')
  return lib


def _runtime_path() -> str:
  """libdnnl.so.3 of the onednn-cpu-gomp wheel (installed into the environment's lib/)."""
  try:
    files = importlib.metadata.files(RUNTIME_PACKAGE) or []
  except importlib.metadata.PackageNotFoundError:
    files = []
  found = [str(f.locate()) for f in files if f.name == 'libdnnl.so.3']
  if not found or not os.path.exists(found[0]):
    raise _Unavailable(f'oneDNN\'s runtime is not installed (pip install {RUNTIME_PACKAGE}, which nat_jax '
                       'requires on Linux x86-64)')
  return os.path.realpath(found[0])


def _cpu_has_vnni(cpuinfo: str = '/proc/cpuinfo') -> bool:
  try:
    with open(cpuinfo, encoding='utf-8', errors='replace') as f:
      for line in f:
        if line.startswith('flags'):
          return any(flag in line.split() for flag in VNNI_FLAGS)
  except OSError:
    pass
  return False
