"""Two local CPU processes joined by jax.distributed.initialize train on globally sharded batches."""
import os
import socket
import subprocess
import sys

from tests.support import REPO, config_flags_for, tiny_config, xla_flags


def free_port() -> int:
  with socket.socket() as s:
    s.bind(('localhost', 0))
    return s.getsockname()[1]


def test_two_process_training(tmp_path, corpus, compile_cache):
  workdir = tmp_path / 'run'
  config = tiny_config(corpus, compile_cache, total_steps=4, eval_every=4, checkpoint_every=2)
  port = free_port()
  env = {**os.environ, 'JAX_PLATFORMS': 'cpu', 'XLA_FLAGS': xla_flags()}
  procs = [subprocess.Popen(
      [sys.executable, '-m', 'nat_jax.train', '--config=configs/at_bible_tiny.py', f'--workdir={workdir}',
       f'--coordinator_address=localhost:{port}', '--num_processes=2', f'--process_id={i}',
       *config_flags_for(config)], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
      for i in range(2)]
  outs = [p.communicate(timeout=600)[0] for p in procs]
  for p, out in zip(procs, outs):
    assert p.returncode == 0, out[-4000:]
  assert '2 process(es)' in outs[0] and "mesh {'data': 2, 'model': 1} over 2 devices" in outs[0]
  assert 'BLEU (1 reference)' in outs[0]
  assert (workdir / 'checkpoints' / '4').is_dir()
