"""What the DAG and decoding-graph pictures share: probabilities for display, the names of special
tokens, and the .png / .html output paths."""
from __future__ import annotations

import os

import numpy as np

from nat_jax.core.tokens import BOS_ID, EOS_ID, PAD_ID


def probabilities(log_p) -> np.ndarray:
  """exp of log-probabilities (float64), clipped to [0, 1]: an fp32 log-softmax can give log p a hair
  above 0, and what draws or prints a probability (matplotlib's alpha) may reject 1.0000001."""
  return np.clip(np.exp(np.asarray(log_p, np.float64)), 0.0, 1.0)


SPECIAL_PIECES = {PAD_ID: '<pad>', EOS_ID: '</s>', BOS_ID: '<s>'}


def output_paths(out: str) -> tuple[str, str]:
  base, ext = os.path.splitext(out)
  base = base if ext in ('.png', '.html') else out
  return base + '.png', base + '.html'
