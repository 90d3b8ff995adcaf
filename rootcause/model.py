"""The data every stage shares. Plain dataclasses that round-trip through JSON.

Stages: build -> inspect -> verify -> measure -> profile -> align -> attribute -> diagnose ->
confirm -> report (docs/ARCHITECTURE.md). Every number carries its source: 'static' (read from
a binary or IR), 'measured' (whole-graph timing), 'profiled' (a profiler's kernel records).
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from rootcause.stats import LEVEL

# Columns of a KernelEvents table (pandas.DataFrame), one row per kernel launch, the same for
# every profiler import. Times are nanoseconds on the profiler's own clock. The list lives in
# parsers/events.py (pure parsers cannot import rootcause); this is the same object.
from parsers.events import COUNTER_COLUMNS, EVENT_COLUMNS as KERNEL_EVENT_COLUMNS  # noqa: E402, F401 (re-exported)


def strip_kernel(name: str) -> str:
    """A launched kernel's name less the suffix codegen adds to the function it launches (TVM's
    CUDA codegen launches PrimFunc `f` as `f_kernel`, `f_kernel0`, ..): the catalog's name."""
    return re.sub(r"_kernel\d*$", "", name)


@dataclass
class AlignmentTier:
    """A way a frontend knows that kernels of two builds compute the same ops, from its own
    naming (rootcause.analysis.align runs the frontends' tiers after the generic name tiers).

    keys(names, left, info) -> (keys, active): names and left are {'a': [...], 'b': [...]}, every
    launched kernel and those not yet in a unit with both sides; info maps node 'a:NAME' to its
    catalog facts (source_ops, ...). keys maps a node to its keys: nodes of both sides sharing a
    key join; active, when not None, limits that to keys touching one of its nodes.
    keys_are_ops: the keys name source ops (kept as the unit's source_ops)."""

    name: str
    keys: Callable[[dict[str, list[str]], dict[str, list[str]], dict[str, dict[str, Any]]],
                   tuple[dict[str, list[str]], set[str] | None]]
    keys_are_ops: bool = False


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
    - source_locs: input locations ('file:line:col', file by base name) of the ops the kernel
      computes, where the compiler carries them (IREE's MLIR locations: a fused dispatch keeps its
      producers' locations, a split reduction's dispatches share one). Kernels of two variants
      built from one source that share a location compute (part of) the same input op. TVM
      writes each op's content id instead ('relax:<hash>#k', its callee and inputs hashed:
      frontends/tvm/provenance.provenance), the same in two source files that build one graph,
      one per source op in source_ops order (align splits a kernel launched once per op with them).
    - source_op_kinds: the op each source_loc names, read from the source text ('math.tanh',
      'linalg.generic'; '' where not known), in source_locs order: what lets kernels of two
      variants built from two source files be compared by what they compute.
    - bytes_moved: bytes the kernel must read + write at minimum (from buffer shapes), or None.
    - flops: arithmetic work estimate, or None.
    - module_paths: for a model source ([model]), the modules of the model whose ops the kernel
      computes ('layers.3.mlp.down'), in op order; [] otherwise.
    - access: a CPU kernel's hot loop (the innermost loop that runs the most iterations) and the
      bytes between consecutive iterations' accesses to each buffer: {"loop": "i", "extent": 128,
      "iterations": 262144, "strides_bytes": {"x": 8192}} (TVM on llvm); {} where not read.
    - evaluations: how often one launch evaluates each transcendental function, by the names of
      EVALUATED ('exp': 4608), read from the kernel's body and its iteration space (IREE's linalg
      ops, XLA's HLO); {} where not read. Two producers' kernels of one module compare by it: a
      kernel that evaluates a producer's exp once per reduction step recomputes it.
    """

    name: str
    function: str
    source_ops: list[str] = field(default_factory=list)
    call_sites: list[str] = field(default_factory=list)
    launch: dict[str, Any] = field(default_factory=dict)
    resources: dict[str, Any] = field(default_factory=dict)
    schedule: dict[str, Any] = field(default_factory=dict)
    source_locs: list[str] = field(default_factory=list)
    source_op_kinds: list[str] = field(default_factory=list)
    bytes_moved: int | None = None
    flops: int | None = None
    module_paths: list[str] = field(default_factory=list)
    access: dict[str, Any] = field(default_factory=dict)
    evaluations: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CatalogKernel":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


# The transcendental functions a catalog's `evaluations` counts, each frontend's op names mapped to
# these: what two compilers' kernels are compared by.
EVALUATED = ("exp", "log", "tanh", "logistic", "rsqrt", "sqrt", "erf", "pow", "sin", "cos")


@dataclass
class BuildOutput:
    """What a frontend's build returns. Paths lie inside the build directory; the bundle stage
    copies them into the bundle layout (rootcause.artifacts.bundle)."""

    module_path: Path  # module.so (TVM) or module.vmfb (IREE)
    kernels: list[CatalogKernel] = field(default_factory=list)
    ir_files: list[Path] = field(default_factory=list)  # IR dumps, in pipeline order
    binary_files: list[Path] = field(default_factory=list)  # extracted device binaries
    versions: dict[str, str] = field(default_factory=dict)  # compiler and tool versions
    notes: list[str] = field(default_factory=list)  # what could not be filled, said plainly
    # The entry's inputs when the build derived them (a [model] source: weights, then the example
    # inputs; rootcause.spec.model_inputs); None: the spec's own [[inputs]].
    inputs: list[Any] | None = None


@dataclass
class Hybrid:
    """A counterfactual variant: one side's spec with the other side's decision at one unit (or a
    subset of the whole-spec differences). Frontends plan them; analysis.confirm judges them."""

    name: str  # the hybrid's variant (bundle) name
    base: str  # 'a' | 'b': whose spec it starts from
    kind: str  # 'dataflow-boundary' | 'schedule-override' | 'passes' | 'configuration' | 'executable' | 'flags'
    change: dict[str, Any]  # the spec edit, as data
    description: str  # what the hybrid restores, in words
    source_ops: list[str] = field(default_factory=list)  # the unit's ops ([] for whole-spec edits)
    kernels: list[str] = field(default_factory=list)  # the base side's kernels it changes
    spec: Any = field(default=None, repr=False, compare=False)  # rootcause.spec.VariantSpec

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in ("name", "base", "kind", "change", "description", "source_ops",
                                           "kernels")}
        d["spec"] = self.spec.to_dict() if self.spec is not None else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Hybrid":
        from rootcause.spec import VariantSpec  # spec imports the frontend registry: not at import time

        spec = VariantSpec.from_dict(d["spec"]) if d.get("spec") else None
        return cls(d["name"], d["base"], d["kind"], d["change"], d["description"], list(d.get("source_ops", [])),
                   list(d.get("kernels", [])), spec)


@dataclass
class Interval:
    median: float
    low: float
    high: float

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    def to_dict(self) -> dict[str, float]:
        return {"median": float(self.median), "low": float(self.low), "high": float(self.high),
                "level": LEVEL}


@dataclass(frozen=True)
class MeasuredPair:
    """A and B timed side by side in one process (the interleaved protocol): the delta's own
    interval, B - A in ns, and the interval of B's time over A's. Narrower than the difference of
    the two variants' own intervals, which cannot pair them and is as wide as both together."""
    delta_ns: Interval
    ratio_b_over_a: Interval


@dataclass
class WholeGraph:
    """Whole-graph time per call of one variant, in ns, and where it came from."""
    median_ns: float
    low_ns: float
    high_ns: float
    source: str  # 'measured' | 'profiled-span' | 'profiler-steps' | 'loader-iterations' | 'launch-interval'
    # | 'call-interval' | 'annotation-iterations' | 'graph-launches' | 'optimizer-steps'
    samples: int | None = None
    # call-interval: how many different call signatures (kernel sequences) the calls found in the
    # profile have; one when every call launches the same kernels
    signatures: int | None = None

    def interval(self) -> Interval:
        return Interval(self.median_ns, self.low_ns, self.high_ns)
