"""Align the kernels of two variants into units that compute the same source ops.

A unit is a set of kernels of A and a set of kernels of B; fusion makes it many-to-many
(A's `fused_pool2d_add2_kernel` against B's `pool2d_kernel` + `add2_kernel`). Kernels are
joined by union-find over the bipartite graph kernel_A -- source op -- kernel_B, tier by
tier, strongest evidence first. A kernel already in a unit that has both sides is settled;
the rest go on to the next tier:

The tiers, in the order they run (TIERS; the frontends' own name tiers come after module-path,
in registry order; ordered_tiers is the one list align runs):

- provenance: the catalogs' source_ops (bundle manifest "kernels"), the only tier that knows
  which ops a kernel really computes; op ids are first normalized by the frontends that name
  them (IREE: dispatch ordinal and owning function removed).
- location: the catalogs' source_locs, the input locations of the ops a kernel computes (IREE
  carries MLIR locations into its dispatches; TVM writes each op's content id, which two source
  files that build one graph share where their binding names differ). Any two kernels sharing
  one join, whatever tier placed them: a serial reduction meets its split partial + combine
  dispatches, a fused dispatch the dispatches of the producers it absorbed.
- op-tree: traces of one model from two vendors or engines (kernel names mostly differ, and both
  traces record the nn.Module spans around each launch: the events' module_path): each launch is
  keyed by the module instance and the CPU op that launched it ('...BertLayer_1.BertAttention_1.
  BertSdpaSelfAttention_1.Linear_4/aten::addmm'); a kernel launched in several modules a call is
  first split into one node per launch ordinal, as the per-op split does.
- name: the same kernel name in both variants.
- normalized-name: the same name once numbers and hashes are made anonymous (template
  arguments, renumbered torch.compile suffixes), the key unique on each side.
- cpu-op: the CPU op that launched the kernel (Kineto's External id), when it launches a few
  (CPU_OP_KERNELS) distinct unmatched kernels on each side (the library picked another GEMM).
- module-path: across producers (the two catalogs share no source op: two compilers, or two
  sources of one model), the model modules a kernel computes in (its catalog's module paths,
  'blocks.3.mlp'; only the first where joining by all would chain instances of one repeated
  module): every kernel of A and of B that computes in one module instance is one unit,
  whatever each compiler fused there. What a model's structure names is the language two
  compilers share; within one producer provenance says more, and this tier does not run.
- the frontends' name tiers (rootcause.model.AlignmentTier, each frontend's alignment_tiers):
  IREE's dispatch-name (symbols without the '<entry>$async_dispatch_<n>_' prefix, unique on each
  side), TVM's fused-name (fused names split into the op names they fuse, 'fused_pool2d_add2'
  covering 'pool2d' and 'add2').
- shape: the same launch work size (grid * block threads), when unique on both sides and the
  catalogs (where they tell) do not put the two kernels' bytes moved 8x or more apart.
- launch-order: in one graph call of each side, the launches of units settled so far are
  anchors; where the two anchor sequences agree (difflib's matching blocks), the unmatched
  kernels launched between two consecutive common anchors on one side join those launched
  between the same anchors on the other (torch.compile's fused Triton kernel against the eager
  kernels of the ops it fuses, between the same GEMMs). Gaps sharing a kernel of B, or mostly
  the same kernels of A, are one unit; an A kernel launched in gaps of several units (one
  eager add for the residual and for the activation) goes with most of its launches, noted.
- remainder: when kernels of both sides are still unmatched, they form one unit: both
  variants compute the same entry function (verify checks their outputs), so what the
  matched units leave over computes the same rest, by elimination. This is how a fused
  IREE dispatch meets the dispatches it replaces (the einsum_fusion case: 'reduction' against
  'elementwise' + 'matmul_like'): their source ops are dispatch names, which differ.
- absorbed: when only one side has kernels left and it launches more kernels per call than the
  other, each of them launched right before a kernel of a unit with both sides joins that unit,
  where the catalogs show the other side's kernels there doing at least the work (flops) of
  this side's, the absorbed one included: a producer the other side fused into its consumer (a
  chain fused into the contraction that consumes it, from two source files, where no location
  is shared). Noted.
- unmatched: what is left (kernels of one side only) is its own unit, flagged.

One kernel, several call sites (the layernorm_unfused case: the unfused `mean` PrimFunc serves
two bindings, the mean of x and the mean of the squares): when every profiled call launches it
once per source op of its catalog entry, each launch is its own node, the i-th launch of a call
computing the i-th source op (the VM runs bindings in order), so two independent ops one
executable serves land in the units of their own partners instead of joining them.

Dedup (the prefill_dedup case): a catalog kernel with several call_sites keeps only the source ops of
the entry function being measured, so the bs8 call of an executable shared with bs2 aligns
with the bs8 executable of the other build; `shared_call_sites` keeps the full list.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

import pandas as pd

from rootcause import frontends
from rootcause.errors import UsageError
from rootcause.exporters import pattern
from rootcause.model import AlignmentTier, CatalogKernel, strip_kernel
from rootcause.profilers import split_calls

# One row per unit.
UNIT_COLUMNS: dict[str, str] = {
    "unit": "unit id (int), 0..n-1 in order of first appearance",
    "kernels_a": "tuple of kernel names of variant A in this unit (may be empty)",
    "kernels_b": "tuple of kernel names of variant B in this unit (may be empty)",
    "source_ops": "tuple of source-op ids (provenance) or op names (fused-name) covered",
    "method": "weakest tier that joined the unit (TIERS): provenance, location, name, normalized-name, cpu-op, "
              "module-path, a frontend's name tier (dispatch-name, fused-name), shape, launch-order, remainder, "
              "absorbed, unmatched",
    "flagged": "True when the unit has kernels on one side only or was joined by shape",
}

# One row per (variant, kernel).
KERNEL_COLUMNS: dict[str, str] = {
    "variant": "'a' or 'b'",
    "kernel": "kernel name as in the KernelEvents table",
    "unit": "unit id",
    "method": "tier that placed this kernel",
    "catalog": "True when a catalog entry was found for the kernel",
    "source_ops": "tuple of source-op ids used (after the call-site split)",
    "shared_call_sites": "tuple of all call sites of the kernel when it serves more than one",
    "instance": "launch ordinal within a graph call this row covers (a kernel split per source op), "
                "else None (every launch)",
}

# The generic tiers, strongest first (GENERIC_TIERS runs them); the frontends' name tiers run
# after module-path (ordered_tiers).
TIERS = ("provenance", "location", "op-tree", "name", "normalized-name", "cpu-op", "module-path", "shape",
         "launch-order", "remainder", "absorbed", "unmatched")
NAME_TIERS_AFTER = "module-path"
INSTANCE = "#@"  # node name of the i-th launch of a split kernel: KERNEL#@i


def base_kernel(name: str) -> tuple[str, int | None]:
    """(kernel, launch ordinal) of an alignment node name; ordinal None for a whole kernel."""
    kernel, sep, i = name.rpartition(INSTANCE)
    return (kernel, int(i)) if sep and i.isdigit() else (name, None)


@dataclass
class Alignment:
    units: pd.DataFrame
    kernels: pd.DataFrame
    notes: list[str] = field(default_factory=list)

    def unit_of(self, variant: str, kernel: str) -> int:
        row = self.kernels[(self.kernels.variant == variant) & (self.kernels.kernel == kernel)]
        return int(row.unit.iloc[0])


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        parent = self.parent.setdefault(x, x)
        while parent != self.parent[parent]:
            self.parent[parent] = self.parent[self.parent[parent]]
            parent = self.parent[parent]
        self.parent[x] = parent
        return parent

    def union(self, x: str, y: str) -> None:
        rx, ry = self.find(x), self.find(y)
        if rx != ry:
            self.parent[ry] = rx


def catalog_index(catalog: list[CatalogKernel] | None, by_function: bool = True) -> dict[str, CatalogKernel]:
    """Catalog kernels by launched name, stripped name and (by_function) compiler function."""
    index: dict[str, CatalogKernel] = {}
    for k in catalog or []:
        keys = (k.name, k.function, strip_kernel(k.name)) if by_function else (k.name, strip_kernel(k.name))
        for key in keys:
            if key:
                index.setdefault(key, k)
    return index


def _lookup(index: dict[str, CatalogKernel], kernel: str) -> CatalogKernel | None:
    return index.get(kernel) or index.get(strip_kernel(kernel))


def frontend_tiers() -> list[AlignmentTier]:
    """The frontends' own name tiers, in registry order."""
    return [tier for hook in frontends.hooks("alignment_tiers") for tier in hook()]


def tiers(name_tiers: list[AlignmentTier] | None = None) -> tuple[str, ...]:
    """Every tier's name in the order they run, weakest last."""
    return tuple(t.name for t in ordered_tiers(name_tiers))


def op_normalizer() -> Callable[[str], str]:
    """A source-op id as the frontends compare it across builds (each frontend's normalize_op
    leaves other frontends' ids unchanged)."""
    hooks = frontends.hooks("normalize_op")

    def normalize(op: str) -> str:
        for hook in hooks:
            op = hook(op)
        return op
    return normalize


def call_site_ops(k: CatalogKernel, entry: str | None, normalize: Callable[[str], str] | None = None) -> list[str]:
    """Source ops of `k` for the call site `entry` (all of them when it has one call site),
    normalized (op_normalizer)."""
    normalize = normalize or op_normalizer()
    ops = [normalize(op) for op in k.source_ops]
    if entry and len(k.call_sites) > 1:
        mine = [op for op in ops if op.split("/", 1)[0] == entry]
        if mine:
            return mine
        # Ops named after one call site only (the dedup keeper): rename them to this entry.
        return sorted({f"{entry}/{op.split('/', 1)[1]}" if "/" in op else op for op in ops})
    return ops


CPU_OP_KERNELS = 4  # distinct kernels one CPU op may launch on a side and still make one unit
_NUMBER = re.compile(r"\d+")
_HASH = re.compile(r"\b[0-9a-f]{8,}\b")


def normalized_name(name: str) -> str:
    """A kernel name with hashes and numbers made anonymous: template arguments ('<4, ...>' vs
    '<8, ...>') and renumbered suffixes ('triton_poi_fused_add_15' vs '_23') compare equal."""
    return _NUMBER.sub("#", _HASH.sub("#", name))


def _cpu_ops(events: pd.DataFrame) -> dict[str, str]:
    """kernel -> the CPU op that launched most of its rows (where the trace records it)."""
    if "cpu_op" not in events.columns:
        return {}
    known = events[["kernel", "cpu_op"]].dropna()
    if known.empty:
        return {}
    top = known.groupby("kernel")["cpu_op"].agg(lambda s: s.value_counts().index[0])
    return {str(k): str(v) for k, v in top.items()}


def _kernel_names(events: pd.DataFrame) -> list[str]:
    return [str(k) for k in pd.unique(events["kernel"].to_numpy())]  # first-seen order


# A launch size is a weak key (a CPU dispatch's workgroup count is often the rows of its
# output): two kernels whose catalogs say they move bytes this many times apart do not compute
# the same thing, whatever their launch (a 4 x 512 reduction against a 4 x 8388608 one).
SHAPE_BYTES_RATIO = 8


def _same_bytes(keys: dict[str, list[str]], info: dict[str, dict]) -> dict[str, list[str]]:
    """The shape tier's keys less the pairs whose catalogs' bytes_moved are SHAPE_BYTES_RATIO
    or more apart (kept where either side's bytes are unknown)."""
    by_key: dict[str, list[str]] = {}
    for node, (key,) in keys.items():
        by_key.setdefault(key, []).append(node)
    out = dict(keys)
    for nodes in by_key.values():
        moved = [info[n].get("bytes_moved") for n in nodes]
        if len(nodes) == 2 and all(isinstance(b, int) and b > 0 for b in moved) and \
                max(moved) >= SHAPE_BYTES_RATIO * min(moved):
            for n in nodes:
                del out[n]
    return out


def _work_sizes(events: pd.DataFrame) -> dict[str, int]:
    cols = ["grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]
    if not set(cols) <= set(events.columns):
        return {}
    dims = events.drop_duplicates("kernel")[["kernel"] + cols].dropna()  # first launch of each
    if dims.empty:
        return {}
    work = dims[cols].astype("int64").prod(axis=1)
    return dict(zip(dims["kernel"].astype(str), work.astype("int64")))


def _launches_per_call(events: pd.DataFrame) -> dict[str, set[int]]:
    """Each kernel's distinct launch counts per graph call (a call that does not launch it counts
    0); empty without call numbers."""
    if "call" not in events.columns:
        return {}
    ev = events[events["call"] >= 0]
    if ev.empty:
        return {}
    table = ev.groupby(["kernel", "call"]).size().unstack(fill_value=0)
    return {str(k): {int(c) for c in row} for k, row in zip(table.index, table.to_numpy())}


def _numbered(events: pd.DataFrame) -> pd.DataFrame:
    """events with graph-call numbers: as given, or, where the profile marks none, split by the
    repeating kernel sequence as the attribution splits them (profilers.split_calls), so a kernel
    launched once per op or per module instance is split here as its launches are counted there."""
    if ("call" in events.columns and (events["call"] >= 0).any()) or "start_ns" not in events.columns:
        return events
    try:
        return split_calls(events)
    except UsageError:  # no repeating sequence: the attribution says so; nothing is split here
        return events


def _split_per_op(v: str, names: dict[str, list[str]], info: dict[str, dict], launches: dict[str, set[int]]) -> None:
    """Replace a kernel that serves several source ops, launched once per op in every call, by one
    node per launch ordinal carrying that op (module doc), and that op's location where the catalog
    gives one per op (TVM's content ids, model.CatalogKernel.source_locs)."""
    out = []
    for n in names[v]:
        node = f"{v}:{n}"
        ops = info[node]["source_ops"]
        if len(ops) < 2 or len(set(ops)) != len(ops) or launches.get(n) != {len(ops)}:
            out.append(n)
            continue
        row = info.pop(node)
        locs = row["source_locs"]
        for i, op in enumerate(ops):
            out.append(f"{n}{INSTANCE}{i}")
            mine = (locs[i],) if len(locs) == len(ops) else locs
            info[f"{v}:{n}{INSTANCE}{i}"] = {**row, "source_ops": (op,), "source_locs": mine}
    names[v] = out


@dataclass
class _Matching:
    """What the tiers share while they join kernels: every node's catalog facts, the union-find of
    units, the tier that placed each node, and the notes. A tier reads what it needs and joins
    nodes through link_through."""

    names: dict[str, list[str]]
    info: dict[str, dict]
    events: dict[str, pd.DataFrame]
    across: bool = False  # two producers: the catalogs share no source op
    tree_keys: dict[str, list[str]] = field(default_factory=dict)
    uf: _UnionFind = field(default_factory=lambda: _UnionFind())
    method: dict[str, str] = field(default_factory=dict)
    op_keys: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # tier -> node -> its op keys
    notes: list[str] = field(default_factory=list)

    def pending(self) -> dict[str, list[str]]:
        """Kernels not yet in a unit that has both sides."""
        sides: dict[str, set[str]] = {}
        for node in self.info:
            sides.setdefault(self.uf.find(node), set()).add(node[0])
        return {v: [n for n in self.names[v] if sides[self.uf.find(f"{v}:{n}")] != {"a", "b"}] for v in ("a", "b")}

    def place(self, nodes: list[str], tier: str) -> None:
        for node in nodes:
            self.method.setdefault(node, tier)

    def link_through(self, keys: dict[str, list[str]], tier: str, active: set[str] | None = None) -> None:
        """Union nodes sharing a key, but only keys that occur on both sides (and, when `active`
        is given, that touch at least one of its nodes)."""
        by_key: dict[str, set[str]] = {}
        for node, ks in keys.items():
            for key in ks:
                by_key.setdefault(key, set()).add(node)
        for key, nodes in by_key.items():
            if active is not None and not nodes & active:
                continue
            if {n[0] for n in nodes} == {"a", "b"}:
                for node in nodes:
                    self.uf.union(f"{tier}:{key}", node)
                self.place(sorted(nodes), tier)


@dataclass(frozen=True)
class _Tier:
    """One way of joining kernels (module doc): run(matching) links what it finds."""

    name: str
    run: Callable[[_Matching], None]


def _provenance(m: _Matching) -> None:
    m.link_through({node: list(i["source_ops"]) for node, i in m.info.items() if i["source_ops"]}, "provenance")


def _location(m: _Matching) -> None:
    """Kernels (of any tier so far) that compute part of one input op join, many to many."""
    m.link_through({node: list(i["source_locs"]) for node, i in m.info.items() if i["source_locs"]}, "location")


def _op_tree(m: _Matching) -> None:
    if m.tree_keys:
        m.link_through(m.tree_keys, "op-tree")
        m.op_keys["op-tree"] = m.tree_keys


def _name(m: _Matching) -> None:
    left = m.pending()
    m.link_through({f"{v}:{n}": [n] for v in "ab" for n in left[v]}, "name")


def _normalized_name(m: _Matching) -> None:
    """Names that differ only in numbers or hashes, the key unique on each side."""
    left, keys = m.pending(), {}
    for v in "ab":
        counts = pd.Series([normalized_name(n) for n in left[v]], dtype=object).value_counts()
        for n in left[v]:
            if counts.get(normalized_name(n)) == 1:
                keys[f"{v}:{n}"] = [normalized_name(n)]
    m.link_through(keys, "normalized-name")


def _cpu_op(m: _Matching) -> None:
    """The CPU op that launched a few distinct kernels still unmatched on each side."""
    left, keys = m.pending(), {}
    for v in "ab":
        ops = _cpu_ops(m.events[v])
        mine = {n: ops.get(n) for n in left[v] if ops.get(n)}
        counts = pd.Series(list(mine.values()), dtype=object).value_counts()
        keys.update({f"{v}:{n}": [op] for n, op in mine.items() if counts.get(op) <= CPU_OP_KERNELS})
    m.link_through(keys, "cpu-op")


def _module_path(m: _Matching) -> None:
    if m.across:
        left = m.pending()
        m.link_through(_module_keys([f"{v}:{n}" for v in "ab" for n in left[v]], m.info), "module-path")


def _shape(m: _Matching) -> None:
    """Launch work size, unique among the still-unmatched of each side."""
    left, keys = m.pending(), {}
    for v in "ab":
        work = _work_sizes(m.events[v])
        sizes = pd.Series({n: work.get(n) for n in left[v]}, dtype="object").dropna()
        for n, size in sizes[~sizes.duplicated(keep=False)].items():
            keys[f"{v}:{n}"] = [str(size)]
    m.link_through(_same_bytes(keys, m.info), "shape")


def _launch_order(m: _Matching) -> None:
    left = m.pending()
    if left["a"] and left["b"]:
        keys, order_notes = _between_anchors(m.events["a"], m.events["b"], {v: set(left[v]) for v in "ab"}, m.uf)
        m.link_through(keys, "launch-order")
        m.notes.extend(order_notes)


def _remainder(m: _Matching) -> None:
    left = m.pending()
    if left["a"] and left["b"]:
        m.link_through({f"{v}:{n}": ["rest"] for v in "ab" for n in left[v]}, "remainder")
        m.notes.append(f"{len(left['a'])} kernel(s) of A and {len(left['b'])} of B matched no tier and "
                       f"were joined as the remainder of the same entry function (by elimination): "
                       f"{', '.join(left['a'][:3])} against {', '.join(left['b'][:3])}")


def _absorbed_tier(m: _Matching) -> None:
    """A producer fused into its consumer: only one side has kernels left, and it launches more."""
    left = m.pending()
    for v, other in (("a", "b"), ("b", "a")):
        if left[v] and not left[other]:
            joined = _absorbed(v, left[v], m.events, m.uf, m.pending, m.info)
            for node, anchor in joined:
                m.uf.union(node, anchor)
            m.place([node for node, _ in joined], "absorbed")
            if joined:
                m.notes.append(f"{len(joined)} kernel(s) of {v.upper()} with no counterpart joined the unit of the "
                               "kernel launched right after them (a producer the other side fused into its "
                               "consumer): " + ", ".join(f"{n[2:]} -> {a[2:]}" for n, a in joined[:3]))


def _unmatched(m: _Matching) -> None:
    m.place(list(m.info), "unmatched")


GENERIC_TIERS = (_Tier("provenance", _provenance), _Tier("location", _location), _Tier("op-tree", _op_tree),
                 _Tier("name", _name), _Tier("normalized-name", _normalized_name), _Tier("cpu-op", _cpu_op),
                 _Tier("module-path", _module_path), _Tier("shape", _shape), _Tier("launch-order", _launch_order),
                 _Tier("remainder", _remainder), _Tier("absorbed", _absorbed_tier), _Tier("unmatched", _unmatched))


def _frontend_tier(tier: AlignmentTier) -> _Tier:
    def run(m: _Matching) -> None:
        keys, active = tier.keys(m.names, m.pending(), m.info)
        m.link_through(keys, tier.name, active)
        if tier.keys_are_ops:
            m.op_keys[tier.name] = keys
    return _Tier(tier.name, run)


def ordered_tiers(name_tiers: list[AlignmentTier] | None = None) -> list[_Tier]:
    """Every tier in the order align runs them: the generic ones, with the frontends' name tiers
    (registry order) after NAME_TIERS_AFTER."""
    name_tiers = frontend_tiers() if name_tiers is None else name_tiers
    at = TIERS.index(NAME_TIERS_AFTER) + 1
    return [*GENERIC_TIERS[:at], *map(_frontend_tier, name_tiers), *GENERIC_TIERS[at:]]


def align(events_a: pd.DataFrame, events_b: pd.DataFrame,
          catalog_a: list[CatalogKernel] | None = None,
          catalog_b: list[CatalogKernel] | None = None,
          entry_a: str | None = None, entry_b: str | None = None) -> Alignment:
    """Units of kernels of A and B that compute the same source ops (see module doc)."""
    m = _matching(events_a, events_b, catalog_a, catalog_b, entry_a, entry_b)
    order = ordered_tiers()
    for tier in order:
        tier.run(m)
    return _tables(m.names, m.info, m.uf, m.method, m.op_keys, m.notes, tuple(t.name for t in order))


def _matching(events_a: pd.DataFrame, events_b: pd.DataFrame, catalog_a: list[CatalogKernel] | None,
              catalog_b: list[CatalogKernel] | None, entry_a: str | None, entry_b: str | None) -> _Matching:
    """Every launched kernel a node with its catalog facts, split per op, per call site or per
    module-tree position where a kernel serves several (module doc)."""
    events = {"a": events_a, "b": events_b}
    names = {v: _kernel_names(events[v]) for v in "ab"}
    catalogs = {"a": catalog_index(catalog_a), "b": catalog_index(catalog_b)}
    entries = {"a": entry_a, "b": entry_b}
    normalize = op_normalizer()
    info: dict[str, dict] = {}
    launches: dict[str, dict[str, set[int]]] = {}  # each side's launches per graph call, for the per-launch splits
    uf = _UnionFind()
    for v in ("a", "b"):
        for kernel in names[v]:
            node = f"{v}:{kernel}"
            uf.find(node)
            k = _lookup(catalogs[v], kernel)
            ops = call_site_ops(k, entries[v], normalize) if k else []
            shared = tuple(k.call_sites) if k and len(k.call_sites) > 1 else ()
            info[node] = {"catalog": k is not None, "source_ops": tuple(ops),
                          "source_locs": tuple(k.source_locs) if k else (), "shared_call_sites": shared,
                          "module_paths": tuple(k.module_paths) if k else (),
                          "bytes_moved": k.bytes_moved if k else None, "flops": k.flops if k else None}
        if catalogs["a"] and catalogs["b"]:
            launches[v] = _launches_per_call(_numbered(events[v]))
            _split_per_op(v, names, info, launches[v])
    m = _Matching(names, info, events, uf=uf)
    m.across = bool(catalogs["a"] and catalogs["b"]) and not _share_ops(info)
    if not (catalogs["a"] or catalogs["b"]) and _other_producers(events_a, events_b):
        for v in "ab":
            m.tree_keys.update(_split_per_tree(v, names, info, events[v]))
    for v in "ab":
        if m.across:
            _split_per_path(v, names, info, launches[v])
        missing = [n for n in names[v] if catalogs[v] and not info[f"{v}:{n}"]["catalog"]]
        if missing:
            m.notes.append(f"variant {v}: {len(missing)} launched kernel(s) not in the catalog "
                           f"(aligned by name/shape instead): {', '.join(missing[:5])}")
    return m


def _instance(path: str) -> str:
    """The repeated module a path lies in: its prefix up to its first index ('blocks.3.mlp.up' ->
    'blocks.3'); the path itself when it has none."""
    parts = path.split(".")
    index = next((i for i, p in enumerate(parts) if p.isdigit()), None)
    return ".".join(parts[:index + 1]) if index is not None else path


def _split_per_path(v: str, names: dict[str, list[str]], info: dict[str, dict],
                    launches: dict[str, set[int]]) -> None:
    """Across producers: a kernel that serves several instances of a repeated module, launched
    once per instance in every call (IREE's one executable for the four blocks' up-projections,
    TVM's one PrimFunc for three basic blocks' convolutions), becomes one node per launch ordinal
    carrying that instance's module paths, instances in the catalog's order (program order)."""
    out = []
    for n in names[v]:
        node = f"{v}:{n}"
        groups: dict[str, list[str]] = {}
        for path in info[node]["module_paths"]:
            groups.setdefault(_instance(path), []).append(path)
        if base_kernel(n)[1] is not None or len(groups) < 2 or launches.get(n) != {len(groups)}:
            out.append(n)
            continue
        row = info.pop(node)
        for i, paths in enumerate(groups.values()):
            out.append(f"{n}{INSTANCE}{i}")
            info[f"{v}:{n}{INSTANCE}{i}"] = {**row, "module_paths": tuple(paths)}
    names[v] = out


def _module_keys(nodes: list[str], info: dict[str, dict]) -> dict[str, list[str]]:
    """The module-path tier's keys: every module path a kernel computes in (a fused kernel joins
    the modules it spans: the thread's producers fused into the einsum), except where joining by
    all of them would chain instances of one repeated module into one unit (a residual add fused
    with the next block's norm, block after block): there each kernel keeps its first path only."""
    full = {node: list(info[node]["module_paths"]) for node in nodes if info[node]["module_paths"]}
    chains = _UnionFind()
    for node, paths in full.items():
        for path in paths:
            chains.union(f"path:{path}", node)
    by_component: dict[str, set[str]] = {}
    for paths in full.values():
        for path in paths:
            by_component.setdefault(chains.find(f"path:{path}"), set()).add(path)
    chained = {root for root, paths in by_component.items()
               if len({pattern(p) for p in paths}) < len(paths) and any(pattern(p) != p for p in paths)}
    return {node: paths if chains.find(node) not in chained else paths[:1] for node, paths in full.items()}


TREE_COVERAGE = 0.5  # share of a trace's launches with a module path for the op-tree tier to run
NAMES_SHARED = 0.5  # kernel names both traces hold, as a share of either's: above it, one producer


def _other_producers(events_a: pd.DataFrame, events_b: pd.DataFrame) -> bool:
    """Two traces of one model from two vendors or engines: each records module paths for most of
    its launches, and their kernel names mostly differ (another library, another vendor)."""
    for ev in (events_a, events_b):
        if "module_path" not in ev.columns or len(ev) == 0 or ev["module_path"].notna().mean() < TREE_COVERAGE:
            return False
    a, b = set(events_a["kernel"]), set(events_b["kernel"])
    return len(a & b) < NAMES_SHARED * min(len(a), len(b))


def _split_per_tree(v: str, names: dict[str, list[str]], info: dict[str, dict],
                    events: pd.DataFrame) -> dict[str, list[str]]:
    """The op-tree tier's keys of side v ('<module path>/<cpu op>' of each launch). A kernel launched
    k > 1 times a call with the same sequence of distinct keys in every call becomes k nodes, the
    i-th launch's (as _split_per_op); one whose sequence varies between calls keeps no key."""
    ev = events[events["module_path"].notna()]
    if "call" in ev.columns and (ev["call"] >= 0).any():
        ev = ev[ev["call"] >= 0]
    ev = ev.sort_values("start_ns", kind="stable")
    key = ev["module_path"].astype(str) + "/" + ev["cpu_op"].astype(object).where(ev["cpu_op"].notna(), "?").astype(str)
    calls = ev["call"] if "call" in ev.columns else pd.Series(0, index=ev.index)
    sequences: dict[str, set[tuple[str, ...]]] = {}
    for (kernel, _), keys in key.groupby([ev["kernel"], calls], sort=False):
        sequences.setdefault(str(kernel), set()).add(tuple(keys))
    out, found = [], {}
    for n in names[v]:
        seqs = sequences.get(n)
        if not seqs or len(seqs) != 1 or base_kernel(n)[1] is not None:
            out.append(n)
            continue
        (seq,) = seqs
        if len(set(seq)) == 1 or len(seq) == 1:
            out.append(n)
            found[f"{v}:{n}"] = [seq[0]]
            continue
        row = info.pop(f"{v}:{n}")
        for i, k in enumerate(seq):
            out.append(f"{n}{INSTANCE}{i}")
            info[f"{v}:{n}{INSTANCE}{i}"] = dict(row)
            found[f"{v}:{n}{INSTANCE}{i}"] = [k]
    names[v] = out
    return found


def _share_ops(info: dict[str, dict]) -> bool:
    """Whether any source op is named by kernels of both sides (one producer's ids: provenance)."""
    ops = {v: {op for node, i in info.items() if node[0] == v for op in i["source_ops"]} for v in "ab"}
    return bool(ops["a"] & ops["b"])


def _absorbed(v: str, free: list[str], events: dict[str, pd.DataFrame], uf: _UnionFind,
              pending, info: dict[str, dict]) -> list[tuple[str, str]]:
    """(node, anchor node) for the absorbed tier: side v's unmatched kernels each launched right before a
    kernel whose unit has both sides, when v launches more kernels a call than the other side and
    the catalogs show the other side's kernels of that unit doing at least the work of v's,
    the absorbed one included (a fused kernel computes what it absorbed; an extra library call
    with no catalog evidence stays a unit of its own)."""
    other = "b" if v == "a" else "a"
    calls = {s: _one_call(events[s]) for s in "ab"}
    if len(calls[v]) <= len(calls[other]):
        return []
    unplaced = set(pending()[v])
    settled = {n for n in calls[v] if n not in unplaced}
    members: dict[str, list[str]] = {}  # root -> its nodes; nothing below unites nodes
    for node in info:
        members.setdefault(uf.find(node), []).append(node)
    out, taken = [], set()
    for i, kernel in enumerate(calls[v][:-1]):
        after = calls[v][i + 1]
        if kernel not in free or after not in settled or f"{v}:{kernel}" in taken:
            continue
        nodes = members[uf.find(f"{v}:{after}")]
        unit = {s: [n for n in nodes if n[0] == s] for s in "ab"}
        mine = [info[n]["flops"] for n in unit[v]] + [info[f"{v}:{kernel}"]["flops"]]
        theirs = [info[n]["flops"] for n in unit[other]]
        if None in mine or None in theirs or sum(theirs) < sum(mine):
            continue
        out.append((f"{v}:{kernel}", f"{v}:{after}"))
        taken.add(f"{v}:{kernel}")
    return out


def _one_call(events: pd.DataFrame) -> list[str]:
    """Kernel names of one graph call in launch order: the first call with the modal launch
    count (all rows when the events are not split into calls)."""
    ev = events.sort_values("start_ns", kind="stable")
    if "call" in ev.columns and (ev["call"] >= 0).any():
        ev = ev[ev["call"] >= 0]
        sizes = ev.groupby("call").size()
        call = sizes[sizes == sizes.mode().iloc[0]].index[0]
        ev = ev[ev["call"] == call]
    return [str(k) for k in ev["kernel"]]


def _between_anchors(events_a: pd.DataFrame, events_b: pd.DataFrame, free: dict[str, set[str]],
                     uf: _UnionFind) -> tuple[dict[str, list[str]], list[str]]:
    """(node -> its gap group, notes) for the launch-order tier. Gaps between the same common anchors pair
    their unmatched kernels. Gaps sharing a B kernel form one group; groups whose A kernels are
    mostly the same (at least half of the smaller group's) merge; an A kernel still launched in
    several groups (one eager add serving the residual and the activation) joins the group with
    most of its launches, and a note says so."""
    from collections import Counter
    from difflib import SequenceMatcher

    seqs = {"a": _one_call(events_a), "b": _one_call(events_b)}
    # each side's launches as (anchor unit or None, kernel), anchors being settled kernels
    marks = {v: [(None if k in free[v] else uf.find(f"{v}:{k}"), k) for k in seqs[v]] for v in "ab"}
    anchors = {v: [i for i, (root, _) in enumerate(marks[v]) if root is not None] for v in "ab"}
    roots = {v: [marks[v][i][0] for i in anchors[v]] for v in "ab"}
    matcher = SequenceMatcher(None, roots["a"], roots["b"], autojunk=False)
    pairs = [(-1, -1)]  # launch positions of the common anchors, the call's start first
    for block in matcher.get_matching_blocks():
        pairs += [(anchors["a"][block.a + j], anchors["b"][block.b + j]) for j in range(block.size)]
    if len(pairs) == 1:  # no common anchor: the whole call is one gap, which is the remainder
        return {}, []
    pairs.append((len(seqs["a"]), len(seqs["b"])))
    gaps = []  # (A kernel launch counts, B kernels) of each gap with unmatched kernels on both sides
    for (a0, b0), (a1, b1) in zip(pairs, pairs[1:]):
        in_a = Counter(k for r, k in marks["a"][a0 + 1:a1] if r is None)
        in_b = {k for r, k in marks["b"][b0 + 1:b1] if r is None}
        if in_a and in_b:
            gaps.append((in_a, in_b))
    by_b = _UnionFind()
    for g, (_, in_b) in enumerate(gaps):
        for k in in_b:
            by_b.union(f"b:{k}", f"gap:{g}")
    groups: dict[str, list[int]] = {}
    for g in range(len(gaps)):
        groups.setdefault(by_b.find(f"gap:{g}"), []).append(g)
    launches = [sum((gaps[g][0] for g in members), Counter()) for members in groups.values()]
    kernels_b = [set().union(*(gaps[g][1] for g in members)) for members in groups.values()]
    merged = True
    while merged:  # groups of mostly the same A kernels are one group (few groups: quadratic is fine)
        merged = False
        for i in range(len(launches)):
            for j in range(i + 1, len(launches)):
                shared = launches[i].keys() & launches[j].keys()
                if 2 * len(shared) >= min(len(launches[i]), len(launches[j])):
                    launches[i] += launches.pop(j)
                    kernels_b[i] |= kernels_b.pop(j)
                    merged = True
                    break
            if merged:
                break
    if len(kernels_b) < 2:  # one group: no finer than the remainder, which says so itself
        return {}, []
    keys: dict[str, list[str]] = {}
    notes: list[str] = []
    for g, names_b in enumerate(kernels_b):
        keys.update({f"b:{k}": [str(g)] for k in names_b})
    for k in sorted(set().union(*launches)) if launches else []:
        counts = [c.get(k, 0) for c in launches]
        best = max(range(len(counts)), key=counts.__getitem__)
        keys[f"a:{k}"] = [str(best)]
        others = sum(counts) - counts[best]
        if others:
            notes.append(f"launch order: A's `{k[:80]}` runs between different anchors ({counts[best]} launches a "
                         f"call with B's `{sorted(kernels_b[best])[0][:60]}`, {others} elsewhere); it is placed "
                         f"with the first, so the other unit's A time lacks those launches")
    return keys, notes


def _tables(names, info, uf, method, op_keys, notes, order_of_tiers) -> Alignment:
    order: dict[str, int] = {}
    members: dict[str, list[str]] = {}
    for v in ("a", "b"):
        for n in names[v]:
            root = uf.find(f"{v}:{n}")
            order.setdefault(root, len(order))
            members.setdefault(root, []).append(f"{v}:{n}")
    unit_rows, kernel_rows = [], []
    for root, uid in order.items():
        nodes = members[root]
        tiers = [method[n] for n in nodes]
        weakest = max(tiers, key=order_of_tiers.index)
        ops: list[str] = []
        for n in nodes:
            src = info[n]["source_ops"] if method[n] in ("provenance", "location") else (
                op_keys.get(method[n], {}).get(n, []))
            ops.extend(op for op in src if op not in ops)
        ka = tuple(dict.fromkeys(base_kernel(n[2:])[0] for n in nodes if n[0] == "a"))
        kb = tuple(dict.fromkeys(base_kernel(n[2:])[0] for n in nodes if n[0] == "b"))
        unit_rows.append({"unit": uid, "kernels_a": ka, "kernels_b": kb, "source_ops": tuple(ops),
                          "method": weakest,
                          "flagged": not ka or not kb or weakest in ("shape", "unmatched")})
        for n in nodes:
            kernel, instance = base_kernel(n[2:])
            kernel_rows.append({"variant": n[0], "kernel": kernel, "unit": uid, "method": method[n],
                                **info[n], "instance": instance})
    units = pd.DataFrame(unit_rows, columns=list(UNIT_COLUMNS))
    kernels = pd.DataFrame(kernel_rows, columns=list(KERNEL_COLUMNS))
    return Alignment(units=units, kernels=kernels, notes=notes)
