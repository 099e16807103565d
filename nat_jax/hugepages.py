"""Linux/glibc: nat_jax's command lines run with glibc's transparent-huge-page malloc.

On the CPU backend XLA allocates and frees buffers above glibc's mmap threshold (32 MiB at most;
e.g. a bucket's [rows, length, vocab] logits and their gradients) on every step, and each fresh
mapping is faulted in 4 KiB page by page. GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (glibc >= 2.35) makes
malloc ask for transparent huge pages (madvise): far fewer faults and faster steps, the same training
results (measured: docs/lab-notes/2026-11-21-at-tiny.md).

glibc reads its tunables when a process starts, so the command lines (`python -m nat_jax.<command>`, the
`nat-jax-<command>` console scripts) re-execute themselves once with the tunable added, from their entry point
(nat_jax.commands.launch) before the command's modules (or JAX) are imported; `python -m benchmarks.<room>.<name>`
re-executes from `cli.run_command`, after its imports, before JAX allocates anything. Nothing happens when the
tunable is already set, on other systems (macOS, musl, Windows, glibc < 2.35), when transparent huge pages are
disabled ('never'), or with NAT_JAX_HUGEPAGES=0 in the environment. Importing nat_jax as a library never
re-executes anything.
"""
from __future__ import annotations

import os
import sys
from typing import Mapping, Optional, Sequence

TUNABLE = 'glibc.malloc.hugetlb=1'
OPT_OUT = 'NAT_JAX_HUGEPAGES'  # set to 0 to keep the process as started
PACKAGES = ('nat_jax.', 'benchmarks.')  # `python -m` targets that re-execute
CONSOLE_PREFIX = 'nat-jax-'  # and the installed console scripts (pyproject.toml), from their console()
THP_SETTING = '/sys/kernel/mm/transparent_hugepage/enabled'


def glibc_version() -> Optional[tuple[int, int]]:
  """(major, minor) of the C library when it is glibc, else None."""
  try:
    name, version = os.confstr('CS_GNU_LIBC_VERSION').split()
    major, minor = version.split('.')[:2]
    return (int(major), int(minor)) if name == 'glibc' else None
  except (AttributeError, ValueError, OSError):
    return None


def transparent_hugepages_enabled(path: str = THP_SETTING) -> bool:
  """Whether the kernel grants transparent huge pages to madvise() callers ('always' or 'madvise')."""
  try:
    with open(path) as f:
      return '[never]' not in f.read()
  except OSError:
    return False


def module_of(argv: Sequence[str]) -> Optional[str]:
  """The module of a `python [options] -m <module> ...` command line (sys.orig_argv), else None."""
  i = 1
  while i < len(argv):
    arg = argv[i]
    if arg == '-m':
      return argv[i + 1] if i + 1 < len(argv) else None
    if arg in ('-X', '-W'):  # interpreter options with a separate value
      i += 2
    elif arg.startswith('-') and arg not in ('-', '-c'):
      i += 1
    else:  # a script, `-c <command>` or stdin
      return None
  return None


def console_script_of(argv: Sequence[str]) -> Optional[str]:
  """The name of one of our console scripts run as `python <bin>/nat-jax-<command> ...` (how pip's
  launchers run; sys.orig_argv), else None."""
  name = os.path.basename(argv[1]) if len(argv) > 1 else ''
  return name if name.startswith(CONSOLE_PREFIX) else None


def tuned_environment(environ: Mapping[str, str], orig_argv: Sequence[str], glibc: Optional[tuple[int, int]],
                      thp: bool) -> Optional[dict[str, str]]:
  """The environment to re-execute with, or None when this process should run as it is."""
  module = module_of(orig_argv)
  ours = (module is not None and module.startswith(PACKAGES)) or console_script_of(orig_argv) is not None
  tunables = environ.get('GLIBC_TUNABLES', '')
  if (not ours or environ.get(OPT_OUT) == '0'
      or 'glibc.malloc.hugetlb' in tunables or glibc is None or glibc < (2, 35) or not thp):
    return None
  return {**environ, 'GLIBC_TUNABLES': f'{tunables}:{TUNABLE}' if tunables else TUNABLE}


def reexec_command_line():
  """Re-execute `python -m nat_jax.<command> ...` (or a `nat-jax-<command>` console script) with the
  tunable when it helps (see module doc)."""
  orig_argv = getattr(sys, 'orig_argv', None)
  if not orig_argv or not sys.executable:
    return
  env = tuned_environment(os.environ, orig_argv, glibc_version(), transparent_hugepages_enabled())
  if env is not None:
    for stream in (sys.stdout, sys.stderr):
      if stream is not None:  # None: the process was started with it closed
        stream.flush()
    os.execve(sys.executable, [sys.executable, *orig_argv[1:]], env)


if __name__ == '__main__':  # python -m nat_jax.hugepages: what this machine's command lines run with
  reexec_command_line()  # as a command line's entry point does (nat_jax.commands.launch)
  print(f'GLIBC_TUNABLES={os.environ.get("GLIBC_TUNABLES", "")!r} glibc={glibc_version()} '
        f'transparent_hugepages={transparent_hugepages_enabled()}')
