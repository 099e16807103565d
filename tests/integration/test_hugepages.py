"""The command lines' allocator setting: when a `python -m` command re-executes itself, and that it does."""
import os
import subprocess
import sys

from nat_jax import hugepages
from tests.support import REPO

GLIBC, THP = (2, 36), True


def env_for(argv, environ=None, glibc=GLIBC, thp=THP):
  return hugepages.tuned_environment(environ or {'PATH': '/bin'}, argv, glibc, thp)


def test_module_of_command_lines():
  assert hugepages.module_of(['python', '-m', 'nat_jax.train', '--config=x']) == 'nat_jax.train'
  argv = ['python3', '-X', 'importtime', '-u', '-m', 'benchmarks.components.train_speed']
  assert hugepages.module_of(argv) == 'benchmarks.components.train_speed'
  assert hugepages.module_of(['python', 'script.py', '-m', 'nat_jax.train']) is None
  assert hugepages.module_of(['python', '-c', 'import nat_jax', '-m', 'x']) is None
  assert hugepages.module_of(['python']) is None


def test_console_scripts_re_execute_too():
  """pip's launcher runs `python <bin>/nat-jax-train ...`: ours re-execute, other scripts do not."""
  assert hugepages.console_script_of(['/venv/bin/python', '/venv/bin/nat-jax-train', '--config=x']) == 'nat-jax-train'
  assert hugepages.console_script_of(['/venv/bin/python', '/venv/bin/pytest']) is None
  assert env_for(['/venv/bin/python', '/venv/bin/nat-jax-translate'])['GLIBC_TUNABLES'] == hugepages.TUNABLE
  assert env_for(['/venv/bin/python', '/venv/bin/pytest', '-q']) is None


def test_which_processes_re_execute():
  env = env_for(['python', '-m', 'nat_jax.train'])
  assert env == {'PATH': '/bin', 'GLIBC_TUNABLES': hugepages.TUNABLE}
  assert env_for(['python', '-m', 'benchmarks.components.decode_speed'])['GLIBC_TUNABLES'] == hugepages.TUNABLE
  kept = env_for(['python', '-m', 'nat_jax.train'], {'GLIBC_TUNABLES': 'glibc.malloc.arena_max=2'})
  assert kept['GLIBC_TUNABLES'] == 'glibc.malloc.arena_max=2:' + hugepages.TUNABLE  # other tunables kept
  for argv, environ, glibc, thp in [
      (['python', '-m', 'pytest'], None, GLIBC, THP),                     # not one of our commands
      (['python', 'train.py'], None, GLIBC, THP),                           # not `-m`
      (['python', '-m', 'nat_jax.train'], {hugepages.OPT_OUT: '0'}, GLIBC, THP),
      (['python', '-m', 'nat_jax.train'], {'GLIBC_TUNABLES': 'glibc.malloc.hugetlb=0'}, GLIBC, THP),  # user's choice
      (['python', '-m', 'nat_jax.train'], None, None, THP),                 # macOS, musl, Windows
      (['python', '-m', 'nat_jax.train'], None, (2, 34), THP),              # glibc without the tunable
      (['python', '-m', 'nat_jax.train'], None, GLIBC, False)]:             # THP 'never'
    assert env_for(argv, environ, glibc, thp) is None, (argv, environ, glibc, thp)


def test_thp_setting_is_read(tmp_path):
  setting = tmp_path / 'enabled'
  for text, enabled in (('always [madvise] never\n', True), ('[always] madvise never\n', True),
                        ('always madvise [never]\n', False)):
    setting.write_text(text)
    assert hugepages.transparent_hugepages_enabled(str(setting)) is enabled
  assert hugepages.transparent_hugepages_enabled(str(tmp_path / 'missing')) is False


def run_module(extra_env):
  env = {k: v for k, v in os.environ.items() if k not in ('GLIBC_TUNABLES', hugepages.OPT_OUT)}
  result = subprocess.run([sys.executable, '-m', 'nat_jax.hugepages'], cwd=REPO, capture_output=True, text=True,
                          env={**env, **extra_env}, timeout=120)
  assert result.returncode == 0, result.stderr
  return result.stdout


def test_a_command_line_re_executes_itself_with_the_tunable():
  if hugepages.tuned_environment({}, ['python', '-m', 'nat_jax.x'], hugepages.glibc_version(),
                                 hugepages.transparent_hugepages_enabled()) is None:
    assert 'hugetlb' not in run_module({})  # this machine does not qualify: the process runs as started
    return
  assert f"GLIBC_TUNABLES='{hugepages.TUNABLE}'" in run_module({})
  assert "GLIBC_TUNABLES=''" in run_module({hugepages.OPT_OUT: '0'})
