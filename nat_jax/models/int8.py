"""int8 inference: weights quantized once at load, activations per row at run time, int8 x int8 -> int32 dots.

A weight matrix W [in..., out...] becomes q = round(W / s) in int8 with one float32 scale per output
channel, s = max |W| over the input axes / 127 (symmetric). An activation row x [in...] is quantized the
same way at run time, x ~ sx * xq, and a product is sx * s * (xq . q), the dot accumulated exactly in
int32. The embedding holds one scale per token row: a lookup gathers int8 rows and scales them, the tied
output projection is a dot against the same rows. LayerNorm, softmax, attention over the KV cache and
the DAG's transition head stay float32.

CPU kernels decide the shapes (docs/lab-notes/2026-11-28-int8.md): from two rows up an int8 x int8 dot runs
natively (YNNPACK), while XLA:CPU widens the whole int8 weight for a one-row dot, every step (or once,
hoisted out of the decode loop, which then carries a 4x larger copy). So a dot of one row is padded to two
(`MIN_ROWS`). The result is the same, every row being quantized and accumulated on its own.
Flax's Dense promotes its kernel to the compute dtype before any dot hook (a float32 copy of the weight:
the slow path), and a quantization library (qwix) leaves one-row dots as they come: so these few lines.

Two products compute the same int32 sums (PRODUCTS): 'xla', XLA's int8 dot over the int8 matrix, and
'onednn', a packed int8 kernel called through jax.ffi (nat_jax.kernels.onednn, x86-64 CPUs with VNNI), which
reads each weight from a u8 blob packed once at load (`quantize_params`) in place of the int8 matrix, and
needs no row padding. The layout of the params follows the product: 'kernel' int8 [in..., out...] or u8[bytes];
the embedding keeps its int8 table for lookups and adds 'embedding_packed' for the output projection. Either
way a self-attention's query, key and value matrices are one matrix (FUSED), one product per step.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from nat_jax.kernels import onednn
from nat_jax.models.layers import FloatWeights

QMAX = 127.0
MIN_ROWS = 2  # a dot of fewer rows is padded to this many: the native int8 kernel needs two
PRODUCTS = ('xla', 'onednn')  # how an int8 product is computed (module docstring); '' = float weights


def quantize(w: jax.Array, contract: Sequence[int]) -> tuple[jax.Array, jax.Array]:
  """(q int8 [w.shape], scale f32 [w.shape without `contract`]): symmetric, one scale per output channel."""
  w = w.astype(jnp.float32)
  amax = jnp.max(jnp.abs(w), axis=tuple(contract), keepdims=True)
  scale = jnp.where(amax > 0, amax / QMAX, 1.0)
  q = jnp.clip(jnp.round(w / scale), -QMAX, QMAX).astype(jnp.int8)
  return q, jnp.squeeze(scale, axis=tuple(contract))


def quantize_rows(x: jax.Array) -> tuple[jax.Array, jax.Array]:
  """x f32[N, K] -> (int8 [N, K], scale f32[N, 1]): each row on its own scale."""
  q, scale = quantize(x, (1,))
  return q, scale[:, None]


def int8_matmul(x: jax.Array, q: jax.Array, scale: jax.Array, transposed: bool = False,
                min_rows: int = MIN_ROWS) -> jax.Array:
  """x f32[N, K] times the int8 matrix q ([K, M], or [M, K] when `transposed`) with per-column scales
  scale f32[M] -> f32[N, M]; rows are padded to `min_rows` for XLA's dot and cut back after it. A u8 q is the
  matrix packed by nat_jax.kernels.onednn.pack (either way round): the oneDNN product, no padding."""
  n = x.shape[0]
  if q.dtype == jnp.uint8:
    xq, sx = quantize_rows(x)
    return onednn.matmul(xq, q, scale.shape[0]).astype(jnp.float32) * sx * scale  # the same exact int32 sums
  if n < min_rows:
    x = jnp.pad(x, ((0, min_rows - n), (0, 0)))
  elif n == 1:  # (min_rows 1, for measuring) XLA widens the weight for a one-row dot: fenced with the row, which
    q, x = jax.lax.optimization_barrier((q, x))  # changes every step, it cannot hoist that copy out of a loop
  xq, sx = quantize_rows(x)
  dims = (((1,), (1,)) if transposed else ((1,), (0,)), ((), ()))
  acc = jax.lax.dot_general(xq, q, dims, preferred_element_type=jnp.int32)  # [N', M] exact
  return (acc.astype(jnp.float32) * sx * scale)[:n]


def dense_general(x: jax.Array, q: jax.Array, scale: jax.Array, in_axes: int, min_rows: int = MIN_ROWS) -> jax.Array:
  """x [..., in...] (the last `in_axes` axes contracted) with q [in..., out...] (or its packed u8 blob: the
  output shape is then scale's) -> f32[..., out...]."""
  lead, inner = x.shape[:x.ndim - in_axes], x.shape[x.ndim - in_axes:]
  out = scale.shape
  flat = x.reshape(math.prod(lead), math.prod(inner)).astype(jnp.float32)
  matrix = q if q.dtype == jnp.uint8 else q.reshape(math.prod(inner), math.prod(out))
  return int8_matmul(flat, matrix, scale.reshape(-1), min_rows=min_rows).reshape(*lead, *out)


class Int8DenseGeneral(nn.Module):
  """nn.DenseGeneral's place at inference in int8: params 'kernel' int8 [in..., out...] and 'scale' f32
  [out...] (quantize_params fills them from a float run), optional float32 'bias'. `axis` counts the
  trailing input axes (1 or 2, as this project's layers use). product 'onednn': 'kernel' is the packed u8 blob."""
  features: tuple[int, ...]
  in_features: tuple[int, ...]
  kernel_axes: tuple[Any, ...]
  use_bias: bool = False
  dtype: Any = jnp.float32
  product: str = 'xla'  # a name in PRODUCTS

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    out_axes = self.kernel_axes[len(self.in_features):]
    if self.product == 'onednn':
      size = onednn.packed_bytes(math.prod(self.in_features), math.prod(self.features))
      kernel = self.param('kernel', nn.initializers.zeros, (size,), jnp.uint8)
    else:
      kernel = self.param('kernel', nn.with_logical_partitioning(nn.initializers.zeros, self.kernel_axes),
                          (*self.in_features, *self.features), jnp.int8)
    scale = self.param('scale', nn.with_logical_partitioning(nn.initializers.ones, out_axes), self.features,
                       jnp.float32)
    y = dense_general(x, kernel, scale, len(self.in_features))
    if self.use_bias:
      y = y + self.param('bias', nn.with_logical_partitioning(nn.initializers.zeros, out_axes), self.features,
                         jnp.float32)
    return y.astype(self.dtype)


@dataclasses.dataclass(frozen=True)
class Int8Weights(FloatWeights):
  """The layers' weights in int8 (model.quantization 'int8'), multiplied by `product` (PRODUCTS): every projection an
  Int8DenseGeneral, a self-attention's query, key and value one fused matrix (FUSED), the embedding table int8 with
  one scale per row (and, for 'onednn', the table packed for the output projection)."""
  product: str = 'xla'
  name: ClassVar[str] = 'int8'
  fuses_qkv: ClassVar[bool] = True

  def dense(self, features: tuple, in_features: tuple, axes: tuple, use_bias: bool, dtype, name=None) -> nn.Module:
    return Int8DenseGeneral(features, in_features, axes, use_bias=use_bias, dtype=dtype, product=self.product,
                            name=name)

  def embedding_table(self, module: nn.Module, vocab_size: int, features: int) -> dict:
    """'embedding' int8 [V, D], 'embedding_scale' f32[V] (filled at load: quantize_params), and for 'onednn'
    'embedding_packed' u8 (the table packed as the output projection reads it)."""
    zeros, ones = nn.initializers.zeros, nn.initializers.ones
    table = {'embedding': module.param('embedding', nn.with_logical_partitioning(zeros, ('vocab', 'embed')),
                                       (vocab_size, features), jnp.int8),
             'embedding_scale': module.param('embedding_scale', nn.with_logical_partitioning(ones, ('vocab',)),
                                             (vocab_size,), jnp.float32)}
    if self.product == 'onednn':
      table['embedding_packed'] = module.param('embedding_packed', zeros,
                                               (onednn.packed_bytes(features, vocab_size),), jnp.uint8)
    return table

  def lookup(self, table: dict, ids: jax.Array) -> jax.Array:
    rows = jnp.take(table['embedding'], ids, axis=0).astype(jnp.float32)  # [B, T, D]
    return rows * jnp.take(table['embedding_scale'], ids, axis=0)[..., None]

  def attend(self, table: dict, x: jax.Array, dtype) -> jax.Array:
    matrix = table.get('embedding_packed', table['embedding'])
    flat = int8_matmul(x.reshape(-1, x.shape[-1]).astype(jnp.float32), matrix, table['embedding_scale'],
                       transposed=True)  # [B*T, V]
    return flat.reshape(*x.shape[:-1], table['embedding_scale'].shape[0])


SCALES = {'kernel': 'scale', 'embedding': 'embedding_scale'}  # an int8 leaf's scale, beside it
# A module of the int8 model that a float run holds as several (layers.Attention's 'qkv'): its leaves are theirs
# stacked on a new axis after the input axes of a kernel (one for these), first for the rest (a bias).
FUSED = {'qkv': ('query', 'key', 'value')}


def quantize_params(params: Any, target: Any) -> Any:
  """A float run's params in the int8 model's layout `target` (its abstract params): every int8 leaf of
  `target` quantized from the float leaf at the same path, its scale beside it ('kernel' -> 'scale':
  the leading axes are the input; 'embedding' -> 'embedding_scale': one scale per row); a u8 leaf is that
  int8 matrix packed for the oneDNN product, once, here ('kernel'; 'embedding_packed': the embedding as the
  output projection, [V, D] read as [D, V]); a module named in FUSED from the float modules it stacks; the rest
  as is."""
  floats = {_keys(path): leaf for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]}
  specs = {_keys(path): spec for path, spec in jax.tree_util.tree_flatten_with_path(target)[0]}
  floats.update(_fused(floats, specs))
  out = {}
  for keys, spec in specs.items():
    if spec.dtype not in (jnp.int8, jnp.uint8):
      continue
    name = {'embedding_packed': 'embedding'}.get(keys[-1], keys[-1])  # the float leaf it comes from
    w, scale_keys = floats[keys[:-1] + (name,)], keys[:-1] + (SCALES[name],)
    contract = tuple(range(w.ndim - specs[scale_keys].ndim)) if name == 'kernel' else tuple(range(1, w.ndim))
    q, out[scale_keys] = quantize(w, contract)
    if spec.dtype == jnp.int8:
      out[keys] = q
    else:  # [in..., out...] as [K, N]; the embedding [V, D] is the transposed [D, V]
      rows = math.prod(w.shape[:len(contract)]) if name == 'kernel' else w.shape[0]
      out[keys] = jnp.asarray(onednn.pack(np.asarray(q).reshape(rows, -1), transposed=name == 'embedding'))
  pick = lambda keys: out[keys] if keys in out else floats[keys]
  return jax.tree_util.tree_map_with_path(lambda path, _: pick(_keys(path)), target)


def _fused(floats: dict, wanted) -> dict:
  """The float leaves of the FUSED modules that `wanted` (a target's leaf paths) holds, stacked from `floats`."""
  out = {}
  for keys in wanted:
    parts = FUSED.get(keys[-2]) if len(keys) > 1 else None
    leaf = 'kernel' if keys[-1] in ('kernel', 'scale') else keys[-1]  # a scale is quantized from the kernel
    if parts and keys[:-1] + (leaf,) not in out:
      out[keys[:-1] + (leaf,)] = jnp.stack([floats[keys[:-2] + (part, leaf)] for part in parts],
                                           axis=1 if leaf == 'kernel' else 0)
  return out


def _keys(path) -> tuple:
  return tuple(getattr(p, 'key', getattr(p, 'idx', p)) for p in path)
