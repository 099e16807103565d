"""Recipes: the defaults every recipe shares (defaults.py) and finding and loading one (loader.py) from a file
or by name from the installed `configs` package (configs/*.py, each with get_config())."""
from nat_jax.recipes.loader import load_recipe, recipe_path  # noqa: F401
