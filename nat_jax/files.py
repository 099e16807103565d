"""Writing files so that a reader never sees half of one and a failure leaves nothing behind.

`atomic_output(path)` is the one writer of every artifact (translations, distillation chunks,
configs, tokenizers, LMs, pictures, reports). What it does depends on what `path` is:
- missing or a regular file: it writes `<path>.tmp<pid>` and renames it over `path` only when the
  block ends without an error (an existing file keeps its content, and gives the new one its
  permission bits); on any error, a full disk included, the temporary file is removed;
- a symbolic link: the same, over the file the link points to (the link stays a link);
- a character device, FIFO or socket (`--output=/dev/stdout`, a pipe): written in place, as there
  is nothing to rename over: renaming would replace the device node by a regular file;
- a directory: IsADirectoryError.
Every write, the flush and the close are checked (errors propagate as OSError). A process killed
mid-write (SIGKILL) can leave a temporary file: `remove_stale_temporaries(directory)` clears those on
the next run.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shutil
import stat
from typing import IO, Iterator, Union

from nat_jax.errors import ResourceBusy

TMP_SUFFIX = re.compile(r'\.tmp\d+$')


def _kind(path: str) -> str:
  """'missing', 'file', 'dir' or 'special' (a device, FIFO or socket) for the file `path` names."""
  try:
    mode = os.stat(path).st_mode
  except FileNotFoundError:
    return 'missing'
  if stat.S_ISREG(mode):
    return 'file'
  return 'dir' if stat.S_ISDIR(mode) else 'special'


@contextlib.contextmanager
def atomic_output(path: str, mode: str = 'w', fsync: bool = True) -> Iterator[IO]:
  """A file object for `path` (text mode: UTF-8, no newline translation) that replaces `path`
  atomically when the block succeeds and is removed when it fails; a device or FIFO is written in
  place (see the module docstring)."""
  target = os.path.realpath(path)  # a symlink: its target is written, the link kept
  kind = _kind(target)
  kwargs = {} if 'b' in mode else {'encoding': 'utf-8', 'newline': ''}
  if kind == 'dir':
    raise IsADirectoryError(errno.EISDIR, 'is a directory; give a file path', path)
  if kind == 'special':
    with _written(path, target, mode, kwargs, fsync=False) as f:
      yield f
    return
  tmp = f'{target}.tmp{os.getpid()}'
  try:
    with _written(path, tmp, mode, kwargs, fsync) as f:
      yield f
    if kind == 'file':
      shutil.copymode(target, tmp)
    os.replace(tmp, target)
  except BaseException:
    with contextlib.suppress(OSError):
      os.remove(tmp)
    raise


@contextlib.contextmanager
def _written(path: str, where: str, mode: str, kwargs: dict, fsync: bool) -> Iterator[IO]:
  """`where` open for writing; flushed (and fsync'd) and closed after the block. An OSError without a
  file name in the block or after it (a full disk shows at a write, the flush or the close) is raised
  again naming `path`."""
  f = open(where, mode, **kwargs)
  try:
    with _naming(path):
      yield f
      f.flush()
      if fsync:
        os.fsync(f.fileno())
      f.close()
  finally:
    with contextlib.suppress(OSError):
      f.close()


@contextlib.contextmanager
def _naming(path: str):
  """An OSError without a file name (a failed write, flush or close) raised again naming `path`."""
  try:
    yield
  except OSError as e:
    if e.filename:
      raise
    raise type(e)(e.errno, e.strerror or str(e), path) from e


@contextlib.contextmanager
def exclusive(path: str, what: str, holder: str) -> Iterator[None]:
  """Holds an exclusive lock (flock) on the file `path` for the block; a second holder gets a
  ResourceBusy error at once, naming `what` and the process that holds it. The lock dies with its
  process (no stale lock after a kill); the file stays."""
  f = open(path, 'a+', encoding='utf-8')
  try:
    try:
      fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      f.seek(0)
      owner = f.read().strip() or 'another process'
      raise ResourceBusy(f'{what} is in use: {holder} is running there ({owner}); wait for it to finish or stop '
                         'it first.') from None
    f.seek(0)
    f.truncate()
    f.write(f'pid {os.getpid()}\n')
    f.flush()
    yield
  finally:
    f.close()


def write_atomic(path: str, content: Union[str, bytes]):
  """Replace `path` by `content` atomically (see atomic_output)."""
  with atomic_output(path, 'wb' if isinstance(content, bytes) else 'w') as f:
    f.write(content)


def remove_stale_temporaries(directory: str) -> list[str]:
  """Remove the `*.tmp<pid>` files under `directory` that a killed process left (none of a live
  writer of this process); returns their paths."""
  removed = []
  for root, _, names in os.walk(directory):
    for name in names:
      if TMP_SUFFIX.search(name) and not name.endswith(f'.tmp{os.getpid()}'):
        path = os.path.join(root, name)
        with contextlib.suppress(OSError):
          os.remove(path)
          removed.append(path)
  return sorted(removed)
