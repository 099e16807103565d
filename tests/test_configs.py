"""Every recipe in configs/ loads, names a registered method with a valid section, and decodes its
validation and test sets with decoders that method supports."""
import glob
import importlib
import os

import pytest

from nat_jax.decode import decoders_for
from nat_jax.methods import get_method

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPES = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(REPO, 'configs', '*.py'))
                 if not p.endswith('__init__.py'))


@pytest.mark.parametrize('name', RECIPES)
def test_recipe_builds_its_method(name):
  config = importlib.import_module(f'configs.{name}').get_config()
  assert isinstance(config.total_steps, int) and isinstance(config.seed, int)
  module = importlib.import_module(f'configs.{name}')
  assert 'python -m nat_jax.train' in module.__doc__ and name in module.__doc__  # the command that runs it
  method = get_method(config, 4000)
  supported = decoders_for(method)
  assert config.eval_decoder in supported and config.test_decoder in supported, (supported, config.eval_decoder)
