"""nat_jax.run.workdir without a trained run: precision labels, the inference config (a new value, the run's
untouched), and config.json layouts written before a setting existed."""
import json

import pytest

from nat_jax.errors import ConfigError
from nat_jax.recipes.defaults import base_config
from nat_jax.run.workdir import PRECISIONS, inference_config, precision, precision_label, read_run_config


def test_every_precision_label_is_a_dtype_or_a_quantization_and_reads_back():
  assert precision('bfloat16') == ('bfloat16', 'none') and precision('int8') == ('float32', 'int8')
  for label in PRECISIONS:
    assert precision_label(*precision(label)) == label
  with pytest.raises(ConfigError, match="precision 'fp8': expected one of float32, bfloat16, float16, int8"):
    precision('fp8')
  with pytest.raises(ConfigError, match='quantization int8 computes in float32: drop dtype bfloat16'):
    precision_label('bfloat16', 'int8')


def test_the_inference_config_is_a_new_value_and_the_runs_config_is_unchanged():
  config = base_config()
  before = config.to_dict()
  half = inference_config(config, 'bfloat16')
  assert (half.model.dtype, half.model.quantization, half.model.int8_kernel) == ('bfloat16', 'none', 'xla')
  int8 = inference_config(config, quantization='int8', int8_kernel='xla')
  assert (int8.model.dtype, int8.model.quantization, int8.model.int8_kernel) == ('float32', 'int8', 'xla')
  assert config.to_dict() == before
  assert {k: v for k, v in int8.to_dict().items() if k != 'model'} == {k: v for k, v in before.items() if k != 'model'}


def test_a_config_json_from_before_a_setting_existed_reads_with_its_default(tmp_path):
  """A run trained before model.quantization, model.int8_kernel and num_samples were settings reads as today's
  config with their defaults (so resuming it is not refused as another model)."""
  today = base_config().to_dict()
  old = dict(today, model={k: v for k, v in today['model'].items() if k not in ('quantization', 'int8_kernel')})
  del old['num_samples']
  path = tmp_path / 'config.json'
  path.write_text(json.dumps(old))
  assert read_run_config(str(path)).to_dict() == today
