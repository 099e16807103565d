"""nat_jax's version, declared once: the package metadata (pyproject.toml reads it), `nat_jax.__version__`, every
command's `--version` and the documentation site show it. The changes of each version: CHANGELOG.md."""
VERSION = '0.1.0'
