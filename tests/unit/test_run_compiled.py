"""nat_jax.run.compiled: the process's compile count and memory maps, read from /proc and jax's own events;
compiled programs dropped near the kernel's map limit, warm-ups stopped at half of it."""
import gc
import sys

import jax
import jax.numpy as jnp
import pytest

from nat_jax.run import compiled

linux = pytest.mark.skipif(not sys.platform.startswith('linux'), reason='reads /proc')


@pytest.fixture(autouse=True)
def settled():
  """The programs earlier tests compiled, dropped and collected first: their maps are not freed (by the garbage
  collector) in the middle of a count here, and their number does not bring the process near the limit."""
  jax.clear_caches()
  gc.collect()


def fresh_function():
  """A jitted function no other call compiled (a new function object: a cache of its own)."""
  return jax.jit(lambda x: jnp.tanh(x @ x.T).sum(0))


@linux
def test_compiling_counts_a_compile_and_adds_memory_maps():
  f = fresh_function()
  compiles, (maps, limit) = compiled.compiles(), compiled.memory_maps()
  for rows in (3, 5, 7):
    f(jnp.ones((rows, 16))).block_until_ready()
  after, _ = compiled.memory_maps()
  assert compiled.compiles() - compiles >= 3  # one program per shape (at least)
  assert after > maps and limit > after       # XLA:CPU maps each program's code
  assert limit == int(open('/proc/sys/vm/max_map_count').read())


def test_near_the_limit_every_compiled_program_is_dropped_once(monkeypatch):
  f = fresh_function()
  f(jnp.ones((2, 8))).block_until_ready()
  compiled.keep_maps_in_bounds()  # looks once after the compile: the real maps, far from the limit here
  assert f._cache_size() == 1
  clears = compiled.cache_clears()
  monkeypatch.setattr(compiled, 'memory_maps', lambda: (int(compiled.CLEAR_AT * 1000) + 1, 1000))
  compiled.keep_maps_in_bounds()  # nothing compiled since it looked: it does not look again
  assert f._cache_size() == 1 and compiled.cache_clears() == clears
  f(jnp.ones((3, 8))).block_until_ready()  # a compile: it looks, finds the maps over CLEAR_AT, drops all
  compiled.keep_maps_in_bounds()
  assert f._cache_size() == 0 and compiled.cache_clears() == clears + 1
  assert float(f(jnp.ones((3, 8)))[0]) == pytest.approx(3 * float(jnp.tanh(8.0)))  # compiles again on use
  monkeypatch.setattr(compiled, 'memory_maps', lambda: (int(compiled.CLEAR_AT * 1000), 1000))
  compiled.keep_maps_in_bounds()  # at CLEAR_AT, not past it
  assert f._cache_size() == 1 and compiled.cache_clears() == clears + 1


@pytest.mark.parametrize('maps,limit,room', [(499, 1000, True), (500, 1000, False), (70000, 65530, False),
                                              (10, 0, True)])  # limit 0: no /proc, no bound known
def test_warm_up_room_is_half_the_limit(monkeypatch, maps, limit, room):
  monkeypatch.setattr(compiled, 'memory_maps', lambda: (maps, limit))
  assert compiled.room_to_warm_up() is room
