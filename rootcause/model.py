"""The data every stage shares. Plain dataclasses that round-trip through JSON.

Stages: build -> inspect -> verify -> measure -> profile -> align -> attribute -> diagnose ->
confirm -> report (../shared/DESIGN.md). Every number carries its source: 'static' (read from
a binary or IR), 'measured' (whole-graph timing), 'profiled' (a profiler's kernel records).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# Columns of a KernelEvents table (pandas.DataFrame), one row per kernel launch, the same for
# every profiler import. Times are nanoseconds on the profiler's own clock. The list lives in
# parsers/events.py (pure parsers cannot import rootcause); this is the same object.
from parsers.events import EVENT_COLUMNS as KERNEL_EVENT_COLUMNS  # noqa: E402


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
