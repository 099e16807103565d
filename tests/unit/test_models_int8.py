"""int8 inference (nat_jax.models.int8) against independent truths: the quantization and the int8 product
against a numpy reimplementation in int64, a padded row against the same row in a batch (bitwise), every
method's int8 model against its float model, the two int8 products (XLA's dot, the packed oneDNN kernel)
against each other (the same tokens from every decoder), and the resident bytes of Transformer-base in int8
from its abstract parameters."""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

from nat_jax import recipes
from nat_jax.core.masks import attention_mask
from nat_jax.kernels import onednn
from nat_jax.methods import get_method
from nat_jax.models import int8
from nat_jax.run.train_state import dummy_batch
from nat_jax.run.workdir import inference_config, inference_params
from tests.support import random_model


def numpy_quantize(w: np.ndarray, axis: int):
  amax = np.abs(w).max(axis=axis, keepdims=True)
  scale = np.where(amax > 0, amax / 127.0, 1.0)
  return np.clip(np.round(w / scale), -127, 127).astype(np.int64), scale


def test_quantize_is_symmetric_per_output_channel_and_within_half_a_step():
  w = np.random.default_rng(0).normal(size=(64, 3, 5)).astype(np.float32)
  w[:, 1, 2] = 0.0  # an all-zero output channel: scale 1, codes 0
  q, scale = int8.quantize(jnp.asarray(w), (0,))
  q, scale = np.asarray(q), np.asarray(scale)
  assert q.dtype == np.int8 and scale.shape == (3, 5) and np.abs(q).max() == 127
  assert scale[1, 2] == 1.0 and not q[:, 1, 2].any()
  assert np.all(np.abs(q * scale - w) <= scale / 2 + 1e-7)
  ref_q, ref_scale = numpy_quantize(w, 0)
  np.testing.assert_array_equal(q, ref_q)
  np.testing.assert_allclose(scale, ref_scale[0], rtol=1e-6)


@pytest.mark.parametrize('rows', [1, 2, 5])
@pytest.mark.parametrize('transposed', [False, True])
def test_int8_matmul_equals_the_integer_product_rescaled(rows, transposed):
  rng = np.random.default_rng(rows)
  x = rng.normal(size=(rows, 48)).astype(np.float32)
  w = rng.normal(size=(48, 20)).astype(np.float32)
  q, scale = int8.quantize(jnp.asarray(w.T if transposed else w), (1,) if transposed else (0,))
  got = np.asarray(int8.int8_matmul(jnp.asarray(x), q, scale, transposed=transposed))
  xq, sx = numpy_quantize(x, 1)
  wq, sw = numpy_quantize(w, 0)
  exact = (xq @ wq).astype(np.float64) * sx * sw  # int64 accumulation, then the two scales
  np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got, x @ w, atol=0.05 * np.abs(x @ w).max())  # and near the float product


def test_a_lone_row_padded_or_not_gives_what_it_gives_in_a_batch():
  rng = np.random.default_rng(7)
  x = jnp.asarray(rng.normal(size=(6, 32)).astype(np.float32))
  q, scale = int8.quantize(jnp.asarray(rng.normal(size=(32, 9)).astype(np.float32)), (0,))
  batch = np.asarray(int8.int8_matmul(x, q, scale))
  for r in range(6):
    for min_rows in (1, 2, 4):
      np.testing.assert_array_equal(np.asarray(int8.int8_matmul(x[r:r + 1], q, scale, min_rows=min_rows)),
                                    batch[r:r + 1])



PRODUCTS = ['xla', pytest.param('onednn', marks=pytest.mark.skipif(onednn.unavailable() is not None,
                                                                   reason=f'{onednn.unavailable()}'))]


def as_int8(config, method, params, product='xla'):
  c8 = inference_config(config, quantization='int8', int8_kernel=product)
  m8 = get_method(c8, method.model.cfg.vocab_size if hasattr(method.model, 'cfg') else 40)
  return m8, inference_params(m8, params, c8)


@pytest.mark.parametrize('overrides', [{}, {'model.method': 'hrt', 'hrt.chunk': 2}])
def test_the_int8_model_gives_the_float_models_logits_within_the_quantization_error(corpus, overrides):
  from tests.support import tiny_config
  method, params = random_model(corpus, 40, logit_scale=1.0, **overrides)
  config = tiny_config(corpus, **{'model.dropout': 0.0, **overrides})
  m8, p8 = as_int8(config, method, params)
  leaves = jax.tree_util.tree_leaves(p8)
  assert any(x.dtype == jnp.int8 for x in leaves)
  rng = np.random.default_rng(0)
  src = jnp.asarray(rng.integers(5, 40, size=(3, 9)), jnp.int32)
  tgt = jnp.asarray(rng.integers(5, 40, size=(3, 7)), jnp.int32)
  pos = jnp.broadcast_to(jnp.arange(7), (3, 7))
  mask = attention_mask(pos, tgt > 0)
  model_params = lambda p: p.get('verifier', p)
  a = np.asarray(method.model.apply({'params': model_params(params)}, src, tgt, pos, mask))
  b = np.asarray(m8.model.apply({'params': model_params(p8)}, src, tgt, pos, mask))
  assert np.abs(a - b).max() < 0.05 * np.abs(a).max() + 0.05
  assert np.mean(a.argmax(-1) == b.argmax(-1)) >= 0.9


@pytest.mark.parametrize('product', PRODUCTS)
def test_float_leaves_are_kept_and_every_weight_matrix_is_int8(corpus, product):
  """Every weight matrix int8 (the oneDNN product: packed, each packed once, the embedding's table kept for
  lookups beside its packed copy), LayerNorms and biases as they were."""
  from tests.support import tiny_config
  method, params = random_model(corpus, 40)
  config = tiny_config(corpus, **{'model.dropout': 0.0})
  packs = onednn.pack_count
  m8, p8 = as_int8(config, method, params, product)
  flat = {jax.tree_util.keystr(k): v for k, v in jax.tree_util.tree_flatten_with_path(p8)[0]}
  floats = {jax.tree_util.keystr(k): v for k, v in jax.tree_util.tree_flatten_with_path(params)[0]}
  packed = [key for key, value in flat.items() if value.dtype == jnp.uint8]
  assert onednn.pack_count - packs == len(packed) and bool(packed) == (product == 'onednn')
  for key, value in flat.items():
    if key.endswith("['embedding']"):
      assert value.dtype == jnp.int8, key
    elif key.endswith("['kernel']") or key.endswith("['embedding_packed']"):
      assert value.dtype == (jnp.uint8 if product == 'onednn' else jnp.int8), key
    elif key in floats:
      np.testing.assert_array_equal(np.asarray(value), np.asarray(floats[key]))  # LayerNorm, biases: as they were
    else:
      assert key.endswith("['scale']") or key.endswith("['embedding_scale']"), key


def test_a_base_size_run_holds_at_most_a_third_of_its_float_bytes_in_int8():
  """Transformer-base (configs/at_base.py) in int8 against float32, from the two models' abstract
  parameters: the weight matrices in one byte, a float scale per output channel, the rest as it was."""
  config = recipes.load_recipe(recipes.recipe_path('at_base'))
  config.model.dtype = 'float32'
  method = get_method(config, 32000)
  c8 = inference_config(config, quantization='int8', int8_kernel='xla')
  bytes_of = lambda m: sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(
      nn.meta.unbox(jax.eval_shape(m.init_params, jax.random.PRNGKey(0), dummy_batch()))))
  ratio = bytes_of(get_method(c8, 32000)) / bytes_of(method)
  assert ratio <= 0.35, ratio


def weight_like_shapes(params) -> set:
  """Every int8 matrix's shape, as stored and as the dot sees it (flattened to 2-D, either way round)."""
  shapes = set()
  for x in jax.tree_util.tree_leaves(params):
    if x.dtype == jnp.int8:
      shapes.add(tuple(x.shape))
      for split in range(1, x.ndim):
        a, b = int(np.prod(x.shape[:split])), int(np.prod(x.shape[split:]))
        shapes.update({(a, b), (b, a)})
  return shapes


def float_copies_carried_by_loops(hlo: str, shapes: set) -> list[str]:
  """Arrays of a weight's shape in a float or int32 type among the state a while loop carries: a copy of a
  weight made outside the loop (hoisted) and living across it."""
  found = []
  for line in hlo.split('\n'):
    if ' while(' not in line:
      continue
    state = line.split(' while(')[0]
    for dtype, dims in re.findall(r'(f32|s32|bf16|f16)\[([\d,]*)\]', state):
      if tuple(int(d) for d in dims.split(',') if d) in shapes:
        found.append(f'{dtype}[{dims}] in {line.strip()[:100]}')
  return found


@pytest.mark.parametrize('method_name, decoder', [('at', 'greedy'), ('dat', 'dag_lookahead'), ('at', 'drafted')])
@pytest.mark.parametrize('rows', [1, 3])
@pytest.mark.parametrize('product', PRODUCTS)
def test_no_float_copy_of_a_weight_matrix_is_made_in_the_compiled_decoder(corpus, method_name, decoder, rows,
                                                                           product):
  """No float (or int32) copy of an int8 matrix lives across a decode loop: the optimized HLO's loops carry
  the int8 weights only (a one-row dot may still widen a weight inside the step, where that is faster); the
  oneDNN product's loops carry its packed blobs and call the kernel."""
  from nat_jax import decode
  from nat_jax.decode.drafted import drafted_decode
  from nat_jax.views import LeftToRightScorer
  from tests.support import tiny_config
  overrides = {'model.method': 'dat'} if method_name == 'dat' else {}
  method, params = random_model(corpus, 40, **overrides)
  config = tiny_config(corpus, **{'model.dropout': 0.0, **overrides})
  shapes = weight_like_shapes(as_int8(config, method, params)[1])  # the int8 matrices, as XLA's dot reads them
  m8, p8 = as_int8(config, method, params, product)
  src = jnp.ones((rows, 11), jnp.int32)  # 11 source slots: no activation takes a weight's shape
  if decoder == 'drafted':
    build = decode.method_view(m8, LeftToRightScorer, 'test')
    program = jax.jit(lambda p, s, d: drafted_decode(build(p), s, d, update='draft', block=4))
    hlo = program.lower(p8, src, jnp.ones((rows, 20), jnp.int32)).compile().as_text()
  else:
    fn, extra = decode.decode_program(m8, decoder, decode.parse_options(decoder, {}))
    hlo = jax.jit(fn).lower(p8, extra, src).compile().as_text()
  assert ' while(' in hlo or decoder == 'dag_lookahead'
  assert float_copies_carried_by_loops(hlo, shapes) == []
  assert (onednn.KERNEL_NAME in hlo) == (product == 'onednn')


EVERY_METHOD = [  # (overrides, its decoders with the options that keep them small)
    ({}, [('greedy', {}), ('beam', {'beam_size': 2}), ('jacobi_hgj', {}), ('multiword_beam', {'beam_size': 2})]),
    ({'model.method': 'dat'}, [('dag_greedy', {}), ('dag_lookahead', {}), ('dag_joint_viterbi', {}),
                               ('dag_beam', {'beam_size': 4})]),
    ({'model.method': 'cmlm'}, [('mask_predict', {'iterations': 2, 'length_beam': 2})]),
    ({'model.method': 'hrt', 'hrt.chunk': 2}, [('hrt', {}), ('greedy', {})]),
    ({'model.method': 'ibdecoder', 'ibdecoder.h': 2, 'ibdecoder.c': 1}, [('greedy', {}), ('multiword_beam',
                                                                                        {'beam_size': 2})]),
    ({'model.method': 'selfdraft'}, [('drafted', {})]),
]


@pytest.mark.skipif(onednn.unavailable() is not None, reason=f'{onednn.unavailable()}')
@pytest.mark.parametrize('overrides, decoder', [({}, 'greedy'), ({'model.method': 'dat'}, 'dag_lookahead')])
def test_a_batch_of_many_rows_gives_the_same_tokens_by_either_product(corpus, overrides, decoder):
  """At batch 24 (from 16 rows the shared loop shrinks its batch as rows finish: the products change row count
  inside the loop) the kernel still gives XLA's tokens."""
  from tests.support import run_decoder, tiny_config
  method, params = random_model(corpus, 40, **overrides)
  config = tiny_config(corpus, **{'model.dropout': 0.0, **overrides})
  src = jnp.asarray(np.random.default_rng(2).integers(5, 40, size=(24, 8)), jnp.int32)
  by_xla, by_kernel = (run_decoder(*as_int8(config, method, params, product), src, decoder).tokens
                       for product in ('xla', 'onednn'))
  np.testing.assert_array_equal(np.asarray(by_kernel), np.asarray(by_xla))


@pytest.mark.parametrize('overrides, decoders', EVERY_METHOD, ids=lambda v: str(v.get('model.method', 'at'))
                         if isinstance(v, dict) else '')
def test_every_method_and_decoder_decodes_in_int8_as_in_float(corpus, overrides, decoders):
  """Each decoder of each method, on a random tiny model and its int8 quantization: the same output shape,
  valid tokens, and mostly the same tokens (logits move by the quantization error only); where the oneDNN
  kernel runs, its int8 model gives exactly the tokens of XLA's int8 dot."""
  from tests.support import run_decoder, tiny_config
  method, params = random_model(corpus, 40, **overrides)
  m8, p8 = as_int8(tiny_config(corpus, **{'model.dropout': 0.0, **overrides}), method, params)
  src = jnp.asarray(np.random.default_rng(1).integers(5, 40, size=(3, 8)), jnp.int32)
  kernel = onednn.unavailable() is None and as_int8(tiny_config(corpus, **{'model.dropout': 0.0, **overrides}),
                                                     method, params, 'onednn')
  for name, options in decoders:
    a = np.asarray(run_decoder(method, params, src, name, **options).tokens)
    b = np.asarray(run_decoder(m8, p8, src, name, **options).tokens)
    assert a.shape == b.shape and b.min() >= 0 and b.max() < 40, name
    assert np.mean(a == b) >= 0.7, (name, a, b)
    if kernel:  # the packed oneDNN product: the same int32 sums, so the same tokens
      np.testing.assert_array_equal(np.asarray(run_decoder(*kernel, src, name, **options).tokens), b, err_msg=name)
