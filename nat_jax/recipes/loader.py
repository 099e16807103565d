"""Recipes (configs/*.py, each with get_config()): found by file or by name from the package `nat_jax.configs`
(the repository's configs/ folder, installed under nat_jax's name), and loaded."""
from __future__ import annotations

import importlib.util
import os
from typing import Optional


def recipe_path(given: str) -> Optional[str]:
  """A recipe file: `given` itself if it is a file, else the recipe of that name in `nat_jax.configs` (installed
  with nat_jax: `--config=at_bible_tiny` works from any directory), else None."""
  if os.path.isfile(given):
    return given
  if os.sep in given or '/' in given:
    return None
  spec = importlib.util.find_spec('nat_jax.configs')
  if spec is None or not spec.submodule_search_locations:
    return None
  name = given if given.endswith('.py') else given + '.py'
  path = os.path.join(list(spec.submodule_search_locations)[0], name)
  return path if os.path.isfile(path) else None


def load_recipe(path: str):
  """The ConfigDict of a recipe file (its get_config())."""
  spec = importlib.util.spec_from_file_location('nat_jax_recipe', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()
