"""Align the kernels of two variants into units that compute the same source ops.

A unit is a set of kernels of A and a set of kernels of B; fusion makes it many-to-many
(A's `fused_pool2d_add2_kernel` against B's `pool2d_kernel` + `add2_kernel`). Kernels are
joined by union-find over the bipartite graph kernel_A -- source op -- kernel_B, tier by
tier, strongest evidence first. A kernel already in a unit that has both sides is settled;
the rest go on to the next tier (rootcause/analysis/tiers.py: what each joins, in which order).

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

from dataclasses import dataclass, field
from typing import Callable

import pandas as pd

from rootcause import frontends
from rootcause.analysis.tiers import Matching, UnionFind, ordered_tiers
from rootcause.errors import UsageError
from rootcause.model import CatalogKernel, strip_kernel
from rootcause.profilers import split_calls

# One row per unit.
UNIT_COLUMNS: dict[str, str] = {
    "unit": "unit id (int), 0..n-1 in order of first appearance",
    "kernels_a": "tuple of kernel names of variant A in this unit (may be empty)",
    "kernels_b": "tuple of kernel names of variant B in this unit (may be empty)",
    "source_ops": "tuple of source-op ids (provenance) or op names (fused-name) covered",
    "method": "weakest tier that joined the unit (tiers.TIERS): provenance, location, name, normalized-name, cpu-op, "
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


def _kernel_names(events: pd.DataFrame) -> list[str]:
    return [str(k) for k in pd.unique(events["kernel"].to_numpy())]  # first-seen order


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
              catalog_b: list[CatalogKernel] | None, entry_a: str | None, entry_b: str | None) -> Matching:
    """Every launched kernel a node with its catalog facts, split per op, per call site or per
    module-tree position where a kernel serves several (module doc)."""
    events = {"a": events_a, "b": events_b}
    names = {v: _kernel_names(events[v]) for v in "ab"}
    catalogs = {"a": catalog_index(catalog_a), "b": catalog_index(catalog_b)}
    entries = {"a": entry_a, "b": entry_b}
    normalize = op_normalizer()
    info: dict[str, dict] = {}
    launches: dict[str, dict[str, set[int]]] = {}  # each side's launches per graph call, for the per-launch splits
    uf = UnionFind()
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
    m = Matching(names, info, events, uf=uf)
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
