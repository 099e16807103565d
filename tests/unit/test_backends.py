"""nat_jax.backends: which machines count as having an accelerator (read from a stand-in root), and the
stderr filter that drops only the named lines, C-level writes included."""
import os

from nat_jax import backends


def _file(root, path, text=''):
  full = os.path.join(root, path.lstrip('/'))
  os.makedirs(os.path.dirname(full), exist_ok=True)
  with open(full, 'w') as f:
    f.write(text)


def _pci(root, slot, vendor, device):
  _file(root, f'/sys/bus/pci/devices/{slot}/vendor', vendor + '\n')
  _file(root, f'/sys/bus/pci/devices/{slot}/device', device + '\n')


def test_a_machine_without_devices_has_no_accelerator(tmp_path):
  assert not backends.accelerator_visible(str(tmp_path))
  _pci(str(tmp_path), '0000:00:04.0', '0x1af4', '0x1000')  # a virtio card
  assert not backends.accelerator_visible(str(tmp_path))


def test_an_nvidia_device_node_counts(tmp_path):
  _file(str(tmp_path), '/dev/nvidiactl')
  assert backends.accelerator_visible(str(tmp_path))


def test_google_pci_devices_count_except_the_network_card(tmp_path):
  root = str(tmp_path)
  _pci(root, '0000:00:05.0', '0x1ae0', '0x0042')  # gVNIC: every Google Cloud VM has it
  assert not backends.accelerator_visible(root)
  _pci(root, '0000:00:06.0', '0x1ae0', '0x9999')  # an id we do not know: a TPU generation after our list
  assert backends.accelerator_visible(root)


def test_the_filter_drops_only_the_named_lines_written_at_the_c_level(capfd):
  with backends._without_lines(('cudart_stub.cc',)):
    os.write(2, b'I0000 cudart_stub.cc:31] Could not find cuda drivers\nwarning: kept\n')
  err = capfd.readouterr().err
  assert 'warning: kept' in err and 'cudart_stub' not in err
