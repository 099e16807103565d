"""The repository passes ruff with the settings in pyproject.toml (pyflakes, syntax, lines of at most
120 columns): an unused import, an undefined name or an over-long line fails CI (ruff comes with the
dev extra the README's test command installs)."""
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_ruff_is_clean():
  out = subprocess.run([sys.executable, '-m', 'ruff', 'check', '--no-cache', '.'], capture_output=True, text=True,
                       cwd=REPO, timeout=300)
  assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
