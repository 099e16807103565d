"""A property-based fuzzer over every option a user can set (hypothesis, fixed seed): every flag of
every command (the commands' COMMAND_FLAGS, cli.every_flag), every decoder option and every numeric
training setting. Each value drawn from the hostile space (NaN, +-inf, 0, negative, huge, wrong type,
empty, unicode, paths that are directories, FIFOs, devices or missing) is either accepted as a value
that can work, or refused by one error line (absl's flag error or a ConfigError, which the command
lines print as `error: ...`, exit 2); never another exception, never a value that cannot work let
through. What "can work" means is said here, by kind, not by the rule under test. The Python API
(`Translator.translate`) and the HTTP server (`POST /v1/translate`) meet drawn arguments and request bodies
the same way: a translation per text, or one of our errors (an HTTP 4xx with a JSON error), never another.

Every (command, flag) and (decoder, option) pair meets every value of the hostile lists; then the
default run draws 200 random cases of each kind; `python -m pytest -m slow tests/integration/test_fuzz.py` draws
2,000 of each and runs drawn command lines end to end (a process each: one output line per input
line, or one `error:` line with exit 2, never a traceback). The command lines run the same checks
before any work (`cli.check_flags`, `--decoder.<opt>` through `decode.parse_options` /
`check_decoder`, `--config.<key>` through `validate_config`); the probe's cases are in
tests/integration/test_hostile_input.py and tests/integration/test_reliability.py.
"""
import math
import os

import pytest
from absl import flags
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nat_jax import decode
from nat_jax.commands import cli
from nat_jax.decode.options import MAX_BLOCK, MAX_HYPOTHESES
from nat_jax.decode.registry import DECODERS
from nat_jax.errors import ConfigError
from nat_jax.methods import get_method
from nat_jax.training.config import check_fits, device_memory_bytes, fit_bytes, validate_config
from tests.support import tiny_config

FAST, SLOW = 200, 2000
NO_DATA = {'train': 'train.tsv', 'validation': 'validation.tsv', 'test': 'test.tsv'}  # never read here
METHODS = {name: get_method(tiny_config(NO_DATA, **{'model.method': name}), 60)
           for name in ('at', 'ibdecoder', 'dat', 'cmlm', 'hrt', 'selfdraft')}
HOSTILE = ['nan', 'NaN', 'inf', '-inf', '0', '-0', '-1', '1e309', '1e30', '100000', '9' * 30, '', ' ', 'abc', '1.5',
           '0x10', 'true', 'None', '\x00', '\u0661', '\U0001f600', '--1', '1_000']


def raw_values():
  """Option values as a command line passes them: strings, random (the hostile list is enumerated
  exhaustively by test_every_option_with_every_hostile_value)."""
  return st.one_of(st.text(max_size=6), st.integers(-10**12, 10**12).map(str),
                   st.floats(allow_nan=True, allow_infinity=True).map(repr), st.floats(-1e3, 1e3).map(str))


def check_option(name: str, key: str, raw: str):
  """parse_options + check_decoder on every method that offers the decoder: accepted values must be usable."""
  try:
    options = decode.parse_options(name, {key: raw})
    for method in METHODS.values():
      if DECODERS[name].needs in method.views():
        decode.check_decoder(method, name, options)
  except ConfigError as e:
    assert str(e) and '\n' not in str(e), repr(e)
    return
  value = options.kwargs()[key]
  if isinstance(value, float):  # weights and exponents: past 100, (5 + |y|)^alpha or P^beta leave float32's range
    assert math.isfinite(value) and 0 <= value <= 100, (name, key, raw, value)
  if isinstance(value, int) and not isinstance(value, bool):
    assert 0 <= value <= 1 << 24, (name, key, raw, value)  # no count means anything past 16M (sizes memory)
    if key in ('beam_size', 'b_at', 'b_nat', 'length_beam'):
      assert 1 <= value <= MAX_HYPOTHESES, (name, key, raw, value)
    if key == 'max_len':
      assert value <= max(m.max_target_len for m in METHODS.values()), (name, key, raw, value)
    if key in ('block', 'block_size', 'jacobi_block'):
      assert value <= MAX_BLOCK, (name, key, raw, value)


PAIRS = [(name, key) for name in sorted(DECODERS) for key in sorted(DECODERS[name].option_names)]


@st.composite
def decoder_option(draw):
  name, key = draw(st.sampled_from(PAIRS))
  return name, key, draw(raw_values())


def test_every_option_with_every_hostile_value():
  """The hostile list against every (decoder, option) pair, exhaustively, before the random draws."""
  for name, key in PAIRS:
    for raw in HOSTILE:
      check_option(name, key, raw)


def fuzz(examples: int):
  return settings(max_examples=examples, derandomize=True, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))


@fuzz(FAST)
@given(decoder_option())
def test_decoder_options(case):
  check_option(*case)


@pytest.mark.slow
@fuzz(SLOW)
@given(decoder_option())
def test_decoder_options_long(case):
  check_option(*case)


# Numeric settings, each with its type: what `--config.<key>=<v>` can set (ml_collections checks the type).
FLOAT_KEYS = ['learning_rate', 'label_smoothing', 'weight_decay', 'adam_b1', 'adam_b2', 'clip_norm', 'model.dropout',
              'model.attention_dropout', 'data.raw_prob']
INT_KEYS = ['model.d_model', 'model.num_heads', 'model.d_ff', 'model.enc_layers', 'model.dec_layers', 'total_steps',
            'tokens_per_batch', 'max_len', 'max_decode_len', 'num_buckets', 'grad_accum_steps', 'warmup_steps',
            'cooldown_steps', 'eval_every', 'log_every', 'checkpoint_every', 'keep_checkpoints', 'keep_best',
            'test_average', 'decode_batch_size', 'vocab_size', 'eval_max_sentences']


@st.composite
def setting(draw):
  if draw(st.booleans()):
    key = draw(st.sampled_from(FLOAT_KEYS))
    value = draw(st.one_of(st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, 2.0, 1e30, -1e-9]),
                           st.floats(allow_nan=True, allow_infinity=True)))
  else:
    key = draw(st.sampled_from(INT_KEYS))
    value = draw(st.one_of(st.sampled_from([0, -1, 1, 2, 10**9, 10**18]), st.integers(-10**15, 10**15)))
  return key, value


def check_setting(key: str, value):
  config = tiny_config(NO_DATA, **{key: value})
  try:
    validate_config(config)
    check_fits(config)
  except ConfigError as e:
    assert str(e) and '\n' not in str(e), repr(e)
    return
  if isinstance(value, float):
    assert math.isfinite(value) and value >= 0, (key, value)
  else:
    assert value >= 0, (key, value)
  assert sum(fit_bytes(config)) <= device_memory_bytes()


@fuzz(FAST)
@given(setting())
def test_training_settings(case):
  check_setting(*case)


@pytest.mark.slow
@fuzz(SLOW)
@given(setting())
def test_training_settings_long(case):
  check_setting(*case)


def test_the_values_the_probe_found_are_refused():
  """What the checks once let through (2026-11-25): each is now refused."""
  for key, value in (('learning_rate', 1e30), ('label_smoothing', 2.0), ('weight_decay', math.nan),
                     ('model.dropout', 1.5), ('clip_norm', -1.0), ('adam_b1', 2.0), ('model.d_model', 0)):
    with pytest.raises(ConfigError):
      validate_config(tiny_config(NO_DATA, **{key: value}))
  for name, key, raw in (('dag_beam', 'top_cand', '0'), ('dag_beam', 'gamma', 'nan'), ('beam', 'beam_size', '100000'),
                         ('drafted', 'block', '100000'), ('hrt', 'b_at', '100000')):
    with pytest.raises(ConfigError):
      options = decode.parse_options(name, {key: raw})
      decode.check_decoder(METHODS['at' if name != 'hrt' else 'hrt'], name, options)


def test_help_lists_every_option_with_what_it_must_be():
  """`--help` of the commands that take --decoder shows the rules the options are checked against."""
  text = decode.describe_options()
  for name, key in PAIRS:
    assert f'{key}=' in text.split(f'\n  {name}: ', 1)[1].split('\n', 1)[0], (name, key)
  assert 'beam_size=4 (1 to 256 beams)' in text and 'gamma=0.1 (a finite number from 0 to 10)' in text


# --- the command line, end to end (slow: a process per case) --------------------------------------
TRANSLATE_FLAGS = ['batch_size', 'chunk_lines', 'average', 'checkpoint', 'dtype']


@st.composite
def translate_case(draw):
  """(flags) for one `translate` run: a decoder option or one of its own flags, with a hostile value."""
  value = draw(st.one_of(st.sampled_from(HOSTILE), raw_values()))
  if draw(st.booleans()):
    name, key = draw(st.sampled_from(PAIRS))
    return [f'--decoder={name}', f'--decoder.{key}={value}']
  return [f'--{draw(st.sampled_from(TRANSLATE_FLAGS))}={value}']


@pytest.mark.slow
@fuzz(40)
@given(translate_case())
def test_translate_command_line(trained_run, case):
  """Exactly one line per input line and no control characters, or one `error:` line with exit 2;
  never a traceback, never exit 0 with missing output."""
  from tests.support import THREE_LINES, assert_one_error_line, run_cli
  if any('\x00' in arg for arg in case):  # an argv string cannot hold NUL: the OS refuses it, not us
    return
  result = run_cli('nat_jax.translate', f'--workdir={trained_run}', *case)
  if result.returncode == 0:
    out = result.stdout.decode('utf-8')
    assert len(out.splitlines()) == len(THREE_LINES.splitlines()) and out.endswith('\n'), (case, out)
    assert not any(ord(c) < 32 and c != '\n' for c in out), (case, out)
  else:
    assert_one_error_line(result)


# --- every command's flags --------------------------------------------------------------------------
COMMAND_FLAGS = cli.every_flag()
FLAG_CASES = [(command, f) for command, fs in COMMAND_FLAGS.items() for f in fs if f.kind != 'config']
HOSTILE_NUMBERS = ['65537', '4097', '1' * 20, '-9' * 10, '0.0001', '1e-9', '2.5']
PATH_KINDS = ('file', 'dir', 'missing', 'missing_parent', 'fifo', 'link_to_dir', 'empty')


@pytest.fixture(scope='module')
def hostile_paths(tmp_path_factory) -> dict[str, str]:
  """Paths of every kind a flag may be given, made here (no device of the machine is touched)."""
  root = tmp_path_factory.mktemp('paths')
  (root / 'file').write_text('x\n')
  (root / 'dir').mkdir()
  os.mkfifo(root / 'fifo')
  os.symlink(root / 'dir', root / 'link_to_dir')
  return {'file': str(root / 'file'), 'dir': str(root / 'dir'), 'missing': str(root / 'missing'),
          'missing_parent': str(root / 'no' / 'such' / 'x'), 'fifo': str(root / 'fifo'),
          'link_to_dir': str(root / 'link_to_dir'), 'empty': ''}


def check_flag(flag: cli.Flag, raw: str):
  """`--<flag>=<raw>` parsed as the command line parses it and checked as it checks it before work:
  refused with one line, or accepted as a value that can work."""
  values = flags.FlagValues()
  cli.define_flags([flag], values)
  try:
    values(['prog', f'--{flag.name}={raw}'])
    cli.check_flags([flag], values)
  except (flags.Error, ConfigError) as e:
    assert str(e).strip() and '\n' not in str(e).splitlines()[0], repr(e)
    return
  value = values[flag.name].value
  if value is None or value == '' or value == []:
    assert not flag.required, (flag.name, raw)
    return
  if flag.kind in ('int', 'float'):  # sizes, counts, times: finite and never negative
    assert not isinstance(value, bool) and math.isfinite(value) and value >= 0, (flag.name, raw, value)
    if value == 0:
      assert flag.zero or flag.low == 0, (flag.name, raw)  # 0 only where it means something said in --help
    if flag.kind == 'int' and flag.name in ('batch_size', 'max_batch', 'order', 'average', 'chunk_lines',
                                            'chunk_sentences', 'top_tokens', 'edges', 'block_size', 'batch1_runs'):
      assert value >= 1, (flag.name, raw)
    if flag.name in ('batch_size', 'max_batch'):
      assert value <= cli.MAX_ROWS, (flag.name, raw)
  if flag.kind == 'list' and flag.items == 'int':
    assert all(1 <= int(item) <= cli.MAX_ROWS for item in value), (flag.name, raw)
  if flag.kind in ('enum', 'list', 'str') and flag.choices:
    assert set(value if isinstance(value, list) else [value]) <= set(flag.choices), (flag.name, raw)
  if flag.path == 'file':
    assert os.path.exists(value) and not os.path.isdir(value), (flag.name, raw)
  if flag.path in ('dir', 'run'):
    assert os.path.isdir(value), (flag.name, raw)
  if flag.path == 'new_file':
    assert not os.path.isdir(value) and os.path.isdir(os.path.dirname(os.path.abspath(value))), (flag.name, raw)
  if flag.path == 'new_dir':
    assert os.path.isdir(value) or not os.path.exists(value), (flag.name, raw)


def test_every_flag_with_every_hostile_value(hostile_paths):
  """Every flag of every command against the hostile lists and every kind of path, exhaustively."""
  assert len(FLAG_CASES) >= 70, len(FLAG_CASES)
  for _, flag in FLAG_CASES:
    for raw in HOSTILE + HOSTILE_NUMBERS + list(hostile_paths.values()):
      if '\x00' not in raw:  # an argv string cannot hold NUL: the OS refuses it before we see it
        check_flag(flag, raw)


def test_defaults_keep_their_own_rules():
  """A default that breaks its flag's rule would refuse the command line nobody changed."""
  for command, fs in COMMAND_FLAGS.items():
    for f in fs:
      if f.kind != 'config' and not f.path and not f.required:
        assert f.problem(f.default) is None, (command, f.name, f.default)


def test_path_flags_say_what_path_they_need():
  """Flags that name files or directories carry a path rule, so a directory, FIFO or missing path is
  refused before any work (dagviz/ddgviz --out is a prefix whose directories are made)."""
  for command, fs in COMMAND_FLAGS.items():
    for f in fs:
      named_path = f.name in ('workdir', 'input', 'output', 'out', 'json', 'api_key_file')
      if named_path and command not in ('dagviz', 'ddgviz'):
        assert f.path, (command, f.name)
      if f.name in ('input', 'api_key_file'):
        assert f.path == 'file', (command, f.name)


def test_help_states_every_rule():
  """`--help` of every command shows what each flag's value must be: the rule it is checked against."""
  for command, fs in COMMAND_FLAGS.items():
    values = flags.FlagValues()
    cli.define_flags(fs, values)
    for f in fs:
      if f.kind not in ('enum', 'bool', 'config') and f.requirement():
        assert f.requirement() in values[f.name].help, (command, f.name, values[f.name].help)
      if f.required:  # a required flag with a default is a list that may not be empty
        need = 'not empty' if f.default not in (None, '', []) else 'required'
        assert need in values[f.name].help, (command, f.name)


@st.composite
def command_flag(draw, paths: dict[str, str]):
  _, flag = draw(st.sampled_from(FLAG_CASES))
  raw = draw(st.one_of(raw_values(), st.sampled_from(HOSTILE + HOSTILE_NUMBERS + list(paths.values())),
                       st.lists(st.integers(-3, 10**6).map(str), min_size=1, max_size=4).map(','.join)))
  return flag, raw.replace('\x00', '')


def test_command_flags(hostile_paths):
  @fuzz(FAST)
  @given(command_flag(hostile_paths))
  def run(case):
    check_flag(*case)
  run()


@pytest.mark.slow
def test_command_flags_long(hostile_paths):
  @fuzz(SLOW)
  @given(command_flag(hostile_paths))
  def run(case):
    check_flag(*case)
  run()


# --- drawn command lines, end to end (slow: a process per case) --------------------------------------
def end_to_end_cases(workdir: str, out: str) -> dict[str, tuple[list[str], str]]:
  """Per command: the flags of a small valid job on the tiny AT run, and the file it must write."""
  return {
      'lm': ([f'--workdir={workdir}', '--order=3', f'--out={out}/lm.arpa'], f'{out}/lm.arpa'),
      'ddgviz': ([f'--workdir={workdir}', '--text=And God said.', f'--out={out}/ddg'], f'{out}/ddg.html'),
      'dagviz': ([f'--workdir={workdir}', '--text=And God said.', f'--out={out}/dag'], f'{out}/dag.html'),
      'distill': ([f'--workdir={workdir}', f'--out={out}/distill', '--limit=3', '--splits=validation',
                   '--decoder=greedy'], f'{out}/distill/manifest.json'),
      'evaluate': ([f'--workdir={workdir}', f'--out={out}/eval', '--max_sentences=3', '--latency_sentences=1',
                    '--batch_sizes=1,4', '--batch1_runs=1', '--decoders=greedy'], f'{out}/eval/results.json'),
  }


@st.composite
def command_line_case(draw, paths: dict[str, str]):
  """(command, one of its flags with a hostile value)."""
  command = draw(st.sampled_from(['lm', 'ddgviz', 'dagviz', 'distill', 'evaluate']))
  flag = draw(st.sampled_from([f for f in COMMAND_FLAGS[command] if f.name != 'workdir']))
  raw = draw(st.one_of(st.sampled_from(HOSTILE + HOSTILE_NUMBERS + list(paths.values())), raw_values()))
  return command, flag.name, raw.replace('\x00', '')


@pytest.mark.slow
def test_command_lines(trained_run, hostile_paths, tmp_path_factory):
  """Each drawn command line writes what its command writes and exits 0, or prints one `error:` line
  and exits 2; never a traceback, never exit 0 without its output. Each runs in a directory of its own:
  a drawn relative path (`--out=nan`) is written there, never into the checkout."""
  from tests.support import REPO, assert_one_error_line, run_cli
  outcomes = {'done': 0, 'refused': 0}
  checkout = sorted(os.listdir(REPO))

  @fuzz(30)
  @given(command_line_case(hostile_paths))
  def run(case):
    command, name, raw = case
    out = str(tmp_path_factory.mktemp('e2e'))
    base, written = end_to_end_cases(trained_run, out)[command]
    args = [a for a in base if not a.startswith(f'--{name}=')] + [f'--{name}={raw}']
    result = run_cli(f'nat_jax.{command}', *args, stdin=b'', timeout=600, cwd=out)
    if result.returncode == 0:
      moved = name == 'out'  # the output went where the drawn --out says
      assert moved or os.path.exists(written), (case, result.stderr.decode()[-2000:])
      outcomes['done'] += 1
    else:
      assert_one_error_line(result)
      outcomes['refused'] += 1
  run()
  print(f'command lines: {outcomes}')
  assert outcomes['done'] and outcomes['refused'], outcomes  # both sides of the contract were exercised
  assert sorted(os.listdir(REPO)) == checkout  # nothing written beside the sources


# --- the Python API and the HTTP server ----------------------------------------------------------------------
def json_values():
  """Any JSON value, small: what a request's fields or a caller's arguments may hold."""
  leaves = (st.none() | st.booleans() | st.integers(-10**30, 10**30) | st.floats(allow_nan=False)
            | st.text(max_size=8) | st.sampled_from(HOSTILE))
  return st.recursive(leaves, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                         max_size=3), max_leaves=8)


SERVED = ('greedy', 'beam')
OPTION_NAMES = sorted({key for name in SERVED for key in DECODERS[name].option_names})


@st.composite
def decoding_request(draw):
  """(texts, decoder, options, stats): each usually well-formed, sometimes any JSON value."""
  texts = draw(st.lists(st.text(max_size=30), max_size=4) | json_values())
  decoder = draw(st.none() | st.sampled_from(SERVED + ('dag_beam', 'nope')) | json_values())
  options = draw(st.none() | st.dictionaries(st.sampled_from(OPTION_NAMES + ['lm', 'drafter', 'nope']),
                                             st.sampled_from(['1', '2', '0', '-1', 'nan', '1e300', 'true', 'gnmt'])
                                             | json_values(), max_size=2) | json_values())
  return texts, decoder, options, draw(st.booleans() | json_values())


def test_the_python_api(trained_run):
  """Translator.translate with drawn arguments: a translation per text, or one of our errors in one line; never
  another exception. Its decoders (a few configurations: the drawn values are few) are built on first use."""
  from nat_jax.errors import NatJaxError
  from nat_jax.run.translator import Translator
  translator = Translator(trained_run, 'greedy', batch_size=4)

  @fuzz(60)
  @given(decoding_request(), st.none() | st.sampled_from([1, 3, 0, -1, True, 2.5, '4']))
  def call(request, batch_size):
    texts, decoder, options, _ = request
    try:
      out = translator.translate(texts, decoder, options, batch_size)
    except NatJaxError as e:
      assert str(e) and '\n' not in str(e), repr(e)
      return
    assert len(out) == len(list(texts)) and all(isinstance(t, str) for t in out), (request, out)
  call()


def test_the_http_server(trained_run):
  """POST /v1/translate with drawn bodies: 200 with a translation per text, or a 4xx JSON {"error": one line};
  never a 500. The server builds at most --max_decoders configurations, so drawn options compile little."""
  import json

  import httpx

  from nat_jax.deploy.server import ServeConfig, Service, running
  from nat_jax.run.translator import Translator
  translator = Translator(trained_run, 'greedy', batch_size=4)
  config = ServeConfig(max_batch=4, max_sentences=8, max_chars=400, max_decoders=4, allowed_decoders=('beam',))
  with running(Service(translator, config).app) as url, httpx.Client(base_url=url, timeout=120) as client:
    @fuzz(60)
    @given(decoding_request(), st.booleans())
    def post(request, whole):
      texts, decoder, options, stats = request
      body = {'text': texts, 'decoder': decoder, 'options': options, 'stats': stats}
      body = body if whole else {k: v for k, v in body.items() if v is not None}
      r = client.post('/v1/translate', content=json.dumps(body))
      answer = r.json()
      if r.status_code == 200:
        given = [texts] if isinstance(texts, str) else texts
        assert len(answer['translations']) == len(given), (body, answer)
      else:
        assert r.status_code in (400, 413) and set(answer) == {'error'} and '\n' not in answer['error'], (body, r)
    post()
