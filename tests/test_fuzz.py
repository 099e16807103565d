"""A property-based fuzzer over every decoder option and every numeric training setting (hypothesis,
fixed seed): each value drawn from the hostile space (NaN, +-inf, 0, negative, huge, wrong type,
empty, unicode) is either accepted as a value that can work, or refused by one ConfigError line;
never another exception, never a value that cannot work let through.

Every (decoder, option) pair meets every value of the hostile list; then the default run draws 200
random cases of each kind; `python -m pytest -m slow tests/test_fuzz.py` draws 2,000.
The command lines run the same checks before any work (`--decoder.<opt>` through
`decode.parse_options` / `check_decoder`, `--config.<key>` through `train.validate_config`), and the
probe's command-line cases are in tests/test_hostile_input.py and tests/test_reliability.py.
"""
import math

from hypothesis import HealthCheck, given, settings, strategies as st
import pytest

from nat_jax import decode, train
from nat_jax.decode.registry import DECODERS, MAX_BLOCK, MAX_HYPOTHESES
from nat_jax.errors import ConfigError
from nat_jax.methods import get_method
from tests.conftest import tiny_config

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
  value = options[key]
  if isinstance(value, float):
    assert math.isfinite(value) and value >= 0, (name, key, raw, value)
  if isinstance(value, int) and not isinstance(value, bool):
    assert value >= 0, (name, key, raw, value)
    if key in ('beam_size', 'b_at', 'b_nat', 'length_beam'):
      assert 1 <= value <= MAX_HYPOTHESES, (name, key, raw, value)
    if key == 'max_len':
      assert value <= max(m.max_target_len for m in METHODS.values()), (name, key, raw, value)
    if key in ('block', 'block_size', 'jacobi_block'):
      assert value <= MAX_BLOCK, (name, key, raw, value)


PAIRS = [(name, key) for name in sorted(DECODERS) for key in sorted(DECODERS[name].defaults)]


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
    train.validate_config(config)
    train.check_fits(config)
  except ConfigError as e:
    assert str(e) and '\n' not in str(e), repr(e)
    return
  if isinstance(value, float):
    assert math.isfinite(value) and value >= 0, (key, value)
  else:
    assert value >= 0, (key, value)
  assert 16 * train.estimated_parameters(config) <= train.device_memory_bytes()


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
      train.validate_config(tiny_config(NO_DATA, **{key: value}))
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
  assert 'beam_size=4 (1 to 256 beams)' in text and 'gamma=0.1 (a finite number >= 0)' in text


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
  from tests.test_reliability import THREE_LINES, assert_one_error_line, run_cli
  if any('\x00' in arg for arg in case):  # an argv string cannot hold NUL: the OS refuses it, not us
    return
  result = run_cli('nat_jax.translate', f'--workdir={trained_run}', *case)
  if result.returncode == 0:
    out = result.stdout.decode('utf-8')
    assert len(out.splitlines()) == len(THREE_LINES.splitlines()) and out.endswith('\n'), (case, out)
    assert not any(ord(c) < 32 and c != '\n' for c in out), (case, out)
  else:
    assert_one_error_line(result)
