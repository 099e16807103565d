"""One part of a decoder or of training timed against its baseline or its floor; sized_models.py: the models the
speed benchmarks time (benchmarks/__init__.py lists the rooms)."""
