"""Counterfactual confirmation: hybrids that take one side's decision at one unit only.

A finding "unit u explains the delta" is tested by building a hybrid variant that changes
only u's compiler decision and measuring it interleaved with A and B:

- TVM, fusion: a kernel of one side that covers ops the other side computes in several
  kernels gets dataflow boundaries (spec tvm.dataflow_boundaries_after) at the other side's
  kernel edges, so FuseOps cannot fuse across them there while every other group stays.
- TVM, schedules: a function whose schedule override differs gets the other side's override.
- TVM, passes: when the skip_passes differ in two or more passes, one hybrid per differing
  pass (four or fewer; else the two halves): one level of a bisection over passes.
- IREE, configurations: a dispatch both sides run (shared source ops) whose executable is
  configured differently (lowering_config, translation_info) gets the other side's configuration
  transplanted into its own configured executable (frontends.iree.transplant_configuration) and
  substituted back (spec iree.substitute_configurations): the same graph and executables, one
  executable's codegen decision swapped. Seed 001: dedup's shared prefill_bs2$async_dispatch_0
  configured as alone configures prefill_bs8's, and the mirror.
- IREE, flags: the same one-level bisection over the differing iree.flags.

Recovered share (module doc of evaluate). A hybrid that changes one unit u is judged against
u's own delta, the profiled d_u = t_u(B) - t_u(A) per call: built from A with B's choice at u it
gives (T_h - T_A) / d_u, built from B with A's choice (T_h - T_B) / -d_u; 100% means the whole
graph moved by exactly the unit's delta. The whole-graph share, (T_A - T_h) / (T_A - T_B) from A
or (T_h - T_B) / (T_A - T_B) from B, is kept as a second figure; it is the judged one for
whole-spec hybrids (pass and flag bisection), which change no single unit. T are medians of the
interleaved whole-graph samples, t_u medians over profiled calls of the unit's kernel time. The
interval is a bootstrap: measurement blocks are resampled (each block holds every variant's
samples, so A, B and h stay paired in time) and, for the unit share, A's and B's profiled calls
independently (the unit delta's own spread enters). Verdict: confirmed when the interval's
lower bound is above `threshold` (default 0.5), refuted when its upper bound is below it, else
inconclusive; inconclusive too when the delta it is judged against is not significant.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rootcause.errors import UsageError
from rootcause.model import CatalogKernel
from rootcause.spec import VariantSpec

THRESHOLD = 0.5
MAX_SINGLE_TOGGLES = 4
LEVEL = 0.95


@dataclass
class Hybrid:
    name: str  # the hybrid's variant (bundle) name
    base: str  # 'a' | 'b': whose spec it starts from
    kind: str  # 'dataflow-boundary' | 'schedule-override' | 'passes' | 'flags'
    change: dict[str, Any]  # the spec edit, as data
    description: str  # what the hybrid restores, in words
    source_ops: list[str] = field(default_factory=list)  # the unit's ops ([] for whole-spec edits)
    kernels: list[str] = field(default_factory=list)  # the base side's kernels it changes
    spec: VariantSpec | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in ("name", "base", "kind", "change", "description", "source_ops",
                                           "kernels")}
        d["spec"] = self.spec.to_dict() if self.spec is not None else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Hybrid":
        spec = VariantSpec.from_dict(d["spec"]) if d.get("spec") else None
        return cls(d["name"], d["base"], d["kind"], d["change"], d["description"], list(d.get("source_ops", [])),
                   list(d.get("kernels", [])), spec)


# ---- planning ---------------------------------------------------------------------------

def plan(spec_a: VariantSpec, spec_b: VariantSpec, catalog_a: list[CatalogKernel],
         catalog_b: list[CatalogKernel], limit: int = 4, bundles: dict[str, Path] | None = None,
         work_dir: Path | None = None) -> tuple[list[Hybrid], list[str]]:
    """Hybrids that can be built from the two specs and their catalogs, and notes on what cannot.

    Unit hybrids come first (the larger the kernel's bytes moved, the earlier), then whole-spec
    bisection steps; at most `limit` in all. IREE configuration hybrids need the built bundles
    ({'a': dir, 'b': dir}, for their ir/configured_*.mlir) and a work_dir to write the
    transplanted configurations into."""
    notes: list[str] = []
    if spec_a.frontend != spec_b.frontend:
        return [], [f"A is {spec_a.frontend} and B is {spec_b.frontend}: no hybrid mixes two frontends"]
    specs, cats = {"a": spec_a, "b": spec_b}, {"a": catalog_a, "b": catalog_b}
    found: list[Hybrid] = []
    if spec_a.frontend == "tvm":
        for base in "ab":
            other = "b" if base == "a" else "a"
            found += boundary_hybrids(base, specs[base], cats[base], cats[other])
            found += override_hybrids(base, specs[base], specs[other], cats[base])
        found += pass_hybrids(spec_a, spec_b)
        if spec_a.tvm.opt_level != spec_b.tvm.opt_level:
            notes.append(f"opt_level differs ({spec_a.tvm.opt_level} vs {spec_b.tvm.opt_level}): no hybrid "
                         "isolates one unit's share of an opt_level change")
    else:
        if bundles and work_dir is not None:
            for base in "ab":
                other = "b" if base == "a" else "a"
                found += config_hybrids(base, specs[base], cats[base], cats[other], Path(bundles[base]),
                                        Path(bundles[other]), Path(work_dir), notes)
        else:
            notes.append("no bundles given: IREE configuration hybrids (executable substitution) not planned")
        found += flag_hybrids(spec_a, spec_b)
    if spec_a.source != spec_b.source and not any(h.kind == "configuration" for h in found):
        notes.append(f"the variants compile different sources ({spec_a.source.name} vs {spec_b.source.name}): "
                     "no compiler knob swaps one unit between different graphs")
    unique: list[Hybrid] = []
    keys = {_build_key(spec_a), _build_key(spec_b)}
    for h in found:
        key = _build_key(h.spec)
        if key in keys:
            continue  # the same build as A, B or an earlier hybrid
        keys.add(key)
        unique.append(h)
    if len(unique) > limit:
        notes.append(f"{len(unique) - limit} more hybrid(s) possible; built the first {limit} "
                     f"({', '.join(h.description for h in unique[limit:])} left out)")
    for i, h in enumerate(unique[:limit], start=1):
        h.name = f"{specs[h.base].name}~h{i}-{h.kind}"
        h.spec = dataclasses.replace(h.spec, name=h.name)
    return unique[:limit], notes


def _build_key(spec: VariantSpec) -> str:
    d = spec.to_dict()
    for key in ("name", "spec_file", "variant", "variant_table"):
        d.pop(key, None)
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()


def _op_var(op: str, entry: str) -> str | None:
    """'main/lv16:pool2d' -> 'lv16' (the binding a dataflow boundary names), for the entry function."""
    fn, _, rest = op.partition("/")
    var = rest.partition(":")[0]
    return var if fn == entry and var else None


def boundary_hybrids(base: str, spec: VariantSpec, catalog: list[CatalogKernel],
                     other: list[CatalogKernel]) -> list[Hybrid]:
    """One hybrid per kernel of `base` whose ops the other side splits over several kernels."""
    owner = {op: k.name for k in other for op in k.source_ops}
    function = {op: k.function or k.name for k in other for op in k.source_ops}
    out = []
    for k in sorted(catalog, key=lambda k: -(k.bytes_moved or 0)):
        ops = list(k.source_ops)
        if all(op.rpartition(":")[2] in (k.function, k.name) for op in ops):
            continue  # one function launched once per op (an unfused kernel reused), not a fusion
        cuts = [op for op, nxt in zip(ops, ops[1:])
                if owner.get(op) and owner.get(nxt) and owner[op] != owner[nxt]]
        bindings = [v for v in (_op_var(op, spec.entry) for op in cuts) if v]
        if not bindings:
            continue
        parts = list(dict.fromkeys(function[op] for op in ops if op in function))  # in op order
        where = f"dataflow boundar{'y' if len(bindings) == 1 else 'ies'} after {', '.join(bindings)}"
        boundaries = list(dict.fromkeys(spec.tvm.dataflow_boundaries_after + bindings))
        edited = dataclasses.replace(spec, tvm=dataclasses.replace(spec.tvm, dataflow_boundaries_after=boundaries))
        out.append(Hybrid("", base, "dataflow-boundary", {"dataflow_boundaries_after": bindings},
                          f"splitting {k.function or k.name} back into {' + '.join(parts)} ({where})", ops, [k.name], edited))
    return out


def override_hybrids(base: str, spec: VariantSpec, other: VariantSpec, catalog: list[CatalogKernel]) -> list[Hybrid]:
    """The other side's schedule override for one function that the base side also has."""
    mine, theirs = spec.tvm.schedule_overrides, other.tvm.schedule_overrides
    functions = {k.function: k for k in catalog}
    side = "B" if base == "a" else "A"
    out = []
    for fn in sorted(set(mine) | set(theirs)):
        if mine.get(fn) == theirs.get(fn) or fn not in functions or fn not in theirs:
            continue
        overrides = {**mine, fn: theirs[fn]}
        edited = dataclasses.replace(spec, tvm=dataclasses.replace(spec.tvm, schedule_overrides=overrides))
        out.append(Hybrid("", base, "schedule-override", {"schedule_overrides": {fn: str(theirs[fn])}},
                          f"scheduling {fn} as {side} does ({Path(theirs[fn]).name})",
                          list(functions[fn].source_ops), [functions[fn].name], edited))
    return out


CONFIG_FACTS = ("lowering_config", "pipeline", "workgroup_size", "subgroup_size", "pipeline_options")


def _config_words(k: CatalogKernel) -> str:
    lc = k.schedule.get("lowering_config") or {}
    parts = [f"{key} {lc[key]}" for key in ("workgroup", "subgroup") if key in lc]
    return ", ".join(parts) or f"pipeline {k.schedule.get('pipeline')}"


def config_hybrids(base: str, spec: VariantSpec, catalog: list[CatalogKernel], other: list[CatalogKernel],
                   bundle: Path, other_bundle: Path, work_dir: Path, notes: list[str]) -> list[Hybrid]:
    """Base's executables configured as the other side configures the same dispatch (module doc)."""
    from rootcause.frontends.iree import transplant_configuration

    side = "B" if base == "a" else "A"
    by_op = {op: k for k in other for op in k.source_ops}
    out, done = [], set(spec.iree.substitute_configurations)
    for k in sorted(catalog, key=lambda k: -(k.bytes_moved or 0)):
        exe = k.schedule.get("executable")
        mates = list(dict.fromkeys(by_op[op].name for op in k.source_ops if op in by_op))
        if not exe or exe in done or len(mates) != 1:
            continue  # no counterpart, or several (the other side split the dispatch: not one config)
        mate = next(m for m in other if m.name == mates[0])
        if all(k.schedule.get(f) == mate.schedule.get(f) for f in CONFIG_FACTS):
            continue
        files = (k.schedule.get("config_file"), mate.schedule.get("config_file"))
        if not all(files):
            notes.append(f"{exe}: no configured dump in the bundles, no configuration hybrid")
            continue
        try:
            text = transplant_configuration((bundle / files[0]).read_text(), (other_bundle / files[1]).read_text(),
                                            files[0], files[1])
        except (UsageError, OSError) as err:
            notes.append(f"{exe}: configuration not transplanted: {err}")
            continue
        done.add(exe)
        stem = f"{spec.name}~{exe}~as~{mate.schedule.get('executable') or mate.name}"
        path = work_dir / f"{re.sub(r'[^A-Za-z0-9._~-]+', '_', stem)}.mlir"  # shell-safe: printed in commands
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        subs = {**spec.iree.substitute_configurations, exe: path}
        edited = dataclasses.replace(spec, iree=dataclasses.replace(spec.iree, substitute_configurations=subs))
        shared = [op for op in k.source_ops if op in by_op]
        out.append(Hybrid("", base, "configuration", {"substitute_configurations": {exe: str(path)}},
                          f"configuring {exe} as {side} configures {mate.schedule.get('executable') or mate.name} "
                          f"({_config_words(mate)} instead of {_config_words(k)})", shared, [k.name], edited))
    return out


def _subsets(items: list[Any]) -> list[list[Any]]:
    if len(items) < 2:
        return []  # one differing item: toggling it is B itself
    if len(items) <= MAX_SINGLE_TOGGLES:
        return [[x] for x in items]
    half = len(items) // 2
    return [items[:half], items[half:]]


def pass_hybrids(spec_a: VariantSpec, spec_b: VariantSpec) -> list[Hybrid]:
    """A with B's setting for a subset of the passes whose skipping differs."""
    skip_a, skip_b = spec_a.tvm.skip_passes, spec_b.tvm.skip_passes
    differing = sorted(set(skip_a) ^ set(skip_b))
    out = []
    for subset in _subsets(differing):
        skip = [p for p in skip_a if p not in subset] + [p for p in subset if p in skip_b]
        words = " and ".join(f"{'skipping' if p in skip_b else 'running'} {p}" for p in subset)
        edited = dataclasses.replace(spec_a, tvm=dataclasses.replace(spec_a.tvm, skip_passes=skip))
        out.append(Hybrid("", "a", "passes", {"skip_passes": skip, "toggled": subset},
                          f"{words} as B does", [], [], edited))
    return out


def flag_hybrids(spec_a: VariantSpec, spec_b: VariantSpec) -> list[Hybrid]:
    """A with B's setting for a subset of the iree-compile flags that differ."""
    fa, fb = spec_a.iree.flags, spec_b.iree.flags
    differing = [("remove", f) for f in fa if f not in fb] + [("add", f) for f in fb if f not in fa]
    out = []
    for subset in _subsets(differing):
        removed = {f for op, f in subset if op == "remove"}
        flags = [f for f in fa if f not in removed] + [f for op, f in subset if op == "add"]
        words = " and ".join(f"{'removing' if op == 'remove' else 'adding'} {f}" for op, f in subset)
        edited = dataclasses.replace(spec_a, iree=dataclasses.replace(spec_a.iree, flags=flags))
        out.append(Hybrid("", "a", "flags", {"flags": flags, "toggled": [list(x) for x in subset]},
                          f"{words} as B does", [], [], edited))
    return out


# ---- evaluation -------------------------------------------------------------------------

def _blocks(samples: np.ndarray, repeats: int, blocks: int) -> np.ndarray | None:
    if repeats < 1 or blocks < 2 or samples.size != repeats * blocks:
        return None
    return samples.reshape(blocks, repeats)


def recovered(t_a, t_b, t_h, base: str) -> np.ndarray:
    """Whole-graph share: how much of the A-B delta the hybrid's one decision carries (module doc)."""
    t_a, t_b, t_h = (np.asarray(x, dtype=float) for x in (t_a, t_b, t_h))
    delta = t_a - t_b
    with np.errstate(divide="ignore", invalid="ignore"):
        return (t_a - t_h) / delta if base == "a" else (t_h - t_b) / delta


def recovered_unit(t_a, t_b, t_h, u_a, u_b, base: str) -> np.ndarray:
    """Unit share: the hybrid's whole-graph move over the unit's profiled delta (module doc).
    T in any one unit, u in any one unit (both seconds, or both ns)."""
    t_a, t_b, t_h, u_a, u_b = (np.asarray(x, dtype=float) for x in (t_a, t_b, t_h, u_a, u_b))
    with np.errstate(divide="ignore", invalid="ignore"):
        return (t_h - t_a) / (u_b - u_a) if base == "a" else (t_h - t_b) / (u_a - u_b)


def _boot_whole(samples: dict[str, np.ndarray], repeats: int, blocks: int, n_boot: int,
                rng: np.random.Generator) -> tuple[dict[str, np.ndarray], str]:
    """Bootstrap medians per variant: measurement blocks resampled when every variant has
    repeats x blocks samples in block order (the interleaved protocol's layout), else each
    variant's samples on their own."""
    shaped = {k: _blocks(np.asarray(v, dtype=float), repeats, blocks) for k, v in samples.items()}
    if all(v is not None for v in shaped.values()):
        idx = rng.integers(0, blocks, size=(n_boot, blocks))
        meds = {k: np.median(v[idx].reshape(n_boot, -1), axis=1) for k, v in shaped.items()}
        return meds, f"bootstrap over {blocks} measurement blocks ({repeats} samples per variant each)"
    meds = {}
    for k, v in samples.items():
        v = np.asarray(v, dtype=float)
        meds[k] = np.median(v[rng.integers(0, v.size, size=(n_boot, v.size))], axis=1)
    return meds, "bootstrap of each variant's samples independently"


def _boot_calls(values: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    values = np.asarray(values, dtype=float)
    return np.median(values[rng.integers(0, values.size, size=(n_boot, values.size))], axis=1)


def _percentiles(point: float, boot: np.ndarray) -> tuple[float, float, float]:
    boot = boot[np.isfinite(boot)]
    if boot.size == 0 or not np.isfinite(point):
        return point, float("nan"), float("nan")
    tail = 100 * (1 - LEVEL) / 2
    lo, hi = np.percentile(boot, [tail, 100 - tail])
    return point, float(lo), float(hi)


def recovered_interval(samples: dict[str, np.ndarray], base: str, repeats: int, blocks: int,
                       n_boot: int = 2000, seed: int = 0) -> tuple[float, float, float, str]:
    """Point estimate and bootstrap interval of the whole-graph share; samples keyed 'a', 'b', 'h'."""
    point = float(recovered(np.median(samples["a"]), np.median(samples["b"]), np.median(samples["h"]), base))
    meds, method = _boot_whole(samples, repeats, blocks, n_boot, np.random.default_rng(seed))
    return (*_percentiles(point, recovered(meds["a"], meds["b"], meds["h"], base)), method)


def unit_interval(samples: dict[str, np.ndarray], calls: dict[str, np.ndarray], base: str, repeats: int,
                  blocks: int, n_boot: int = 2000, seed: int = 0) -> tuple[float, float, float, str]:
    """Point estimate and bootstrap interval of the unit share. samples: whole-graph seconds keyed
    'a', 'b', 'h'; calls: the unit's kernel seconds per profiled call of A ('a') and B ('b').
    Each draw pairs a block resample of the measurement with call resamples of A and B."""
    med = {k: float(np.median(v)) for k, v in samples.items()}
    point = float(recovered_unit(med["a"], med["b"], med["h"], np.median(calls["a"]), np.median(calls["b"]), base))
    rng = np.random.default_rng(seed)
    meds, method = _boot_whole(samples, repeats, blocks, n_boot, rng)
    u_a, u_b = _boot_calls(calls["a"], n_boot, rng), _boot_calls(calls["b"], n_boot, rng)
    boot = recovered_unit(meds["a"], meds["b"], meds["h"], u_a, u_b, base)
    method += (f", with A's {len(calls['a'])} and B's {len(calls['b'])} profiled calls resampled "
               "independently for the unit's delta")
    return (*_percentiles(point, boot), method)


def verdict(low: float, high: float, threshold: float = THRESHOLD) -> str:
    if np.isnan(low) or np.isnan(high):
        return "inconclusive"
    if low > threshold:
        return "confirmed"
    if high < threshold:
        return "refuted"
    return "inconclusive"


def _layout(measurement: dict[str, Any]) -> tuple[int, int]:
    """(repeats, blocks) of a measurement: measure.measure_interleaved or run.minimal_measure."""
    if "protocol" in measurement and isinstance(measurement["protocol"], dict):
        return int(measurement["protocol"].get("repeats", 1)), int(measurement.get("blocks_run", 0))
    return 1, int(measurement.get("rounds", 0))


def unit_of(h: Hybrid, units: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The attribution unit a hybrid targets: the one sharing its ops, else its kernels."""
    side = "kernels_a" if h.base == "a" else "kernels_b"
    for u in units:
        if h.source_ops and set(h.source_ops) & set(u.get("source_ops", [])):
            return u
        if h.kernels and set(h.kernels) & set(u.get(side, [])):
            return u
    return None


def unit_call_times(events: pd.DataFrame, kernels: list[str]) -> np.ndarray:
    """Seconds per graph call that `kernels` take in a profile cut into calls (column 'call'),
    the per-call sum attribute medians for a unit; calls without one of them count 0. A profile
    not cut yet is cut as attribute cuts it (profilers.split_calls)."""
    if "call" not in events.columns or (events["call"] < 0).all():
        from rootcause.profilers import split_calls

        events = split_calls(events)
    calls = np.unique(events["call"].to_numpy())
    calls = calls[calls >= 0]
    mine = events[events["kernel"].isin(kernels) & (events["call"] >= 0)]
    per_call = mine.groupby("call")["duration_ns"].sum().reindex(calls, fill_value=0)
    return per_call.to_numpy(dtype=float) / 1e9


def _times(x: float) -> str:
    """'4.9x' / '1.13x': ratio to the digits a reader needs."""
    return f"{x:.0f}x" if x >= 10 else f"{x:.1f}x" if x >= 2 else f"{x:.2f}x"


def _faster(t_h: float, t: float, side: str) -> str:
    if t_h <= 0 or t <= 0:
        return f"n/a against {side}"
    return f"{_times(t / t_h)} faster than {side}" if t_h < t else f"{_times(t_h / t)} slower than {side}"


def _share(point: float, lo: float, hi: float) -> str:
    return f"{point:.0%} [{lo:.0%}, {hi:.0%}]"


def evaluate(measurement: dict[str, Any], name_a: str, name_b: str, hybrids: list[Hybrid],
             units: list[dict[str, Any]] | None = None, threshold: float = THRESHOLD,
             delta_significant: bool | None = None, failed: dict[str, str] | None = None,
             n_boot: int = 2000, seed: int = 0,
             unit_calls: dict[int, dict[str, np.ndarray]] | None = None) -> dict[str, Any]:
    """Per hybrid: T_A, T_B, T_h, the judged share (of its unit's delta, else of the A-B delta)
    with interval and verdict, the whole-graph share beside it, and a sentence.

    unit_calls: per unit id, that unit's kernel seconds per profiled call of A and B ('a', 'b')
    (unit_call_times); without them a unit hybrid is judged on the whole-graph share."""
    variants = measurement["variants"]
    repeats, blocks = _layout(measurement)
    failed, unit_calls = failed or {}, unit_calls or {}
    rows = []
    for h in hybrids:
        u = unit_of(h, units or []) if (h.source_ops or h.kernels) else None
        row: dict[str, Any] = {"name": h.name, "kind": h.kind, "base": h.base, "description": h.description,
                               "change": h.change, "unit": u["unit"] if u else None,
                               "unit_significant": bool(u["significant"]) if u else None}
        if h.name in failed or h.name not in variants:
            why = failed.get(h.name, "not measured (no samples in the measurement)")
            rows.append({**row, "verdict": "not measured", "error": why,
                         "sentence": f"{h.description}: not measured: {why}."})
            continue
        rows.append({**row, **_judge(h, u, variants, name_a, name_b, repeats, blocks, threshold,
                                     delta_significant, unit_calls, n_boot, seed)})
    return {"threshold": threshold,
            "rule": f"confirmed when the {LEVEL:.0%} interval of the recovered share lies above {threshold:.0%}, "
                    "refuted when below; a hybrid that changes one unit is judged against that unit's delta, "
                    "a whole-spec hybrid against the A-B delta",
            "formula": "unit share, base A: (T_h - T_A) / (t_u(B) - t_u(A)); base B: (T_h - T_B) / (t_u(A) - "
                       "t_u(B)); whole-graph share, base A: (T_A - T_h) / (T_A - T_B); base B: (T_h - T_B) / "
                       "(T_A - T_B); T = median whole-graph seconds per call, t_u = median profiled seconds "
                       "per call of the unit's kernels",
            "hybrids": rows}


def _judge(h: Hybrid, u: dict[str, Any] | None, variants: dict[str, Any], name_a: str, name_b: str,
           repeats: int, blocks: int, threshold: float, delta_significant: bool | None,
           unit_calls: dict[int, dict[str, np.ndarray]], n_boot: int, seed: int) -> dict[str, Any]:
    samples = {k: np.asarray(variants[n]["samples_s"], dtype=float)
               for k, n in (("a", name_a), ("b", name_b), ("h", h.name))}
    med = {k: float(np.median(v)) for k, v in samples.items()}
    graph = recovered_interval(samples, h.base, repeats, blocks, n_boot, seed)
    d_graph = abs(med["a"] - med["b"]) * 1e6
    graph_text = _share(*graph[:3])
    base_label = name_a if h.base == "a" else name_b
    head = (f"{h.description} takes {base_label} from {med[h.base] * 1e6:.1f} to {med['h'] * 1e6:.1f} us: "
            f"it recovers ")
    speed = f"makes the graph {_faster(med['h'], med['a'], 'A')} and {_faster(med['h'], med['b'], 'B')}"
    out: dict[str, Any] = {"median_s": med,
                           "recovered_graph": {"median": graph[0], "low": graph[1], "high": graph[2],
                                               "level": LEVEL, "method": graph[3]},
                           "speedup": {"vs_a": med["a"] / med["h"] if med["h"] else None,
                                       "vs_b": med["b"] / med["h"] if med["h"] else None}}
    calls = unit_calls.get(u["unit"]) if u else None
    if calls is not None and len(calls["a"]) and len(calls["b"]):
        unit = unit_interval(samples, calls, h.base, repeats, blocks, n_boot, seed)
        d_unit = float(np.median(calls["b"]) - np.median(calls["a"]))
        judged, against = unit, "unit"
        verdict_ = verdict(unit[1], unit[2], threshold)
        why = None if u["significant"] else "the unit's own delta is not significant"
        text = (f"{head}{_share(*unit[:3])} of the unit's {abs(d_unit) * 1e6:.1f} us and {speed}")
        out["unit_delta_s"] = d_unit
        out["recovered_unit"] = {"median": unit[0], "low": unit[1], "high": unit[2], "level": LEVEL,
                                 "method": unit[3]}
    else:
        judged, against = graph, "graph"
        verdict_ = verdict(graph[1], graph[2], threshold)
        why = "the whole-graph delta itself is not significant" if delta_significant is False else None
        text = f"{head}{graph_text} of the {d_graph:.1f} us A-B delta and {speed}"
        if u is not None:
            text += f" (unit {u['unit']}: no profiled per-call times of it, so judged on the A-B delta)"
    if why:
        verdict_ = "inconclusive"
    text += f": {verdict_}"
    if why:
        text += f" ({why})"
    if against == "unit":
        text += f"; whole-graph share {graph_text} of the {d_graph:.1f} us A-B delta"
    out.update({"recovered": {"median": judged[0], "low": judged[1], "high": judged[2], "level": LEVEL,
                              "method": judged[3], "of": against},
                "verdict": verdict_, "sentence": text + "."})
    return out
