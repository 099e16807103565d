"""Adding a decoder is one module: a throwaway decoder in another package (found through the entry-point
group `nat_jax.decoders`, no list edited) runs through the `translate` command, the `Translator` and the
server, and all three enforce its option's bounds."""
import os
import subprocess
import sys

import httpx
import pytest

from nat_jax import Translator, decode
from nat_jax.deploy.server import ServeConfig, Service, running
from nat_jax.errors import ConfigError
from tests.support import REPO, assert_one_error_line

SENTENCES = ['In the beginning God created the heavens and the earth.', 'And God said, Let there be light.']

PLUGIN = '''
import dataclasses

from nat_jax.decode import LeftToRightScorer, Options, register_decoder
from nat_jax.decode.greedy import greedy_decode
from nat_jax.decode.options import Rule, option


@dataclasses.dataclass(frozen=True)
class FirstTokensOptions(Options):
  tokens: int = option(3, 'tokens written', Rule(1, 16, words='1 to 16 tokens'))


@register_decoder('first_tokens', LeftToRightScorer, FirstTokensOptions,
                  about='Greedy decoding cut after a few tokens: a throwaway decoder of a test package.')
def first_tokens(scorer, src, tokens=3):
  return greedy_decode(scorer, src, max_len=tokens)
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
  """A package on sys.path (and PYTHONPATH) that names its decoder module under `nat_jax.decoders`."""
  (tmp_path / 'first_tokens_plugin.py').write_text(PLUGIN)
  info = tmp_path / 'first_tokens_plugin-0.1.dist-info'
  info.mkdir()
  (info / 'METADATA').write_text('Metadata-Version: 2.1\nName: first-tokens-plugin\nVersion: 0.1\n')
  (info / 'entry_points.txt').write_text('[nat_jax.decoders]\nfirst_tokens = first_tokens_plugin\n')
  monkeypatch.syspath_prepend(str(tmp_path))
  decode.import_decoders()
  try:
    yield str(tmp_path)
  finally:
    decode.DECODERS.pop('first_tokens', None)
    sys.modules.pop('first_tokens_plugin', None)


def translate_cli(workdir: str, path: str, *flags: str) -> subprocess.CompletedProcess:
  env = {**os.environ, 'PYTHONPATH': os.pathsep.join([path, REPO])}
  return subprocess.run([sys.executable, '-m', 'nat_jax.translate', f'--workdir={workdir}', '--batch_size=4',
                         *flags], input='\n'.join(SENTENCES).encode() + b'\n', cwd=REPO, capture_output=True,
                        timeout=600, env=env)


def test_a_decoder_module_of_another_package_runs_everywhere(trained_run, plugin):
  assert 'first_tokens' in decode.DECODERS
  bounded = Translator(trained_run, 'greedy', batch_size=4, max_len=12).translate_with_stats(SENTENCES)
  want = [t.text for t in bounded]
  assert want != Translator(trained_run, 'greedy', batch_size=4).translate(SENTENCES)  # the bound bites
  # The Translator: its option typed and checked.
  translator = Translator(trained_run, 'first_tokens', batch_size=4, tokens=12)
  assert translator.translate_with_stats(SENTENCES) == bounded  # texts and steps
  with pytest.raises(ConfigError, match='tokens=17: first_tokens needs 1 to 16 tokens'):
    Translator(trained_run, 'first_tokens', tokens=17)
  # The server: served when allowed, its bound a 400.
  greedy = Translator(trained_run, 'greedy', batch_size=4)
  with running(Service(greedy, ServeConfig(max_batch=4, allowed_decoders=('first_tokens',))).app) as url:
    ok = httpx.post(url + '/v1/translate', json={'text': SENTENCES, 'decoder': 'first_tokens',
                                                 'options': {'tokens': 12}}, timeout=120)
    assert ok.status_code == 200 and ok.json()['translations'] == want, ok.text
    assert ok.json()['options'] == {'tokens': 12}
    bad = httpx.post(url + '/v1/translate', json={'text': SENTENCES, 'decoder': 'first_tokens',
                                                  'options': {'tokens': 17}}, timeout=120)
    assert bad.status_code == 400 and 'tokens=17: first_tokens needs 1 to 16 tokens' in bad.json()['error'], bad.text
  # The command line, in a fresh process that finds the plugin by its entry point alone.
  result = translate_cli(trained_run, plugin, '--decoder=first_tokens', '--decoder.tokens=12')
  assert result.returncode == 0, result.stderr.decode()[-2000:]
  assert result.stdout.decode().splitlines() == want
  refused = translate_cli(trained_run, plugin, '--decoder=first_tokens', '--decoder.tokens=0')
  assert 'tokens=0: first_tokens needs 1 to 16 tokens' in assert_one_error_line(refused)


def test_a_plugin_that_fails_to_import_is_a_warning(tmp_path, monkeypatch, caplog):
  info = tmp_path / 'broken_plugin-0.1.dist-info'
  info.mkdir()
  (info / 'METADATA').write_text('Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n')
  (info / 'entry_points.txt').write_text('[nat_jax.decoders]\nbroken = no_such_module_here\n')
  monkeypatch.syspath_prepend(str(tmp_path))
  before = dict(decode.DECODERS)
  decode.import_decoders()
  assert decode.DECODERS == before
  assert 'decoder plugin broken (no_such_module_here) failed to import' in caplog.text

