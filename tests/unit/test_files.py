"""The one writer of every artifact (nat_jax.files): what it does with each kind of path.

Device nodes are made here with mknod in a temporary directory (skipped where mknod is not allowed),
never the machine's /dev/full or /dev/null: a writer that renames over its path would replace the
machine's own device when the tests run as root.
"""
import errno
import json
import os
import stat
import threading

import pytest

from nat_jax.decode import arpa
from nat_jax.errors import DataError, ResourceBusy
from nat_jax.files import atomic_output, exclusive, write_atomic
from nat_jax.viz.dag import DagPicture, DecoderPath, write_png
from tests.support import device

OLD = 'what was there before\n'


def is_char_device(path: str) -> bool:
  return stat.S_ISCHR(os.lstat(path).st_mode)


def arpa_model():
  return arpa.estimate([['a', 'b'], ['b', 'a', 'b']], 2)


def picture() -> DagPicture:
  top = [[('a', 0.9)], [('b', 0.8)]]
  return DagPicture('a b', top, [(0, 1, 1.0)], {'greedy': DecoderPath([0, 1], ['a', 'b'], 'a b')})


# Each artifact writer, as (name, write(path)).
WRITERS = [
    ('text', lambda path: write_atomic(path, 'new\n')),
    ('json', lambda path: write_atomic(path, json.dumps({'k': 1}))),
    ('bytes', lambda path: write_atomic(path, b'\x00\x01' * 1000)),
    ('arpa', lambda path: arpa.write_arpa(arpa_model(), path)),
    ('png', lambda path: write_png(picture(), path)),
]


@pytest.mark.parametrize('name,write', WRITERS, ids=[w[0] for w in WRITERS])
def test_a_full_device_is_one_os_error_naming_it_and_stays_a_device(tmp_path, name, write):
  full = device(tmp_path, 'full', 7)
  with pytest.raises(OSError) as e:
    write(full)
  assert e.value.errno == errno.ENOSPC and e.value.filename == full
  assert is_char_device(full) and os.listdir(tmp_path) == ['full']


@pytest.mark.parametrize('name,write', WRITERS, ids=[w[0] for w in WRITERS])
def test_a_failed_write_keeps_the_old_file(tmp_path, name, write, monkeypatch):
  path = tmp_path / f'out.{name}'
  path.write_text(OLD)
  real_fsync = os.fsync

  def full_disk(fd):
    raise OSError(errno.ENOSPC, 'No space left on device')
  monkeypatch.setattr(os, 'fsync', full_disk)
  with pytest.raises(OSError, match='No space left') as e:
    write(str(path))
  assert e.value.filename == str(path)
  monkeypatch.setattr(os, 'fsync', real_fsync)
  assert path.read_text() == OLD and os.listdir(tmp_path) == [path.name]
  write(str(path))
  assert path.read_bytes() != OLD.encode()


def test_a_device_that_takes_everything_is_written_in_place(tmp_path):
  null = device(tmp_path, 'null', 3)
  write_atomic(null, 'translated\n' * 100)
  assert is_char_device(null) and os.listdir(tmp_path) == ['null']


def test_a_fifo_is_written_in_place(tmp_path):
  fifo = str(tmp_path / 'pipe')
  os.mkfifo(fifo)
  got = []
  reader = threading.Thread(target=lambda: got.append(open(fifo, encoding='utf-8').read()))
  reader.start()
  write_atomic(fifo, 'one\ntwo\n')
  reader.join(timeout=30)
  assert got == ['one\ntwo\n'] and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_symlink_stays_a_link_and_its_target_is_replaced(tmp_path):
  target = tmp_path / 'real.txt'
  target.write_text(OLD)
  link = tmp_path / 'link.txt'
  link.symlink_to(target)
  write_atomic(str(link), 'new\n')
  assert link.is_symlink() and target.read_text() == 'new\n'
  dangling = tmp_path / 'dangling.txt'
  dangling.symlink_to(tmp_path / 'made.txt')
  write_atomic(str(dangling), 'made\n')
  assert dangling.is_symlink() and (tmp_path / 'made.txt').read_text() == 'made\n'


def test_a_directory_is_refused_and_kept(tmp_path):
  (tmp_path / 'd').mkdir()
  with pytest.raises(IsADirectoryError):
    write_atomic(str(tmp_path / 'd'), 'x')
  assert (tmp_path / 'd').is_dir()


def test_a_replaced_file_keeps_its_permission_bits(tmp_path):
  path = tmp_path / 'out.txt'
  path.write_text(OLD)
  os.chmod(path, 0o640)
  write_atomic(str(path), 'new\n')
  assert stat.S_IMODE(os.stat(path).st_mode) == 0o640 and path.read_text() == 'new\n'


@pytest.mark.skipif(os.geteuid() == 0, reason='root writes into read-only directories')
def test_a_read_only_directory_is_one_os_error_and_keeps_the_file(tmp_path):
  path = tmp_path / 'out.txt'
  path.write_text(OLD)
  os.chmod(tmp_path, 0o555)
  try:
    with pytest.raises(PermissionError):
      write_atomic(str(path), 'new\n')
  finally:
    os.chmod(tmp_path, 0o755)
  assert path.read_text() == OLD and os.listdir(tmp_path) == ['out.txt']


def test_an_error_inside_the_block_keeps_the_old_file(tmp_path):
  path = tmp_path / 'out.txt'
  path.write_text(OLD)
  with pytest.raises(RuntimeError):
    with atomic_output(str(path)) as f:
      f.write('half')
      raise RuntimeError('decoder failed')
  assert path.read_text() == OLD and os.listdir(tmp_path) == ['out.txt']


def test_a_lock_is_refused_while_held_and_free_after(tmp_path):
  lock = str(tmp_path / 'train.lock')
  with exclusive(lock, '--workdir=w', 'a training'):
    busy = rf'--workdir=w is in use: a training is running there \(pid {os.getpid()}\)'
    with pytest.raises(ResourceBusy, match=busy):
      with exclusive(lock, '--workdir=w', 'a training'):
        pass
  with exclusive(lock, '--workdir=w', 'a training'):
    pass


@pytest.mark.parametrize('line,problem', [
    ('nan\ta', 'log10 probability nan'),
    ('0.5\ta', 'log10 probability 0.5'),
    ('inf\ta', 'log10 probability inf'),
    ('-1.0\ta\tnan', 'log10 probability -1.0 / backoff nan'),
])
def test_an_arpa_file_with_impossible_values_is_refused(tmp_path, line, problem):
  path = tmp_path / 'lm.arpa'
  path.write_text(f'\\data\\\nngram 1=3\n\n\\1-grams:\n-1.0\t<unk>\n-1.0\t</s>\n{line}\n\n\\end\\\n')
  with pytest.raises(DataError, match=f'{path}:7: {problem}'):
    arpa.read_arpa(str(path))


def test_an_arpa_header_that_is_not_a_count_is_refused(tmp_path):
  path = tmp_path / 'lm.arpa'
  path.write_text('\\data\\\nngram x=3\n')
  with pytest.raises(DataError, match=r"lm.arpa:2: 'x' in a header line is not a whole number"):
    arpa.read_arpa(str(path))
