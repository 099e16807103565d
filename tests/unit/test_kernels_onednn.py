"""The oneDNN int8 product (nat_jax.kernels.onednn) against XLA's int8 dot, bit for bit (int32 sums), at the
row counts decoding meets and at odd sizes; one packed copy for every row count; the setting's resolution
and its error where the kernel cannot run. On a Linux x86-64 machine with VNNI the kernel must be there:
the README's install builds it."""
import os
import platform
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nat_jax.errors import ConfigError
from nat_jax.kernels import onednn

needs_kernel = pytest.mark.skipif(onednn.unavailable() is not None, reason=f'{onednn.unavailable()}')


def test_the_install_built_the_kernel_where_it_can_run():
  if sys.platform == 'linux' and platform.machine() == 'x86_64' and onednn._cpu_has_vnni():
    assert onednn.unavailable() is None
    assert onednn.resolve('auto') == 'onednn'
  else:
    assert onednn.resolve('auto') == 'xla'


@needs_kernel
@pytest.mark.parametrize('k, n', [(512, 2048), (37, 101), (129, 3), (1, 16)])
def test_the_packed_product_equals_xlas_int8_dot_bit_for_bit(k, n):
  rng = np.random.default_rng(k * n)
  w = rng.integers(-127, 128, (k, n), dtype=np.int8)
  w[0, :] = 127  # the extremes: sums far past 16 bits (a saturating kernel fails here)
  packed = onednn.pack(w)
  np.testing.assert_array_equal(onednn.pack(np.ascontiguousarray(w.T), transposed=True), packed)
  product = jax.jit(onednn.matmul, static_argnums=2)
  for m in (1, 2, 3, 8, 64, 257):
    x = rng.integers(-127, 128, (m, k), dtype=np.int8)
    x[0, :] = -127
    want = jax.lax.dot_general(jnp.asarray(x), jnp.asarray(w), (((1,), (0,)), ((), ())),
                               preferred_element_type=jnp.int32)
    got = product(jnp.asarray(x), packed, n)
    assert got.dtype == jnp.int32 and got.shape == (m, n)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want), err_msg=f'{m} rows')


@needs_kernel
def test_a_product_inside_a_jitted_loop_equals_the_loop_over_xlas_dot():
  rng = np.random.default_rng(3)
  w = rng.integers(-127, 128, (64, 64), dtype=np.int8)
  packed = jnp.asarray(onednn.pack(w))

  def run(product):
    def body(_, x):  # s8[2, 64] -> s8[2, 64]: the product's low byte, fed back
      return (product(x) % 251 - 125).astype(jnp.int8)
    return jax.jit(lambda x: jax.lax.fori_loop(0, 5, body, x))(jnp.asarray(rng.integers(-9, 9, (2, 64), np.int8)))

  rng = np.random.default_rng(3)
  a = run(lambda x: onednn.matmul(x, packed, 64))
  rng = np.random.default_rng(3)
  b = run(lambda x: jax.lax.dot_general(x, jnp.asarray(w), (((1,), (0,)), ((), ())), preferred_element_type=jnp.int32))
  np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_batch_one_products_run_on_one_thread_and_large_ones_on_every_core():
  """Batch-1 products stay on the thread XLA calls from; from THREADED_WORK multiply-adds every core works."""
  cores = max(1, os.cpu_count() or 1)
  assert [onednn.threads_for(m, 512, 2048) for m in (1, 2, 8, 31)] == [1, 1, 1, 1]  # batch 1 at d=512
  assert onednn.threads_for(64, 512, 512) == 1  # attention's projections at batch 64
  assert [onednn.threads_for(64, 512, 2048), onednn.threads_for(64, 2048, 512)] == [cores, cores]  # the FFN


def test_the_setting_resolves_or_says_why_the_kernel_cannot_run(monkeypatch):
  monkeypatch.setattr(onednn, 'unavailable', lambda: 'this CPU has no VNNI int8 instructions')
  assert onednn.resolve('auto') == 'xla' and onednn.resolve('xla') == 'xla'
  with pytest.raises(ConfigError, match='int8_kernel=onednn cannot run here: this CPU has no VNNI.*auto or xla'):
    onednn.resolve('onednn')
  with pytest.raises(ConfigError, match='int8_kernel must be one of auto, onednn, xla'):
    onednn.resolve('fast')
  monkeypatch.setattr(onednn, 'unavailable', lambda: None)
  assert onednn.resolve('auto') == 'onednn' and onednn.resolve('xla') == 'xla'


def test_a_cpu_without_vnni_is_not_offered_the_kernel(tmp_path):
  flags = 'flags\t\t: fpu sse2 avx2 avx512f avx512bw\n'
  (tmp_path / 'cpuinfo').write_text(flags)
  assert not onednn._cpu_has_vnni(str(tmp_path / 'cpuinfo'))
  (tmp_path / 'cpuinfo').write_text(flags.replace('avx2', 'avx2 avx512_vnni'))
  assert onednn._cpu_has_vnni(str(tmp_path / 'cpuinfo'))
  assert not onednn._cpu_has_vnni(str(tmp_path / 'missing'))


@needs_kernel
def test_products_called_at_once_from_several_threads_are_each_exact():
  """XLA runs independent products at once from its threads (and a server from its own): every call brings its
  own working memory (scratchpad), so none reads another's. Large row counts: oneDNN's buffers are in use."""
  import threading
  rng = np.random.default_rng(11)
  cases = []
  for m, k, n in ((1920, 512, 512), (1920, 512, 2048), (64, 2048, 512), (300, 512, 4000)):
    w = rng.integers(-127, 128, (k, n), dtype=np.int8)
    x = rng.integers(-127, 128, (m, k), dtype=np.int8)
    cases.append((jnp.asarray(x), jnp.asarray(onednn.pack(w)), n, x.astype(np.int64) @ w.astype(np.int64)))
  product = jax.jit(onednn.matmul, static_argnums=2)
  for x, packed, n, _ in cases:
    product(x, packed, n)  # compiled before the threads start
  wrong = []

  def work(i):
    for r in range(6):
      x, packed, n, want = cases[(i + r) % len(cases)]
      if not np.array_equal(np.asarray(product(x, packed, n)), want):
        wrong.append((i, r))

  threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert wrong == []
