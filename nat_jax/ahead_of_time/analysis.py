"""Compile one program for a target and read what the compiler says about it.

Per program (`analyze`): compiled or the compiler's error; per-device bytes of arguments, outputs,
aliased (donated) buffers and temporaries from XLA's memory analysis, plus what stays allocated
beside it (`Program.resident`), against the chip's usable memory; FLOPs and bytes accessed (XLA's
cost analysis: the TPU compiler's own; for a GPU, which reports none, XLA's generic HLO cost
analysis of the optimized GPU module run on this host); collectives by kind and host transfers in
the optimized HLO; host callbacks (`pure_callback`, `io_callback`, `debug.callback`) in the traced
program; compile seconds.

XLA's cost analysis counts a loop body once, whatever its trip count (`while_loop`, `scan`,
`fori_loop`): the FLOPs of a decoder are those of one pass of its loop. Cost decoders per step
(nat_jax.ahead_of_time.programs' units) and multiply by the steps taken (benchmarks/projection/roofline.py).
"""
from __future__ import annotations

import dataclasses
import re
import time
from typing import Any, Optional

import jax
import numpy as np
from jax.extend import core as jax_core

from nat_jax.ahead_of_time.programs import Program
from nat_jax.ahead_of_time.targets import GIB, Target

# XLA's GPU compiler (jaxlib 0.10.2) fails to tile some Triton GEMM fusions (a dot fused with a bitcast or a
# convert, e.g. bf16[2560,512]); the program compiles with Triton GEMMs off (cuBLAS), which `analyze` retries.
TRITON_TILING_BUG = "Couldn't find output tile sizes"
COLLECTIVES = ('all-reduce', 'all-gather', 'reduce-scatter', 'all-to-all', 'collective-permute')
_COLLECTIVE_OP = re.compile(r'\s(' + '|'.join(COLLECTIVES) + r')(?:-start)?\(')
_HOST_TRANSFER = re.compile(r'\s(?:send|recv)\(.*is_host_transfer=true')


@dataclasses.dataclass
class ProgramReport:
  program: str
  kind: str
  compiled: bool
  error: str = ''
  compile_s: float = 0.0
  argument_bytes: int = 0
  output_bytes: int = 0
  alias_bytes: int = 0
  temp_bytes: int = 0
  resident_bytes: int = 0
  peak_bytes: int = 0          # arguments + outputs - aliased + temporaries + resident, per device
  memory_bytes: float = 0.0    # the chip's usable memory per device
  fits: bool = False
  flops: Optional[float] = None           # per device, loop bodies counted once
  bytes_accessed: Optional[float] = None  # per device, loop bodies counted once
  cost_source: str = ''
  collectives: dict = dataclasses.field(default_factory=dict)
  host_callbacks: int = 0
  host_transfers: int = 0
  input_bytes: list = dataclasses.field(default_factory=list)  # per flattened argument: its shard's bytes, as the
                                                               # compiled program partitions it (no layout padding)
  note: str = ''

  def short_error(self) -> str:
    return self.error.splitlines()[0][:300] if self.error else ''


def count_callbacks(jaxpr) -> int:
  """Host callbacks in a (closed) jaxpr and every jaxpr nested in it (loops, conds, calls)."""
  if isinstance(jaxpr, jax_core.ClosedJaxpr):
    jaxpr = jaxpr.jaxpr
  count = 0
  for eqn in jaxpr.eqns:
    count += 'callback' in eqn.primitive.name
    count += sum(count_callbacks(sub) for sub in jax_core.jaxprs_in_params(eqn.params))
  return count


def collective_counts(hlo_text: str) -> dict[str, int]:
  """{kind: ops} of the collectives in optimized HLO text (an async pair counts once)."""
  counts: dict[str, int] = {}
  for match in _COLLECTIVE_OP.finditer(hlo_text):
    counts[match.group(1)] = counts.get(match.group(1), 0) + 1
  return counts


def host_transfers(hlo_text: str) -> int:
  """Sends and receives to or from the host in optimized HLO text (how a TPU runs a callback)."""
  return sum(1 for line in hlo_text.splitlines() if _HOST_TRANSFER.search(line))


def input_shard_bytes(compiled) -> list[int]:
  """Per argument leaf of a compiled program, the bytes of one device's shard as the program partitions
  it (0 for an argument the program does not use)."""
  none = lambda x: x is None
  shardings = jax.tree_util.tree_leaves(compiled.input_shardings[0], is_leaf=none)
  infos = jax.tree_util.tree_leaves(compiled.args_info[0], is_leaf=none)
  return [0 if sh is None else int(np.prod(sh.shard_shape(info.shape), dtype=np.int64)) * info.dtype.itemsize
          for sh, info in zip(shardings, infos) if info is not None]


def _cost(compiled) -> tuple[Optional[dict], str]:
  """(cost dict, its source): the backend's own analysis, or XLA's generic HLO cost analysis of the
  optimized module on the host (GPU targets report none)."""
  try:
    cost = compiled.cost_analysis()
  except Exception:  # a backend without cost analysis raises instead of returning None
    cost = None
  if isinstance(cost, (list, tuple)):
    cost = cost[0] if cost else None
  if cost:
    return cost, 'compiler'
  try:  # jax internals, checked against jax 0.10.2; a newer jax may move them (then: no cost)
    from jax._src import xla_bridge
    from jax._src.lib import xla_client
    module = compiled.runtime_executable().hlo_modules()[0]
    return xla_client._xla.hlo_module_cost_analysis(xla_bridge.get_backend('cpu'), module), 'HLO cost analysis'
  except Exception:
    return None, 'none'


def analyze(program: Program, target: Target) -> ProgramReport:
  """Trace, lower and compile `program` for `target`; a compile error is reported, not raised."""
  report = ProgramReport(program.name, program.kind, False,
                         resident_bytes=program.resident, memory_bytes=target.chip.memory, note=program.note)
  t0 = time.time()
  without_triton = False
  try:
    traced = program.fn.trace(*program.args)
    report.host_callbacks = count_callbacks(traced.jaxpr)
    lowered = traced.lower()
    try:
      compiled = lowered.compile()
    except Exception as e:
      if target.platform != 'gpu' or TRITON_TILING_BUG not in str(e):
        raise
      compiled, without_triton = lowered.compile(compiler_options={'xla_gpu_enable_triton_gemm': False}), True
  except Exception as e:  # the compiler's own message (e.g. RESOURCE_EXHAUSTED ... exceeds available HBM)
    report.error = f'{type(e).__name__}: {e}'
    report.compile_s = round(time.time() - t0, 1)
    return report
  report.compile_s = round(time.time() - t0, 1)
  report.compiled = True
  report.input_bytes = input_shard_bytes(compiled)
  memory = compiled.memory_analysis()
  report.argument_bytes = int(memory.argument_size_in_bytes)
  report.output_bytes = int(memory.output_size_in_bytes)
  report.alias_bytes = int(memory.alias_size_in_bytes)
  report.temp_bytes = int(memory.temp_size_in_bytes)
  report.peak_bytes = (report.argument_bytes + report.output_bytes - report.alias_bytes + report.temp_bytes
                       + report.resident_bytes)
  report.fits = report.peak_bytes <= target.chip.memory
  cost, report.cost_source = _cost(compiled)
  if without_triton:  # its GEMMs are cuBLAS calls, which the generic HLO cost analysis counts as nothing
    cost, report.cost_source = None, 'none (GEMMs are library calls)'
    report.note = (report.note + '; ' if report.note else '') + (
        'compiled with xla_gpu_enable_triton_gemm=false: XLA\'s Triton GEMM tiling failed on it')
  if cost:
    report.flops = float(cost.get('flops', 0.0))
    report.bytes_accessed = float(cost.get('bytes accessed', 0.0))
  text = compiled.as_text()
  report.collectives = collective_counts(text)
  report.host_transfers = host_transfers(text)
  return report


def gib(n: float) -> str:
  return f'{n / GIB:.2f}'


def as_row(r: ProgramReport) -> dict[str, Any]:
  """The report as a JSON-ready dict."""
  return dataclasses.asdict(r)
