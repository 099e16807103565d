"""nat_jax's packages and its one native part, built when pip installs it (pyproject.toml holds everything else).

The packages: nat_jax and its subpackages, and the repository's configs/ folder as `nat_jax.configs` (the recipes,
reachable by name, --config=at_bible_tiny, from any directory; no top-level package but nat_jax is installed).

nat_jax/kernels/int8_onednn.cc: the int8 matrix product that XLA:CPU calls through jax.ffi on Linux x86-64
(nat_jax.kernels.onednn). It compiles against two headers-only sources that pyproject.toml's build
requirements bring into pip's build environment: XLA's FFI API (under jaxlib's include/) and oneDNN's
headers (onednn-devel-cpu-gomp); at run time oneDNN's library comes from the onednn-cpu-gomp wheel. The
build is optional: on another platform, or without a C++ compiler, nat_jax installs without it and
decodes int8 with XLA's dot (the same results).
"""
import importlib.metadata
import importlib.util
import os
import platform
import sys

from setuptools import Extension, find_packages, setup


def onednn_headers() -> str:
  """The folder holding oneapi/dnnl/dnnl.hpp from the onednn-devel-cpu-gomp wheel."""
  for f in importlib.metadata.files('onednn-devel-cpu-gomp') or []:
    if str(f).endswith('oneapi/dnnl/dnnl.hpp'):
      return os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(f.locate()))))
  raise FileNotFoundError('oneapi/dnnl/dnnl.hpp')


def kernels() -> list[Extension]:
  if sys.platform != 'linux' or platform.machine() != 'x86_64':
    return []
  try:
    include = [os.path.join(os.path.dirname(importlib.util.find_spec('jaxlib').origin), 'include'), onednn_headers()]
  except (AttributeError, FileNotFoundError, importlib.metadata.PackageNotFoundError) as e:
    print(f'nat_jax: building without the oneDNN int8 kernel (headers not found: {e})', file=sys.stderr)
    return []
  return [Extension('nat_jax.kernels._int8_onednn', ['nat_jax/kernels/int8_onednn.cc'], include_dirs=include,
                    language='c++', extra_compile_args=['-std=c++17', '-O2', '-w'], optional=True)]


setup(ext_modules=kernels(), packages=find_packages(include=['nat_jax', 'nat_jax.*']) + ['nat_jax.configs'],
      package_dir={'nat_jax.configs': 'configs'})
