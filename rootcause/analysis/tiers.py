"""The tiers of the alignment (rootcause/analysis/align.py), strongest evidence first. Each joins
kernels of A and B not yet in a unit that has both sides; align runs ordered_tiers, one list:
the generic tiers here, with the frontends' own name tiers (rootcause.model.AlignmentTier, each
frontend's alignment_tiers) after module-path, in registry order.

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
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

import pandas as pd

from rootcause import frontends
from rootcause.exporters import pattern
from rootcause.model import AlignmentTier


# The generic tiers, strongest first (GENERIC_TIERS runs them); the frontends' name tiers run
# after module-path (ordered_tiers).
TIERS = ("provenance", "location", "op-tree", "name", "normalized-name", "cpu-op", "module-path", "shape",
         "launch-order", "remainder", "absorbed", "unmatched")


NAME_TIERS_AFTER = "module-path"


class UnionFind:
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


def frontend_tiers() -> list[AlignmentTier]:
    """The frontends' own name tiers, in registry order."""
    return [tier for hook in frontends.hooks("alignment_tiers") for tier in hook()]


def tiers(name_tiers: list[AlignmentTier] | None = None) -> tuple[str, ...]:
    """Every tier's name in the order they run, weakest last."""
    return tuple(t.name for t in ordered_tiers(name_tiers))


CPU_OP_KERNELS = 4  # distinct kernels one CPU op may launch on a side and still make one unit


_NUMBER = re.compile(r"\d+")


_HASH = re.compile(r"\b[0-9a-f]{8,}\b")


def normalized_name(name: str) -> str:
    """A kernel name with hashes and numbers made anonymous: template arguments ('<4, ...>' vs
    '<8, ...>') and renumbered suffixes ('triton_poi_fused_add_15' vs '_23') compare equal."""
    return _NUMBER.sub("#", _HASH.sub("#", name))


def _cpu_ops(events: pd.DataFrame) -> dict[str, str]:
    """kernel -> the CPU op that launched most of its rows (where the trace records it); of ops
    that launched it equally often, the first to."""
    if "cpu_op" not in events.columns:
        return {}
    known = events[["kernel", "cpu_op"]].dropna()
    if known.empty:
        return {}
    counts = known.groupby(["kernel", "cpu_op"], sort=False, observed=True).size().reset_index(name="n")
    top = counts.sort_values("n", ascending=False, kind="stable").drop_duplicates("kernel")
    return {str(k): str(v) for k, v in zip(top["kernel"], top["cpu_op"])}


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


@dataclass
class Matching:
    """What the tiers share while they join kernels: every node's catalog facts, the union-find of
    units, the tier that placed each node, and the notes. A tier reads what it needs and joins
    nodes through link_through."""

    names: dict[str, list[str]]
    info: dict[str, dict]
    events: dict[str, pd.DataFrame]
    across: bool = False  # two producers: the catalogs share no source op
    tree_keys: dict[str, list[str]] = field(default_factory=dict)
    uf: UnionFind = field(default_factory=lambda: UnionFind())
    method: dict[str, str] = field(default_factory=dict)
    op_keys: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # tier -> node -> its op keys
    notes: list[str] = field(default_factory=list)

    def pending(self) -> dict[str, list[str]]:
        """Kernels not yet in a unit that has both sides."""
        roots = {node: self.uf.find(node) for node in self.info}
        sides: dict[str, set[str]] = {}
        for node, root in roots.items():
            sides.setdefault(root, set()).add(node[0])
        return {v: [n for n in self.names[v] if sides[roots[f"{v}:{n}"]] != {"a", "b"}] for v in ("a", "b")}

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
class Tier:
    """One way of joining kernels (module doc): run(matching) links what it finds."""

    name: str
    run: Callable[[Matching], None]


def _provenance(m: Matching) -> None:
    m.link_through({node: list(i["source_ops"]) for node, i in m.info.items() if i["source_ops"]}, "provenance")


def _location(m: Matching) -> None:
    """Kernels (of any tier so far) that compute part of one input op join, many to many."""
    m.link_through({node: list(i["source_locs"]) for node, i in m.info.items() if i["source_locs"]}, "location")


def _op_tree(m: Matching) -> None:
    if m.tree_keys:
        m.link_through(m.tree_keys, "op-tree")
        m.op_keys["op-tree"] = m.tree_keys


def _name(m: Matching) -> None:
    left = m.pending()
    m.link_through({f"{v}:{n}": [n] for v in "ab" for n in left[v]}, "name")


def _normalized_name(m: Matching) -> None:
    """Names that differ only in numbers or hashes, the key unique on each side."""
    left, keys = m.pending(), {}
    for v in "ab":
        counts = pd.Series([normalized_name(n) for n in left[v]], dtype=object).value_counts()
        for n in left[v]:
            if counts.get(normalized_name(n)) == 1:
                keys[f"{v}:{n}"] = [normalized_name(n)]
    m.link_through(keys, "normalized-name")


def _cpu_op(m: Matching) -> None:
    """The CPU op that launched a few distinct kernels still unmatched on each side."""
    left, keys = m.pending(), {}
    for v in "ab":
        ops = _cpu_ops(m.events[v])
        mine = {n: ops.get(n) for n in left[v] if ops.get(n)}
        counts = pd.Series(list(mine.values()), dtype=object).value_counts()
        keys.update({f"{v}:{n}": [op] for n, op in mine.items() if counts.get(op) <= CPU_OP_KERNELS})
    m.link_through(keys, "cpu-op")


def _module_path(m: Matching) -> None:
    if m.across:
        left = m.pending()
        m.link_through(_module_keys([f"{v}:{n}" for v in "ab" for n in left[v]], m.info), "module-path")


def _shape(m: Matching) -> None:
    """Launch work size, unique among the still-unmatched of each side."""
    left, keys = m.pending(), {}
    for v in "ab":
        work = _work_sizes(m.events[v])
        sizes = pd.Series({n: work.get(n) for n in left[v]}, dtype="object").dropna()
        for n, size in sizes[~sizes.duplicated(keep=False)].items():
            keys[f"{v}:{n}"] = [str(size)]
    m.link_through(_same_bytes(keys, m.info), "shape")


def _launch_order(m: Matching) -> None:
    left = m.pending()
    if left["a"] and left["b"]:
        keys, order_notes = _between_anchors(m.events["a"], m.events["b"], {v: set(left[v]) for v in "ab"}, m.uf)
        m.link_through(keys, "launch-order")
        m.notes.extend(order_notes)


def _remainder(m: Matching) -> None:
    left = m.pending()
    if left["a"] and left["b"]:
        m.link_through({f"{v}:{n}": ["rest"] for v in "ab" for n in left[v]}, "remainder")
        m.notes.append(f"{len(left['a'])} kernel(s) of A and {len(left['b'])} of B matched no tier and "
                       f"were joined as the remainder of the same entry function (by elimination): "
                       f"{', '.join(left['a'][:3])} against {', '.join(left['b'][:3])}")


def _absorbed_tier(m: Matching) -> None:
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


def _unmatched(m: Matching) -> None:
    m.place(list(m.info), "unmatched")


GENERIC_TIERS = (Tier("provenance", _provenance), Tier("location", _location), Tier("op-tree", _op_tree),
                 Tier("name", _name), Tier("normalized-name", _normalized_name), Tier("cpu-op", _cpu_op),
                 Tier("module-path", _module_path), Tier("shape", _shape), Tier("launch-order", _launch_order),
                 Tier("remainder", _remainder), Tier("absorbed", _absorbed_tier), Tier("unmatched", _unmatched))


def _frontend_tier(tier: AlignmentTier) -> Tier:
    def run(m: Matching) -> None:
        keys, active = tier.keys(m.names, m.pending(), m.info)
        m.link_through(keys, tier.name, active)
        if tier.keys_are_ops:
            m.op_keys[tier.name] = keys
    return Tier(tier.name, run)


def ordered_tiers(name_tiers: list[AlignmentTier] | None = None) -> list[Tier]:
    """Every tier in the order align runs them: the generic ones, with the frontends' name tiers
    (registry order) after NAME_TIERS_AFTER."""
    name_tiers = frontend_tiers() if name_tiers is None else name_tiers
    at = TIERS.index(NAME_TIERS_AFTER) + 1
    return [*GENERIC_TIERS[:at], *map(_frontend_tier, name_tiers), *GENERIC_TIERS[at:]]


def _module_keys(nodes: list[str], info: dict[str, dict]) -> dict[str, list[str]]:
    """The module-path tier's keys: every module path a kernel computes in (a fused kernel joins
    the modules it spans: the thread's producers fused into the einsum), except where joining by
    all of them would chain instances of one repeated module into one unit (a residual add fused
    with the next block's norm, block after block): there each kernel keeps its first path only."""
    full = {node: list(info[node]["module_paths"]) for node in nodes if info[node]["module_paths"]}
    chains = UnionFind()
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


def _absorbed(v: str, free: list[str], events: dict[str, pd.DataFrame], uf: UnionFind,
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
                     uf: UnionFind) -> tuple[dict[str, list[str]], list[str]]:
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
    by_b = UnionFind()
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
