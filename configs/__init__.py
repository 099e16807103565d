"""The recipes, one module each (its docstring holds the commands that run it; get_config() its settings):
installed as nat_jax.configs, so `--config=<name>` finds them from any directory (nat_jax.recipes.loader)."""
