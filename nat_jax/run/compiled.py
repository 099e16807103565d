"""What this process holds compiled: a count of its XLA compiles, and its memory maps kept under the
kernel's limit.

XLA:CPU loads each compiled program's machine code into memory maps of its own (tens for a small
function, hundreds for a decoder with several loops). Linux caps a process's maps at `vm.max_map_count`
(65,530 by default); at the cap LLVM cannot map the next program's code and the process aborts ("LLVM
compilation error: Cannot allocate memory", then a segfault). A long-lived process that meets many
shapes, such as a server warming up every (rows, source width) shape, reaches it
(measured: docs/lab-notes/2026-11-26-serving.md). So:

- `keep_maps_in_bounds()`, called before each decoded batch (translate_texts), drops every compiled
  program (`jax.clear_caches()`; they compile again on use, from the persistent cache where one is on)
  once the maps pass CLEAR_AT of the limit; it reads /proc only after a compile happened since it last
  looked, so a warm process pays an integer compare.
- `room_to_warm_up()` tells warm-ups to stop at WARM_UP_UNTIL of the limit, leaving the rest for the
  shapes traffic brings.

Raising the limit (`sysctl -w vm.max_map_count=262144`) lets a process keep more compiled.
"""
from __future__ import annotations

import threading

import jax

from nat_jax.errors import log

COMPILE_EVENT = '/jax/core/compile/backend_compile_duration'
CLEAR_AT = 0.85       # of vm.max_map_count: drop every compiled program before the next batch
WARM_UP_UNTIL = 0.5   # of vm.max_map_count: warm-ups stop compiling here

_lock = threading.Lock()
_state = {'compiles': 0, 'clears': 0, 'checked_at': -1, 'listening': False}


def _listen(name: str, seconds: float, **kwargs):
  if name == COMPILE_EVENT:
    _state['compiles'] += 1


def watch():
  """Count this process's XLA backend compiles from now on (idempotent)."""
  with _lock:
    if not _state['listening']:
      jax.monitoring.register_event_duration_secs_listener(_listen)
      _state['listening'] = True


def compiles() -> int:
  """XLA backend compiles since `watch()` was first called."""
  watch()
  return _state['compiles']


def cache_clears() -> int:
  """How often keep_maps_in_bounds dropped every compiled program in this process."""
  return _state['clears']


def memory_maps() -> tuple[int, int]:
  """(memory maps this process holds, the kernel's vm.max_map_count); (0, 0) where /proc has neither."""
  try:
    with open('/proc/sys/vm/max_map_count') as f:
      limit = int(f.read())
    with open('/proc/self/maps', 'rb') as f:
      return f.read().count(b'\n'), limit
  except (OSError, ValueError):
    return 0, 0


def room_to_warm_up() -> bool:
  """Whether a warm-up may compile another program: the maps are under WARM_UP_UNTIL of the limit."""
  count, limit = memory_maps()
  return not limit or count < WARM_UP_UNTIL * limit


def keep_maps_in_bounds():
  """Drop every compiled program of the process (jax.clear_caches) when its memory maps passed CLEAR_AT of
  the kernel's limit; looks only when something compiled since it last looked."""
  seen = compiles()
  with _lock:
    if seen == _state['checked_at']:
      return
    _state['checked_at'] = seen
  count, limit = memory_maps()
  if limit and count > CLEAR_AT * limit:
    log.warning('this process holds %d memory maps, near the kernel limit vm.max_map_count=%d (XLA:CPU maps each '
                'compiled program; at the limit the process aborts): dropping every compiled program, they '
                'compile again when used. To keep more compiled, raise the limit: sysctl -w '
                'vm.max_map_count=262144.', count, limit)
    jax.clear_caches()
    with _lock:
      _state['clears'] += 1
