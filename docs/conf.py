"""Sphinx configuration of the nat_jax documentation site.

Build it (warnings are errors; what CI's tests/integration/test_docs.py runs):

  python -m sphinx -W --keep-going -b html docs docs/_build/html

Sphinx with MyST (markdown) and autodoc, as JAX, Flax, Optax and Orbax build theirs: the pages stay
markdown that reads on its own, the API reference is read from the docstrings of the code that runs, and
`-W` turns every broken link, missing anchor and docstring markup error into a failed build. Generated
tables (every command's flags, every decoder's options, the results) are written by `python
docs/generate.py` into reference/cli.md and _generated/, and the tests fail when they are stale.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from nat_jax.version import VERSION  # noqa: E402

project = 'nat_jax'
author = 'the nat_jax authors'
copyright = '2026, the nat_jax authors'
version = release = VERSION
html_title = f'nat_jax {VERSION}'

extensions = ['myst_parser', 'sphinx.ext.autodoc', 'sphinx.ext.napoleon', 'sphinx_copybutton']
source_suffix = {'.md': 'markdown'}
root_doc = 'index'
exclude_patterns = ['_build', '_generated', 'results', 'lab-notes/data', 'Thumbs.db', '.DS_Store']

myst_heading_anchors = 4          # `page.md#a-heading` links resolve (and are checked) as on GitHub
myst_enable_extensions = ['colon_fence', 'deflist']
suppress_warnings = []

autodoc_member_order = 'bysource'
napoleon_use_ivar = True  # a class's Attributes: section as fields of its entry (autodoc lists the members too)
autodoc_typehints = 'description'
autodoc_default_options = {'members': True, 'undoc-members': False, 'show-inheritance': False}

html_theme = 'furo'
html_static_path = ['_static']
html_css_files = ['tables.css']
copybutton_prompt_text = r'^\$ '
copybutton_prompt_is_regexp = True
pygments_style = 'default'
smartquotes = False  # `--flag` stays two hyphens, quotes stay as typed
