"""Both Colab notebooks execute top to bottom (smoke size, kernel from this virtualenv) and leave what
they promise: a trained run with its evaluation; every fast method trained, drawn and benchmarked."""
import json
import os

import nbformat
import pytest
from nbclient import NotebookClient

from tests.support import REPO

NOTEBOOKS = os.path.join(REPO, 'notebooks')


def execute(name: str, runs, monkeypatch):
  monkeypatch.setenv('NAT_JAX_NOTEBOOK_SMOKE', '1')
  monkeypatch.setenv('NAT_JAX_NOTEBOOK_RUNS', str(runs))
  notebook = nbformat.read(os.path.join(NOTEBOOKS, name), as_version=4)
  NotebookClient(notebook, timeout=1200, kernel_name='python3',
                 resources={'metadata': {'path': NOTEBOOKS}}).execute()  # raises CellExecutionError on an error
  return notebook


@pytest.mark.slow  # about 2 minutes: trains the tiny AT; its commands have faster tests (test_cli, test_train)
def test_quickstart_notebook_runs(tmp_path, monkeypatch):
  notebook = execute('quickstart.ipynb', tmp_path, monkeypatch)
  report = json.loads((tmp_path / 'at_bible_tiny' / 'eval' / 'results.json').read_text())
  assert [r['decoder'] for r in report['rows']] == ['greedy', 'beam']
  translated = [o for c in notebook.cells if c.cell_type == 'code' for o in c.get('outputs', [])
                if 'nat_jax.translate' in o.get('text', '')]
  assert len(translated) == 1 and (tmp_path / 'at_bible_tiny' / 'tensorboard').is_dir()


@pytest.mark.slow  # about 5 minutes: trains five models; its parts have faster tests (dagviz, ddgviz, benchmark)
@pytest.mark.parametrize('name', ['fast_methods_tour.ipynb'])
def test_fast_methods_tour_notebook_runs(name, tmp_path, monkeypatch):
  execute(name, tmp_path, monkeypatch)
  for picture in ('dag.png', 'dag.html', 'ddg.png', 'benchmark/pareto.png'):
    assert (tmp_path / picture).stat().st_size > 0, picture
  report = json.loads((tmp_path / 'benchmark' / 'results.json').read_text())
  assert [r['method'].split()[0] for r in report['rows']] == ['at', 'at', 'at', 'dat', 'hrt', 'IBDecoder']
