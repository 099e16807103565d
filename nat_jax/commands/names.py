"""The command lines, in the order the reference lists them: each a module nat_jax.commands.<name> with a `console()`,
the one-line module nat_jax/<name>.py that `python -m nat_jax.<name>` runs and that launches it
(nat_jax.commands.launch), and the console script `nat-jax-<name>` naming that module in pyproject.toml
(tests/unit/test_layers.py checks the four agree). Kept light, with no installed metadata read: a checkout on
PYTHONPATH has the same commands as an installed package."""
COMMAND_NAMES = ('train', 'translate', 'evaluate', 'distill', 'benchmark', 'dagviz', 'ddgviz', 'export', 'convert',
                 'lm', 'serve', 'aot')
