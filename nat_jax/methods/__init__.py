"""Method registry: `config.model.method` -> the object that trains a model and offers its decoding views.

A method subclasses `nat_jax.methods.base.Method` (the contract as code: name, normalizer,
init_params, loss, views, label, adopt_params).
A method turns the batch {'source', 'target'} into its decoder inputs with one pure function
(e.g. `autoregressive_inputs`) and token-level methods share one loss over those inputs
(nat_jax.methods.teacher_forcing). A method with settings of its own has a config section named
after it, declared in its module by a frozen dataclass (each field's default, help and rule:
nat_jax.settings.setting) registered with it; its recipes add the section (`c.dat = section(dag.DatSettings)`,
configs/dat_bible_tiny.py) and `get_method` checks it.

Adding a method = a module in this package + `@register('name', its settings)` (methods/registry.py) + its import below;
train / translate / evaluate never change.
"""
from nat_jax.methods.base import Method
from nat_jax.methods.registry import METHODS, SETTINGS, check_method_config, get_method, register  # noqa: F401

# register 'at', 'cmlm', 'dat', 'hrt', 'ibdecoder', 'selfdraft'
from nat_jax.methods import autoregressive, cmlm, dag, hrt, ibdecoder, selfdraft  # noqa: F401
