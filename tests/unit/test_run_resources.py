"""nat_jax.run.resources: what a decoder needs from outside its model is refused in words that name the decoder
option that asked for it."""
import pytest

from nat_jax.errors import CheckpointError, ConfigError
from nat_jax.run.resources import Resources


def test_a_drafter_that_is_not_a_run_is_named_by_its_option(tmp_path):
  for path in (str(tmp_path / 'missing'), str(tmp_path)):
    with pytest.raises(CheckpointError) as e:
      Resources().drafter_run(path)
    message = str(e.value)
    assert message.startswith(f'--decoder.drafter={path}: not a run to draft with') and '--workdir' not in message


def test_an_lm_that_is_not_an_arpa_file_is_named_by_its_option(tmp_path):
  with pytest.raises(ConfigError, match='--decoder.lm=.*no such file'):
    Resources().ngram_model(str(tmp_path / 'missing.arpa'))
  garbage = tmp_path / 'lm.arpa'
  garbage.write_text('not an arpa file\n')
  with pytest.raises(ConfigError, match='--decoder.lm='):
    Resources().ngram_model(str(garbage))
