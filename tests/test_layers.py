"""The house's layering, read from the source: every import between nat_jax modules points down
(core -> data / models / losses -> the decoder Protocols -> methods / decode -> run plumbing -> the
Translator -> the server -> command lines), or stays inside one subpackage; importing the command-line
modules together in one process works (no flag is defined at import time)."""
import ast
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(REPO, 'nat_jax')

# Lower number = lower layer. A module's layer is that of its longest listed prefix.
LAYERS = {
    'nat_jax.errors': -1,  # imports nothing of ours: any module may raise its errors
    'nat_jax.core': 0, 'nat_jax.files': 0, 'nat_jax.timing': 0, 'nat_jax.hugepages': 0,
    'nat_jax.config_defaults': 0,
    'nat_jax.data': 1, 'nat_jax.models': 1, 'nat_jax.losses': 1, 'nat_jax.sharding': 1, 'nat_jax.scoring': 1,
    'nat_jax.summaries': 1,
    'nat_jax.decode.interfaces': 2,  # the seam: methods offer these Protocols, decoders consume them
    'nat_jax.methods': 3, 'nat_jax.decode': 3,
    'nat_jax.train_state': 4, 'nat_jax.checkpoint': 4, 'nat_jax.translation': 4,
    'nat_jax.runs': 5,
    'nat_jax.translator': 6,  # the public Python API: a run and its decoders
    'nat_jax.server': 7,  # the HTTP server's library, over a Translator
    'nat_jax.serve': 8,  # its command line
    'nat_jax.cli': 6, 'nat_jax.ct2': 6,  # the CTranslate2 library: nat_jax.export's conversion, the benchmark's peers
    'nat_jax.train': 7, 'nat_jax.translate': 7, 'nat_jax.export': 7, 'nat_jax.evaluate': 8, 'nat_jax.distill': 7,
    'nat_jax.benchmark': 7, 'nat_jax.ddgviz': 7, 'nat_jax.dagviz': 8,  # evaluate uses the benchmark library
    'nat_jax.aot': 8,  # compiles train's own jitted steps and the decoders for other devices
    'nat_jax': 9,  # the package itself (nat_jax/__init__.py, __main__.py)
}


def layer(module: str) -> int:
  best = max((p for p in LAYERS if module == p or module.startswith(p + '.')), key=len)
  return LAYERS[best]


def subpackage(module: str) -> str:
  """nat_jax.decode.beam -> nat_jax.decode; top-level modules are their own."""
  parts = module.split('.')
  return '.'.join(parts[:2])


def modules():
  for root, _, files in os.walk(PACKAGE):
    for name in files:
      if name.endswith('.py'):
        path = os.path.join(root, name)
        rel = os.path.relpath(path, REPO)[:-3].replace(os.sep, '.')
        yield (rel[:-len('.__init__')] if rel.endswith('.__init__') else rel), path


def nat_jax_imports(path: str, module: str):
  """(imported module, line) for every import of a nat_jax module, at any depth (lazy imports too)."""
  known = {m for m, _ in modules()}
  tree = ast.parse(open(path, encoding='utf-8').read())
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith('nat_jax'):
      for alias in node.names:  # `from nat_jax.methods import hrt` imports the module nat_jax.methods.hrt
        full = f'{node.module}.{alias.name}'
        yield (full if full in known else node.module), node.lineno
    elif isinstance(node, ast.Import):
      for alias in node.names:
        if alias.name.startswith('nat_jax'):
          yield alias.name, node.lineno


def test_every_import_points_down():
  upward = []
  for module, path in modules():
    for imported, line in nat_jax_imports(path, module):
      if subpackage(imported) == subpackage(module) and subpackage(module) != 'nat_jax':
        continue  # inside one subpackage (nat_jax.decode.greedy -> nat_jax.decode.interfaces)
      if imported == 'nat_jax' or imported == module:
        continue
      if layer(imported) >= layer(module):
        upward.append(f'{os.path.relpath(path, REPO)}:{line}: {module} (layer {layer(module)}) imports '
                      f'{imported} (layer {layer(imported)})')
  assert not upward, 'imports that do not point down:\n' + '\n'.join(upward)


def test_no_module_imports_its_own_package():
  """Inside a subpackage, modules import each other, never their package's __init__ (which imports them
  back: `from nat_jax.methods import register` in a method module was a cycle; registry.py holds it now)."""
  back = [f'{os.path.relpath(path, REPO)}:{line}: {module} imports {imported}'
          for module, path in modules() if subpackage(module) != module
          for imported, line in nat_jax_imports(path, module) if imported == subpackage(module)]
  assert not back, 'imports of the own package:\n' + '\n'.join(back)


def test_core_imports_nothing_above_it():
  for module, path in modules():
    if module.startswith('nat_jax.core'):
      assert all(m.startswith('nat_jax.core') for m, _ in nat_jax_imports(path, module)), module


def test_command_modules_import_together():
  code = ('import nat_jax.train, nat_jax.translate, nat_jax.benchmark, nat_jax.evaluate, nat_jax.distill, '
          'nat_jax.export; print("ok")')
  out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, cwd=REPO, timeout=300)
  assert out.returncode == 0 and out.stdout.strip() == 'ok', out.stderr[-2000:]


@pytest.mark.parametrize('module', ['nat_jax.translate', 'nat_jax.train', 'nat_jax.benchmark', 'nat_jax.export'])
def test_importing_a_command_defines_no_flag(module):
  code = (f'from absl import flags; before = set(flags.FLAGS); import {module}; '
          'print(sorted(f for f in set(flags.FLAGS) - before '
          'if (flags.FLAGS.find_module_defining_flag(f) or "").startswith("nat_jax")))')
  out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, cwd=REPO, timeout=300)
  assert out.returncode == 0 and out.stdout.strip() == '[]', (out.stdout, out.stderr[-2000:])


def test_decoders_methods_and_runs_load_without_tensorflow_datasets():
  """A run trained on 'files' data decodes on a machine without tensorflow-datasets: importing every
  decoder, every method, the run loader and the Translator does not import it (nor TensorFlow)."""
  code = ('import sys, nat_jax.decode, nat_jax.methods, nat_jax.runs, nat_jax.translator; '
          'print(sorted(m for m in ("tensorflow_datasets", "tensorflow") if m in sys.modules))')
  out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, cwd=REPO, timeout=300)
  assert out.returncode == 0 and out.stdout.strip() == '[]', (out.stdout, out.stderr[-2000:])


def test_decoders_and_methods_take_token_ids_from_core():
  """The special token ids come from nat_jax.core.tokens (the leaf), not from the tokenizer's module,
  in every method and decoder but `drafted`, which reads a drafter run's tokenizer file."""
  for module, path in modules():
    if module.startswith(('nat_jax.methods', 'nat_jax.decode')) and module != 'nat_jax.decode.drafted':
      data = [m for m, _ in nat_jax_imports(path, module) if m.startswith('nat_jax.data')]
      assert not data, f'{module} imports {data}'
