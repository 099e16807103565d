"""The repository passes ruff with the settings in pyproject.toml (pyflakes, syntax, lines of at most
120 columns, at most 45 statements per function): an unused import, an undefined name, an over-long line
or function fails CI (ruff comes with the dev extra the README's test command installs); no function
in the package or the benchmarks spans more than 60 lines."""
import ast
import os
import subprocess
import sys

from tests.support import REPO


def test_ruff_is_clean():
  out = subprocess.run([sys.executable, '-m', 'ruff', 'check', '--no-cache', '.'], capture_output=True, text=True,
                       cwd=REPO, timeout=300)
  assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


MAX_FUNCTION_LINES = 60  # the house rule; ruff's PLR0915 counts statements, this counts lines


def test_no_function_in_the_package_or_the_benchmarks_is_longer_than_the_house_rule():
  long = []
  for root, _, files in (walked for top in ('nat_jax', 'benchmarks') for walked in os.walk(os.path.join(REPO, top))):
    for name in files:
      if name.endswith('.py'):
        path = os.path.join(root, name)
        for node in ast.walk(ast.parse(open(path, encoding='utf-8').read())):
          if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            if lines > MAX_FUNCTION_LINES:
              long.append(f'{os.path.relpath(path, REPO)}:{node.lineno}: {node.name} has {lines} lines')
  assert not long, f'functions over {MAX_FUNCTION_LINES} lines:\n' + '\n'.join(long)
