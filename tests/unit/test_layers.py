"""The house's layering, read from the source: every import between nat_jax modules points down
(core -> data / models / losses -> the decoder Protocols -> methods / decode -> run plumbing -> the
Translator -> the server -> command lines), or stays inside one subpackage; importing the command-line
modules together in one process works (no flag is defined at import time)."""
import ast
import os
import subprocess
import sys

import pytest

from tests.support import REPO

PACKAGE = os.path.join(REPO, 'nat_jax')

# Lower number = lower layer. A module's layer is that of its longest listed prefix.
LAYERS = {
    'nat_jax.errors': -1,  # imports nothing of ours: any module may raise its errors
    'nat_jax.version': -1,  # the version, declared once
    'nat_jax.core': 0, 'nat_jax.files': 0, 'nat_jax.hugepages': 0, 'nat_jax.backends': 0, 'nat_jax.settings': 0,
    'nat_jax.metrics': 0,  # BLEU / chrF and timing
    'nat_jax.recipes': 2,  # a recipe's settings declared (over the model's choices) and the recipe loader
    'nat_jax.kernels': 0,  # native kernels XLA calls through jax.ffi (the oneDNN int8 product)
    'nat_jax.data': 1, 'nat_jax.models': 1, 'nat_jax.losses': 1, 'nat_jax.parallel': 1,
    'nat_jax.views': 2,  # the seam: methods offer these Protocols, decoders consume them
    'nat_jax.methods': 3, 'nat_jax.decode': 3,
    'nat_jax.run': 4,  # a trained run: checkpoints, train state, translation, workdir, the Translator
    'nat_jax.training': 5,  # the loop, its steps and bookkeeping; distillation
    'nat_jax.deploy': 5,  # the HTTP server's library
    'nat_jax.formats': 5,  # other projects' model formats: Marian in, CTranslate2 out
    'nat_jax.evaluation': 6,  # the benchmark library (its Translator rows and CTranslate2 peers)
    'nat_jax.viz': 5,  # the DAG and decoding-graph pictures
    'nat_jax.ahead_of_time': 7,  # compiles training's own jitted steps and the decoders for other devices
    'nat_jax.commands': 8,  # the command lines, each over the libraries; none imports another
    'nat_jax': 9,  # the package itself and the command lines' one-line modules (nat_jax/train.py, ...)
}

BENCHMARKS = os.path.join(REPO, 'benchmarks')
# The benchmarks' rooms (benchmarks/__init__.py), lower number = lower room; rooms of one number import neither
# the other. A benchmark may import its own room, lower rooms and nat_jax's public names.
BENCHMARK_ROOMS = {'benchmarks.components': 0, 'benchmarks.projection': 0, 'benchmarks.systems': 1,
                   'benchmarks.suite': 2}
PUBLIC_COMMAND_HELPERS = ('nat_jax.commands.cli',)  # how a command line runs (flags with rules, one error path)


def layer(module: str) -> int:
  best = max((p for p in LAYERS if module == p or module.startswith(p + '.')), key=len)
  return LAYERS[best]


def subpackage(module: str) -> str:
  """nat_jax.decode.beam -> nat_jax.decode; top-level modules are their own."""
  parts = module.split('.')
  return '.'.join(parts[:2])


def modules(top: str = PACKAGE):
  """(dotted name, path) of every module under `top` (nat_jax/ or benchmarks/)."""
  for root, _, files in os.walk(top):
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
        continue  # inside one subpackage (nat_jax.decode.greedy -> nat_jax.views)
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
          'nat_jax.export, nat_jax.lm, nat_jax.dagviz, nat_jax.ddgviz, nat_jax.serve; print("ok")')
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
  code = ('import sys, nat_jax.decode, nat_jax.methods, nat_jax.run.workdir, nat_jax.run.translator; '
          'print(sorted(m for m in ("tensorflow_datasets", "tensorflow") if m in sys.modules))')
  out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, cwd=REPO, timeout=300)
  assert out.returncode == 0 and out.stdout.strip() == '[]', (out.stdout, out.stderr[-2000:])


def test_decoders_and_methods_take_token_ids_from_core():
  """The special token ids come from nat_jax.core.tokens (the leaf), not from the tokenizer's module, in
  every method and decoder."""
  for module, path in modules():
    if module.startswith(('nat_jax.methods', 'nat_jax.decode')):
      data = [m for m, _ in nat_jax_imports(path, module) if m.startswith('nat_jax.data')]
      assert not data, f'{module} imports {data}'


def test_decoders_read_no_files():
  """A decoder sees views and options; what it needs from files (a drafter run, an ARPA model) the run
  layer loads and hands it (nat_jax.run.resources). No decoder module imports os or calls open(), but
  arpa.py, the ARPA format the run layer reads with."""
  readers = []
  for module, path in modules():
    if module.startswith('nat_jax.decode') and module != 'nat_jax.decode.arpa':
      for node in ast.walk(ast.parse(open(path, encoding='utf-8').read())):
        if isinstance(node, ast.Import) and any(a.name in ('os', 'os.path', 'pathlib') for a in node.names):
          readers.append(f'{module}:{node.lineno} imports os')
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == 'open':
          readers.append(f'{module}:{node.lineno} calls open()')
  assert not readers, readers


def test_the_seam_loads_no_decoder_and_no_method():
  """nat_jax.views, which methods implement and decoders consume, imports neither side."""
  code = ('import sys, nat_jax.views; '
          'print(sorted(m for m in sys.modules if m.startswith(("nat_jax.decode", "nat_jax.methods"))))')
  out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, cwd=REPO, timeout=300)
  assert out.returncode == 0 and out.stdout.strip() == '[]', (out.stdout, out.stderr[-2000:])


COMMAND_HELPERS = ('nat_jax.commands.cli', 'nat_jax.commands.launch', 'nat_jax.commands.measuring',
                   'nat_jax.commands.names')  # not commands


def test_no_command_imports_another():
  """Commands are thin over the libraries: a command module imports the commands' helpers
  (cli, measuring, names), never another command."""
  crossings = [f'{os.path.relpath(path, REPO)}:{line}: {module} imports {imported}'
               for module, path in modules() if module.startswith('nat_jax.commands.')
               for imported, line in nat_jax_imports(path, module)
               if imported.startswith('nat_jax.commands.') and imported not in COMMAND_HELPERS]
  assert not crossings, 'commands importing commands:\n' + '\n'.join(crossings)


def test_top_level_holds_the_rooms_a_few_leaves_and_one_line_per_command():
  """nat_jax/ holds subpackages (the rooms), a few leaf modules (views.py: the seam) and each command's one-line
  module (`python -m nat_jax.<command>`), which launches it and holds nothing else."""
  from nat_jax.commands.cli import COMMANDS
  leaves = {'__init__', 'backends', 'errors', 'files', 'hugepages', 'settings', 'version', 'views'}
  aliases = set(COMMANDS)
  top = {name[:-3] for name in os.listdir(PACKAGE) if name.endswith('.py')}
  assert top == leaves | aliases, sorted(top ^ (leaves | aliases))
  for name in aliases:
    tree = ast.parse(open(os.path.join(PACKAGE, *name.split('.')) + '.py', encoding='utf-8').read())
    calls = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Call)]
    assert calls == [f"launch('{name.split('.')[0]}')", 'console()'], (name, calls)


def test_every_console_script_is_a_command_and_runs_as_python_m():
  """The commands are the package's console scripts (pyproject.toml), each a module of nat_jax.commands with a
  console(), launched by the one-line module the script names, which `python -m nat_jax.<command>` runs."""
  import importlib.util
  import pkgutil
  import tomllib

  from nat_jax import commands
  from nat_jax.commands.cli import COMMANDS
  with open(os.path.join(REPO, 'pyproject.toml'), 'rb') as f:
    scripts = tomllib.load(f)['project']['scripts']
  assert scripts == {f'nat-jax-{name}': f'nat_jax.{name}:console' for name in COMMANDS}
  helpers = {m.name for m in pkgutil.iter_modules(commands.__path__)} - set(COMMANDS)
  assert helpers == {m.rsplit('.', 1)[1] for m in COMMAND_HELPERS}, helpers  # a command, or a helper said so
  for name in COMMANDS:
    spec = importlib.util.find_spec(f'nat_jax.{name}')
    assert os.path.dirname(spec.origin).startswith(PACKAGE), spec.origin  # a file of the checkout, not a hook
    assert hasattr(importlib.import_module(f'nat_jax.commands.{name}'), 'console')
  assert importlib.util.find_spec('nat_jax.no_such_command') is None


def test_tests_are_unit_or_integration_and_share_helpers_through_support():
  """tests/unit: one piece against an independent truth, in process (no command run, no training, no
  trained run); tests/integration: commands, trainings and trained runs end to end. Shared helpers come
  from tests/support.py only (fixtures from conftest.py, which pytest provides): no test module imports
  another, or conftest."""
  tests = os.path.join(REPO, 'tests')
  loose = [f for f in os.listdir(tests) if f.startswith('test_')]
  assert not loose, f'test modules outside tests/unit and tests/integration: {loose}'
  crossings, heavy = [], []
  for room in ('unit', 'integration'):
    for name in sorted(os.listdir(os.path.join(tests, room))):
      if not name.endswith('.py'):
        continue
      path = os.path.join(tests, room, name)
      with open(path, encoding='utf-8') as f:
        source = f.read()
      for node in ast.walk(ast.parse(source)):
        modules = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                   [node.module or ''] if isinstance(node, ast.ImportFrom) else [])
        crossings += [f'{room}/{name}:{node.lineno}: {m}' for m in modules
                      if m == 'conftest' or (m.startswith('tests') and m != 'tests.support')]
        if room == 'unit':
          if isinstance(node, ast.FunctionDef) and {'trained_run', 'dat_run'} & {a.arg for a in node.args.args}:
            heavy.append(f'unit/{name}:{node.lineno}: {node.name} takes a trained run')
          if isinstance(node, ast.Name) and node.id == 'train_and_evaluate':
            heavy.append(f'unit/{name}:{node.lineno}: trains a run')
          if isinstance(node, ast.List) and any(
              isinstance(a, ast.Constant) and a.value == '-m' and isinstance(b, ast.Constant)
              and str(b.value).startswith(('nat_jax', 'benchmarks')) for a, b in zip(node.elts, node.elts[1:])):
            heavy.append(f'unit/{name}:{node.lineno}: runs one of our commands (python -m)')
  assert not crossings, 'tests import helpers from tests/support.py only:\n' + '\n'.join(crossings)
  assert not heavy, 'end-to-end work belongs in tests/integration:\n' + '\n'.join(heavy)


REPOSITORY_CHECKS = {'layers', 'lint'}  # tests/unit/test_<check>.py of the repository as a whole


def named_files(test_name: str) -> list[str]:
  """The files a unit test module `test_<room>_<module>.py` (or `test_<module>.py`, `test_<room>.py`) is named
  after: nat_jax/<room>/<module>.py, nat_jax/<module>.py, the room nat_jax/<room>/, benchmarks/<room>/<module>.py."""
  stem = test_name[len('test_'):-len('.py')]
  candidates = [os.path.join(PACKAGE, stem + '.py'), os.path.join(PACKAGE, stem, '__init__.py')]
  for i, char in enumerate(stem):
    if char == '_':
      room, module = stem[:i], stem[i + 1:]
      candidates += [os.path.join(PACKAGE, room, module + '.py')]
      if room == 'benchmarks':
        candidates += [os.path.join(BENCHMARKS, r.split('.')[1], module + '.py') for r in BENCHMARK_ROOMS]
  return [c for c in candidates if os.path.isfile(c)]


def test_unit_tests_are_named_after_what_they_test():
  """The unit tests of nat_jax/<room>/<module>.py are tests/unit/test_<room>_<module>.py (a top-level module's:
  test_<module>.py; a room's tests across its modules: test_<room>.py; benchmarks/<room>/<module>.py's:
  test_benchmarks_<module>.py), so a reader finds them without searching; and no module has two such files."""
  names = [n for n in os.listdir(os.path.join(REPO, 'tests', 'unit')) if n.startswith('test_') and n.endswith('.py')]
  unnamed = [n for n in names if n[len('test_'):-3] not in REPOSITORY_CHECKS and len(named_files(n)) != 1]
  assert not unnamed, f'unit tests not named after one module (or room) they test: {sorted(unnamed)}'


def benchmark_imports(path: str):
  """(imported benchmarks module, line) and the private nat_jax names a benchmark uses (`from nat_jax.x import _y`,
  `x._y` on an imported nat_jax name), as 'name:line'."""
  tree = ast.parse(open(path, encoding='utf-8').read())
  ours, private = [], []
  bound = set()  # names bound to nat_jax modules or objects
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.module:
      if node.module.startswith('benchmarks'):
        ours += [(f'{node.module}.{a.name}', node.lineno) for a in node.names]
      elif node.module.startswith('nat_jax'):
        bound.update(a.asname or a.name for a in node.names)
        private += [f'{a.name}:{node.lineno}' for a in node.names if a.name.startswith('_')]
    elif isinstance(node, ast.Import):
      ours += [(a.name, node.lineno) for a in node.names if a.name.startswith('benchmarks')]
      bound.update((a.asname or a.name).split('.')[0] for a in node.names if a.name.startswith('nat_jax'))
  for node in ast.walk(tree):
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound
            and node.attr.startswith('_') and not node.attr.startswith('__')):
      private.append(f'{node.value.id}.{node.attr}:{node.lineno}')
  return ours, private


def test_benchmarks_live_in_rooms_import_down_and_use_public_names():
  """Every benchmark sits in a room of BENCHMARK_ROOMS; it imports its own room or lower ones, of nat_jax's
  commands only the command-line helper (cli), and no private nat_jax name."""
  problems = []
  for module, path in modules(BENCHMARKS):
    if module == 'benchmarks':
      continue
    room = '.'.join(module.split('.')[:2])
    if room not in BENCHMARK_ROOMS:
      problems.append(f'{module}: in no room of {sorted(BENCHMARK_ROOMS)}')
      continue
    ours, private = benchmark_imports(path)
    for imported, line in ours:
      other = '.'.join(imported.split('.')[:2])
      if other != room and BENCHMARK_ROOMS.get(other, 99) >= BENCHMARK_ROOMS[room]:
        problems.append(f'{module}:{line} imports {imported} (not a lower room)')
    problems += [f'{module}:{line} imports {imported} (a command)' for imported, line in nat_jax_imports(path, module)
                 if imported.startswith('nat_jax.commands') and imported not in PUBLIC_COMMAND_HELPERS]
    problems += [f'{module} uses the private {name}' for name in private]
  assert not problems, '\n'.join(problems)


def test_the_models_ask_their_weights_not_whether_they_are_int8():
  """Quantization is injected at one point (layers.FloatWeights, and int8.py's Int8Weights): no other model module
  reads an `int8` setting, attribute or argument."""
  readers = []
  for module, path in modules():
    if module.startswith('nat_jax.models') and module != 'nat_jax.models.int8':
      for node in ast.walk(ast.parse(open(path, encoding='utf-8').read())):
        name = (node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name)
                else node.arg if isinstance(node, (ast.keyword, ast.arg)) else None)
        if name == 'int8':
          readers.append(f'{module}:{node.lineno}')
  assert not readers, readers
