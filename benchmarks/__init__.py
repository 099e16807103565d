"""Benchmarks: measurements of nat_jax, each a command `python -m benchmarks.<room>.<name>` (its docstring says
how to run it and what it measures). They run through nat_jax.commands.cli.run_command, which does the same
process set-up as nat_jax's own commands. Rooms, lowest first (imports point down, as in nat_jax; tests/unit/
test_layers.py checks it):

  components/  one part of a decoder or of training timed against its baseline or its floor (the int8 product,
               a verification pass, the decode loop, the DAG losses, HRT's and drafted decoding's parts), and
               sized_models.py: our models at d = 128 / 256 / 512 with random weights, which the others time
  projection/  cost models of accelerators we do not have: compiled costs on a roofline, paper-scale fits, and
               the unit costs a lent accelerator measures for them
  systems/     whole systems side by side: every method at size against CTranslate2, the server under load,
               batching schedules, decoders alternated pass by pass against a peer
  suite/       the accelerator suite: what a short lease of a GPU is spent on, its plan and its pack
"""
