"""The data every stage shares. Plain dataclasses that round-trip through JSON.

Stages: build -> inspect -> verify -> measure -> profile -> align -> attribute -> diagnose ->
confirm -> report (../shared/DESIGN.md). Every number carries its source: 'static' (read from
a binary or IR), 'measured' (whole-graph timing), 'profiled' (a profiler's kernel records).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# Columns of a KernelEvents table (pandas.DataFrame), one row per kernel launch, the same for
# every profiler import. Times are nanoseconds on the profiler's own clock.
KERNEL_EVENT_COLUMNS: dict[str, str] = {
    "kernel": "kernel (function) name as launched, demangled where the profiler demangles",
    "start_ns": "launch start, ns (int64)",
    "end_ns": "launch end, ns (int64)",
    "duration_ns": "end_ns - start_ns (int64)",
    "grid_x": "grid (blocks / workgroups) x; NA where the profiler has none",
    "grid_y": "grid y",
    "grid_z": "grid z",
    "block_x": "block (threads / workgroup size) x",
    "block_y": "block y",
    "block_z": "block z",
    "registers": "registers per thread (VGPRs on AMD), NA when not recorded",
    "shared_bytes": "static + dynamic shared memory (LDS) per block, bytes",
    "local_bytes": "local (scratch) memory per thread, bytes",
    "stream": "stream / queue id",
    "device": "device id",
    "correlation_id": "host-side launch correlation id, NA when absent",
    "call": "graph call index (0..n-1) after splitting into graph calls, -1 when not split",
    "source": "which importer produced the row: cupti, ncu, rocprof, nsys, chrome, iree-profile",
}


@dataclass
class CatalogKernel:
    """One kernel of a built variant: what it computes and what the compiler chose for it.

    - name: the symbol launched on the device (what profilers report).
    - function: the compiler's function (TVM PrimFunc global symbol, IREE dispatch export).
    - source_ops: provenance, the ops of the *input* module this kernel computes, as stable
      ids ('main/lv16:pool2d' for TVM: <relax function>/<binding var>:<callee>; IREE:
      '<entry function>/<dispatch symbol>'). Two variants' kernels that share source ops
      compute the same thing: that is how align matches a fused kernel to its parts.
    - call_sites: entry functions that launch this kernel (IREE dedup shows several).
    - launch: static launch configuration where known: {"grid": [x,y,z], "block": [x,y,z],
      "dynamic_shared_bytes": n} (TVM thread extents, IREE workgroup size/count if static).
    - resources: the inspect row of this kernel (parsers.KernelRecord.to_dict()) or {}.
    - schedule: the scheduling choice: TVM {"rule": "GeneralReduction", "shared_allocs":
      [...]}, IREE {"pipeline": ..., "workgroup_size": [...], "subgroup_size": n,
      "lowering_config": {...}}.
    - bytes_moved: bytes the kernel must read + write at minimum (from buffer shapes), or None.
    - flops: arithmetic work estimate, or None.
    """

    name: str
    function: str
    source_ops: list[str] = field(default_factory=list)
    call_sites: list[str] = field(default_factory=list)
    launch: dict[str, Any] = field(default_factory=dict)
    resources: dict[str, Any] = field(default_factory=dict)
    schedule: dict[str, Any] = field(default_factory=dict)
    bytes_moved: int | None = None
    flops: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CatalogKernel":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})
