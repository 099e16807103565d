"""Writing files so that a reader never sees half of one and a failure leaves nothing behind.

`atomic_output(path)` writes to `<path>.tmp<pid>` and renames it over `path` only when the block
ends without an error (an existing file stays as it was until then); on any error, a full disk
included, the temporary file is removed. A process killed mid-write (SIGKILL) can leave a
temporary file: `remove_stale_temporaries(directory)` clears those on the next run.
"""
from __future__ import annotations

import contextlib
import os
import re
from typing import IO, Iterator, Union

TMP_SUFFIX = re.compile(r'\.tmp\d+$')


@contextlib.contextmanager
def atomic_output(path: str, mode: str = 'w', fsync: bool = True) -> Iterator[IO]:
  """A file object for `path` (text mode: UTF-8, no newline translation) that replaces `path`
  atomically when the block succeeds and is removed when it fails."""
  tmp = f'{path}.tmp{os.getpid()}'
  kwargs = {} if 'b' in mode else {'encoding': 'utf-8', 'newline': ''}
  try:
    with open(tmp, mode, **kwargs) as f:
      yield f
      f.flush()
      if fsync:
        os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    with contextlib.suppress(OSError):
      os.remove(tmp)
    raise


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
