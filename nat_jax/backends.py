"""What JAX runs on. On a machine with no GPU and no TPU, the CPU, chosen before JAX looks for them.

JAX initialises every installed plugin on first use. Where the TPU compiler (libtpu) and the CUDA plugin
are installed without the hardware (the `aot` extra, which the test requirements install, puts both on
any machine so that nat_jax.aot can compile for TPUs and GPUs), that search prints a CUDA traceback and
libtpu's start-up log on stderr before any work. `use_cpu_where_no_accelerator()` (a command line's entry
point calls it, nat_jax.commands.launch, before anything of ours imports JAX; importing nat_jax does not) sets
JAX_PLATFORMS=cpu when no accelerator is visible and the user did not choose, and imports JAX with the CUDA
plugin's import-time log lines dropped. Compiling for
a TPU or a GPU still works: nat_jax.aot builds compile-only devices for them.
"""
from __future__ import annotations

import glob
import importlib.util
import os
import sys
import tempfile

NVIDIA_DEVICES = ('/dev/nvidia0', '/dev/nvidiactl', '/dev/dxg')  # as JAX looks for them (dxg: WSL2)
GOOGLE_PCI_VENDOR = '0x1ae0'
GOOGLE_PCI_NOT_TPU = {'0x0042'}  # gVNIC, the network card of Google Cloud VMs
# What the CUDA plugin writes from C++ when it is imported on a machine without CUDA: nothing to act on.
CUDA_PLUGINS = ('jax_cuda12_plugin', 'jax_cuda13_plugin')
IMPORT_NOISE = ('cudart_stub.cc', 'All log messages before absl::InitializeLog() is called are written to STDERR')


def accelerator_visible(root: str = '/') -> bool:
  """Whether this machine shows an NVIDIA GPU or a (likely) TPU: any Google PCI device but its network
  card counts, so that a TPU generation we do not know of is never hidden. `root`: for tests."""
  at = lambda path: os.path.join(root, path.lstrip('/'))
  if any(os.path.exists(at(d)) for d in NVIDIA_DEVICES) or glob.glob(at('/dev/accel*')):
    return True
  for vendor_file in glob.glob(at('/sys/bus/pci/devices/*/vendor')):
    try:
      with open(vendor_file) as f:
        if f.read().strip() != GOOGLE_PCI_VENDOR:
          continue
      with open(os.path.join(os.path.dirname(vendor_file), 'device')) as f:
        if f.read().strip() not in GOOGLE_PCI_NOT_TPU:
          return True
    except OSError:
      continue
  return False


def accelerator_plugins_installed() -> bool:
  """Whether a CUDA plugin or the TPU runtime is installed: the packages whose probing makes the noise."""
  return any(importlib.util.find_spec(name) for name in (*CUDA_PLUGINS, 'libtpu'))


def use_cpu_where_no_accelerator():
  """JAX_PLATFORMS=cpu where a CUDA plugin or libtpu is installed but no accelerator is visible, unless
  JAX_PLATFORMS is set (even empty: the user chose). With a CUDA plugin, JAX is imported and its plugins
  registered here, the plugin's import-time lines dropped; no backend is started (jax.distributed.initialize
  may follow)."""
  if 'JAX_PLATFORMS' in os.environ or not accelerator_plugins_installed() or accelerator_visible():
    return  # the user chose; or nothing would probe (JAX keeps its own choice, e.g. Apple's Metal plugin); or a device
  os.environ['JAX_PLATFORMS'] = 'cpu'
  if 'jax' in sys.modules:  # imported before us: its config read the environment already
    import jax
    jax.config.update('jax_platforms', 'cpu')
    return
  if not any(importlib.util.find_spec(name) for name in CUDA_PLUGINS):
    return
  with _without_lines(IMPORT_NOISE):
    import jax  # noqa: F401  (jaxlib loads the CUDA plugin's kernels as it imports)
    from jax._src import xla_bridge
    register = getattr(xla_bridge, '_discover_and_register_pjrt_plugins', None)  # private: absent, the lines stay
    if register is not None:
      register()


class _without_lines:
  """Captures what is written to file descriptor 2 (C++ logs included) and writes it back on exit,
  minus the lines that hold one of `noise`."""

  def __init__(self, noise: tuple[str, ...]):
    self.noise = noise

  def __enter__(self):
    self.saved = None
    if sys.stderr is None:  # started with stderr closed: nothing to filter
      return self
    sys.stderr.flush()
    self.saved = os.dup(2)
    self.capture = tempfile.TemporaryFile()
    os.dup2(self.capture.fileno(), 2)
    return self

  def __exit__(self, *exc):
    if self.saved is None:
      return False
    sys.stderr.flush()
    os.dup2(self.saved, 2)
    os.close(self.saved)
    self.capture.seek(0)
    text = self.capture.read().decode('utf-8', 'replace')
    self.capture.close()
    kept = [line for line in text.splitlines(keepends=True) if not any(n in line for n in self.noise)]
    if kept:
      sys.stderr.write(''.join(kept))
      sys.stderr.flush()
    return False
