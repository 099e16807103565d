"""Training on packed rows end to end."""
from tests.support import tiny_config


def test_training_on_packed_rows_end_to_end(corpus, compile_cache, tmp_path, capsys):
  """train.py with data.pack: packed batches of one shape, validation on plain buckets, a test result."""
  from nat_jax.training.loop import train_and_evaluate
  config = tiny_config(corpus, compile_cache, total_steps=2, eval_every=2, **{'data.pack': 4})
  results = train_and_evaluate(config, str(tmp_path))
  assert 'packed, up to 4 pairs per row' in capsys.readouterr().out
  assert results is not None and results['sentences'] == 16
  lines = (tmp_path / 'metrics.jsonl').read_text().splitlines()
  assert any('"split": "validation"' in line for line in lines)
