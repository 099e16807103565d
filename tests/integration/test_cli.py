"""translate / evaluate command lines on a trained tiny run."""
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from nat_jax import decode
from nat_jax.run.translation import translate_texts
from nat_jax.run.workdir import load_run
from tests.support import REPO

HOSTILE_LINES = [
    'In the beginning God created the heavens and the earth.',
    '',
    '   ',
    'And God said, Let there be light.\r',
    'bad bytes \udcff ☃ 𝔘 \x07 emoji 🙂 中文',
    ' word' * 300,
    'The end.',
]


def test_translate_keeps_line_count_and_order_on_hostile_input(trained_run, tmp_path):
  raw = '\n'.join(HOSTILE_LINES).encode('utf-8', errors='surrogateescape')  # \udcff -> invalid byte 0xff
  result = subprocess.run([sys.executable, '-m', 'nat_jax.translate', f'--workdir={trained_run}',
                           '--batch_size=4', '--chunk_lines=3'], input=raw, cwd=REPO, capture_output=True,
                          timeout=600)
  assert result.returncode == 0, result.stderr.decode()[-3000:]
  out_lines = result.stdout.decode('utf-8').split('\n')
  assert out_lines[-1] == '' and len(out_lines) - 1 == len(HOSTILE_LINES)
  out_lines = out_lines[:-1]
  assert out_lines[1] == '' and out_lines[2] == ''
  assert 'truncated' in result.stderr.decode() and 'input line 6' in result.stderr.decode()
  # Order: each line translated alone (batch of one) gives the same output as in the batch.
  run = load_run(trained_run)
  decode_fn, _ = decode.build_decoder(run.method, 'greedy', {})
  texts = [line.rstrip('\r') for line in raw.decode('utf-8', errors='replace').split('\n')]
  for i, text in enumerate(texts):
    alone, _ = translate_texts(run, [text], decode_fn, 1)
    assert alone[0] == out_lines[i], (i, alone[0], out_lines[i])


def test_translate_without_a_trained_run_is_a_clear_error(tmp_path):
  result = subprocess.run([sys.executable, '-m', 'nat_jax.translate', f'--workdir={tmp_path}'], input=b'hi\n',
                          cwd=REPO, capture_output=True, timeout=300)
  assert result.returncode == 2 and b'Train first' in result.stderr and result.stdout == b''
  assert b'--config=<recipe>' in result.stderr  # the workdir's name is no recipe's: one to choose


def test_the_train_command_a_missing_run_suggests_is_the_recipe_of_its_name(tmp_path):
  from nat_jax.run.workdir import train_command
  workdir = str(tmp_path / 'dat_bible_tiny')
  assert train_command(workdir) == f'python -m nat_jax.train --config=dat_bible_tiny --workdir={workdir}'


def test_evaluate_is_the_benchmark_on_one_run(trained_run, tmp_path):
  """--decoder.<opt> reaches the decoders that have it; each decoder gets a row with quality and speed;
  words/s of a pass = its words / its time, consistent with the mean latency."""
  out = tmp_path / 'eval'
  result = subprocess.run([sys.executable, '-m', 'nat_jax.evaluate', f'--workdir={trained_run}',
                           '--decoders=greedy,beam', '--decoder.beam_size=2', '--latency_sentences=3',
                           '--batch1_runs=2', '--batch_sizes=1,8', f'--out={out}'], cwd=REPO, capture_output=True,
                          text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  report = json.loads((out / 'results.json').read_text())
  assert [r['decoder_spec'] for r in report['rows']] == ['greedy', 'beam/beam_size=2']
  assert report['rows'][1]['options']['beam_size'] == 2 and report['sentences'] == 16
  words = sum(len(e.split('\t')[0].split()) for e in open(report_sources(trained_run)).read().splitlines()[:3])
  for r in report['rows']:
    q, b1 = r['quality'], r['speed']['batch1']
    assert len(q['per_ref']) == 2 and q['all_refs']['num_refs'] == 2 and 'nrefs:2' in q['all_refs']['bleu_signature']
    implied = words / (b1['latency_ms_mean'] / 1000 * 3)
    assert 0.5 < b1['source_words_per_s'] / implied < 2, (r, implied)
  assert '| beam/beam_size=2 |' in (out / 'results.md').read_text()
  assert report['rows'][1]['vs_baseline']['beam']['batch1'] == 1.0  # its own beam is the baseline


def report_sources(workdir: str) -> str:
  """The test-split file of a tiny run (TSV, source first)."""
  return load_run(workdir).config.data.test_files


def test_half_precision_loads_cast_params_and_stays_close(trained_run):
  import jax
  import jax.numpy as jnp
  full = load_run(trained_run)
  src = jnp.array([[10, 11, 12, 13, 1, 0]])
  tgt = jnp.array([[20, 21, 22, 1]])
  from nat_jax.methods.autoregressive import autoregressive_inputs
  inputs = autoregressive_inputs(tgt)
  logp = lambda run: jax.nn.log_softmax(run.method.model.apply(
      {'params': run.params}, src, inputs.tokens, inputs.positions, inputs.self_mask()).astype(jnp.float32))
  for dtype in ('bfloat16', 'float16'):
    half = load_run(trained_run, dtype=dtype)
    leaves = jax.tree_util.tree_leaves(half.params)
    assert all(x.dtype == jnp.dtype(dtype) for x in leaves) and half.config.model.dtype == dtype
    assert float(jnp.max(jnp.abs(logp(half) - logp(full)))) < 0.1
    decode_fn, _ = decode.build_decoder(half.method, 'greedy', {})
    hyps, _ = translate_texts(half, ['In the beginning.', '', 'And God said.'], decode_fn, 2)
    assert len(hyps) == 3 and hyps[1] == ''


def test_int8_loads_quantized_weights_translates_and_is_refused_for_training(trained_run, tmp_path):
  """--quantization=int8 (load_run, Translator, translate): every weight matrix and the embedding in int8 with their
  scales, log-probabilities within the quantization error, one line per input line; training refuses it.
  Where the oneDNN kernel runs: each matrix packed once at load (never again, whatever is translated), the
  same translations as XLA's int8 dot, and the translate command's progress line names the engine."""
  import jax
  import jax.numpy as jnp

  from nat_jax import Translator
  from nat_jax.kernels import onednn
  from nat_jax.methods.autoregressive import autoregressive_inputs
  full, q = load_run(trained_run), load_run(trained_run, quantization='int8', int8_kernel='xla')
  flat = {jax.tree_util.keystr(k): v for k, v in jax.tree_util.tree_flatten_with_path(q.params)[0]}
  assert flat["['embed']['embedding']"].dtype == jnp.int8 and flat["['embed']['embedding_scale']"].dtype == jnp.float32
  assert all(v.dtype == jnp.int8 for k, v in flat.items() if k.endswith("['kernel']"))
  src, tgt = jnp.array([[10, 11, 12, 13, 1, 0]]), jnp.array([[20, 21, 22, 1]])
  inputs = autoregressive_inputs(tgt)
  logp = lambda run: jax.nn.log_softmax(run.method.model.apply(
      {'params': run.params}, src, inputs.tokens, inputs.positions, inputs.self_mask()))
  assert float(jnp.max(jnp.abs(logp(q) - logp(full)))) < 0.3
  lines = ['In the beginning.', '', 'And God said.', 'Let there be light.']
  by_xla = Translator.from_run(q).translate(lines)
  assert len(by_xla) == 4
  engine = onednn.resolve('auto')
  if engine == 'onednn':
    packs = onednn.pack_count
    kernel = Translator(trained_run, quantization='int8', int8_kernel='onednn', batch_size=2)
    packed = [x for x in jax.tree_util.tree_leaves(kernel.run.params) if x.dtype == jnp.uint8]
    assert onednn.pack_count - packs == len(packed) > 0 and kernel.precision == 'int8 (onednn kernel)'
    assert kernel.translate(lines) == by_xla and kernel.translate(lines[:1]) == by_xla[:1]
    assert onednn.pack_count - packs == len(packed)  # packed at load only
  result = subprocess.run([sys.executable, '-m', 'nat_jax.translate', f'--workdir={trained_run}',
                           '--quantization=int8'], input='In the beginning.\n\nAnd God said.\n', capture_output=True,
                          text=True, cwd=REPO, timeout=300)
  assert result.returncode == 0 and len(result.stdout.split('\n')) == 4, result.stderr
  assert f'int8 ({engine} {"kernel" if engine == "onednn" else "dot"})' in result.stderr, result.stderr
  refused = subprocess.run([sys.executable, '-m', 'nat_jax.train', '--config=configs/at_bible_tiny.py',
                            f'--workdir={tmp_path}/w', '--config.model.quantization=int8'], capture_output=True,
                           text=True, cwd=REPO, timeout=300)
  assert refused.returncode == 2 and 'int8 is for decoding a trained run' in refused.stderr, refused.stderr
  assert not os.path.exists(tmp_path / 'w')


def test_inference_precision_is_the_callers(trained_run, tmp_path):
  """A run trained with bf16 activations (as configs/at_base.py) computes in fp32 when loaded as float32,
  bitwise as the same run trained in fp32 does."""
  import jax.numpy as jnp
  bf16_run = str(tmp_path / 'bf16_run')
  shutil.copytree(trained_run, bf16_run)
  config = json.loads(open(os.path.join(bf16_run, 'config.json')).read())
  config['model']['dtype'] = 'bfloat16'
  with open(os.path.join(bf16_run, 'config.json'), 'w') as f:
    json.dump(config, f)
  src = jnp.array([[10, 11, 12, 13, 1, 0]])
  fp32, as_fp32, as_bf16 = load_run(trained_run), load_run(bf16_run), load_run(bf16_run, dtype='bfloat16')
  assert as_fp32.config.model.dtype == 'float32' and as_bf16.config.model.dtype == 'bfloat16'
  outputs = [decode.build_decoder(r.method, 'greedy', {})[0](r.params, src) for r in (fp32, as_fp32, as_bf16)]
  assert (outputs[1].scores == outputs[0].scores).all()
  assert (outputs[2].scores != outputs[0].scores).any()  # bf16 arithmetic is not fp32's


def test_evaluate_rejects_unknown_decoder_option(trained_run):
  result = subprocess.run([sys.executable, '-m', 'nat_jax.evaluate', f'--workdir={trained_run}', '--decoders=greedy',
                           '--decoder.beam_size=2'], cwd=REPO, capture_output=True, text=True, timeout=300)
  assert result.returncode == 2 and 'beam_size' in result.stderr



def test_help_lists_every_flag_with_its_rule_and_exits_0():
  """`--help` on every command (the real output, each in its own process): exit 0, and each of the command's
  flags named with what its value must be (absl lists only the main module's key flags)."""
  from nat_jax.commands import cli
  procs = {name: subprocess.Popen([sys.executable, '-m', f'nat_jax.{name}', '--help'], cwd=REPO, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) for name in cli.COMMANDS}
  for name, command_flags in cli.every_flag().items():
    out, _ = procs[name].communicate(timeout=300)
    assert procs[name].returncode == 0, (name, out[-2000:])
    flat = ''.join(out.split())  # absl wraps help at 80 columns (and after a hyphen): compare without spaces
    for f in command_flags:
      assert f'--{f.name}:' in flat or f'--[no]{f.name}:' in flat, (name, f.name)
      rule = f.rule_line('' if f.kind == 'enum' else f.requirement())
      assert ''.join(rule.split()) in flat, (name, f.name, rule)


def translate_cmd(workdir, *args):
  return [sys.executable, '-m', 'nat_jax.translate', f'--workdir={workdir}', *args]


def error_lines(stderr: str) -> list[str]:
  return [line for line in stderr.splitlines() if line.startswith('error: ')]


def closing(fd: int, cmd: list[str]) -> list[str]:
  """`cmd` started with file descriptor `fd` closed, as a shell's `<&-` / `>&-` / `2>&-` does."""
  return ['sh', '-c', 'exec "$@" ' + {0: '<&-', 1: '>&-', 2: '2>&-'}[fd], 'sh', *cmd]


def test_translate_started_with_a_standard_stream_closed(trained_run, tmp_path):
  """stdin or stdout closed (`<&-`, `>&-`): one error line naming the flag to use instead, before the run loads;
  stderr closed: the translation still reaches stdout (no message leaks into it)."""
  source = tmp_path / 'in.txt'
  source.write_text('In the beginning God created the heavens and the earth.\n')
  for fd, args, flag in ((0, (), '--input'), (1, (f'--input={source}',), '--output')):
    result = subprocess.run(closing(fd, translate_cmd(trained_run, *args)), cwd=REPO, capture_output=True, text=True,
                            timeout=300)
    errors = error_lines(result.stderr)
    assert result.returncode == 2 and len(errors) == 1 and flag in errors[0], result.stderr[-2000:]
  alone = subprocess.run(translate_cmd(trained_run, f'--input={source}'), cwd=REPO, capture_output=True, text=True,
                         timeout=300)
  closed = subprocess.run(closing(2, translate_cmd(trained_run, f'--input={source}')), cwd=REPO,
                          stdout=subprocess.PIPE, text=True, timeout=300)
  assert closed.returncode == 0 and closed.stdout == alone.stdout and len(closed.stdout.splitlines()) == 1


def test_commands_write_utf8_whatever_the_locale_says():
  """PYTHONIOENCODING=ascii (or LANG=C): stdout still takes German text, as UTF-8 (input is read as UTF-8)."""
  code = 'from nat_jax.commands import cli; cli.utf8_streams(); print("Grüße, Straße"); import sys; ' \
         'print("ä", file=sys.stderr)'
  result = subprocess.run([sys.executable, '-c', code], cwd=REPO, capture_output=True, timeout=120,
                          env={**os.environ, 'PYTHONIOENCODING': 'ascii'})
  assert result.returncode == 0 and result.stdout == 'Grüße, Straße\n'.encode('utf-8'), result.stderr[-2000:]
  assert 'ä'.encode('utf-8') in result.stderr


@pytest.mark.parametrize('sig', [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)])  # one path
def test_a_signal_mid_translation_leaves_no_output_and_one_stopped_line(trained_run, tmp_path, sig):
  """SIGTERM or Ctrl-C while `translate --output=F` works: F is not written, no F.tmp<pid> is left, one
  `stopped by ...` line (no `error:`), status 128 + the signal."""
  source = tmp_path / 'in.txt'
  source.write_text('And God said, Let there be light: and there was light.\n' * 4000)
  out = tmp_path / 'out.txt'
  proc = subprocess.Popen(translate_cmd(trained_run, f'--input={source}', f'--output={out}', '--chunk_lines=64'),
                          cwd=REPO, stderr=subprocess.PIPE, text=True)
  for line in proc.stderr:  # the first chunk is done: the output is being written
    if line.startswith('translated '):
      break
  proc.send_signal(sig)
  stderr = proc.stderr.read()
  proc.wait(timeout=300)
  assert proc.returncode == 128 + sig, stderr[-2000:]
  stopped = [line for line in stderr.splitlines() if line.startswith('stopped by ')]
  assert stopped == [f'stopped by {sig.name}: no output was left half-written; rerun the same command.'], stderr[-2000:]
  assert error_lines(stderr) == [], stderr[-2000:]
  assert 'Traceback' not in stderr and os.listdir(tmp_path) == ['in.txt']


def test_importing_nat_jax_does_nothing_to_the_process():
  """`import nat_jax` leaves JAX's configuration, sys.meta_path and the process as they were (the command lines
  set their process up in their entry point); a command still runs as `python -m` from the checkout alone."""
  probe = ('import sys; before = list(sys.meta_path); import nat_jax; light = "jax" not in sys.modules; import jax; '
           'print(jax.config.jax_platforms, sys.meta_path == before, light)')
  env = {k: v for k, v in os.environ.items() if k not in ('JAX_PLATFORMS', 'GLIBC_TUNABLES')}
  plain = subprocess.run([sys.executable, '-c', probe.replace('import nat_jax;', '')], cwd=REPO,
                         env=env, capture_output=True, text=True, timeout=120)
  ours = subprocess.run([sys.executable, '-c', probe], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
  assert ours.returncode == 0 and ours.stdout == plain.stdout, (ours.stdout, plain.stdout, ours.stderr[-2000:])
  assert ours.stdout.split()[1:] == ['True', 'True']
  helped = subprocess.run([sys.executable, '-m', 'nat_jax.translate', '--help'], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env={**os.environ, 'PYTHONPATH': REPO})
  assert helped.returncode == 0 and '--workdir' in helped.stdout + helped.stderr, helped.stderr[-2000:]


def test_the_version_is_declared_once_and_every_place_shows_it():
  """nat_jax/version.py's VERSION is the installed package's version, nat_jax.__version__, a command's --version
  and CITATION.cff's; the package metadata carries the licence (Apache-2.0, its LICENSE file)."""
  import importlib.metadata

  import nat_jax
  from nat_jax.version import VERSION
  metadata = importlib.metadata.metadata('nat_jax')
  assert importlib.metadata.version('nat_jax') == nat_jax.__version__ == VERSION
  assert metadata['License-Expression'] == 'Apache-2.0' and 'LICENSE' in metadata.get_all('License-File')
  said = subprocess.run([sys.executable, '-m', 'nat_jax.serve', '--version'], cwd=REPO, capture_output=True,
                        text=True, timeout=120)
  assert said.returncode == 0 and said.stdout == f'nat_jax {VERSION}\n', said.stderr[-2000:]
  with open(os.path.join(REPO, 'CITATION.cff'), encoding='utf-8') as f:
    assert f'version: "{VERSION}"' in f.read()
