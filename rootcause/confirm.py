"""Counterfactual confirmation: hybrids that take one side's decision at one unit only.

A finding "unit u explains the delta" is tested by building a hybrid variant that changes
only u's compiler decision and measuring it interleaved with A and B:

- TVM, fusion: a kernel of one side that covers ops the other side computes in several
  kernels gets dataflow boundaries (spec tvm.dataflow_boundaries_after) at the other side's
  kernel edges, so FuseOps cannot fuse across them there while every other group stays.
- TVM, schedules: a function whose schedule override differs gets the other side's override.
- TVM, passes: when the skip_passes differ in two or more passes, one hybrid per differing
  pass (four or fewer; else the two halves): one level of a bisection over passes.
- IREE, flags: the same one-level bisection over the differing iree.flags.

Recovered share (module doc of evaluate): a hybrid built from A with B's choice at u gives
(T_A - T_h) / (T_A - T_B); one built from B with A's choice gives (T_h - T_B) / (T_A - T_B).
Both read "how much of the A-B delta this one decision carries". T are medians of the
interleaved whole-graph samples; the interval is a bootstrap over measurement blocks (each
block holds every variant's samples, so resampling blocks keeps A, B and h paired in time).
Verdict: confirmed when the interval's lower bound is above `threshold` (default 0.5),
refuted when its upper bound is below it, else inconclusive.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

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
         catalog_b: list[CatalogKernel], limit: int = 4) -> tuple[list[Hybrid], list[str]]:
    """Hybrids that can be built from the two specs and their catalogs, and notes on what cannot.

    Unit hybrids come first (the larger the kernel's bytes moved, the earlier), then whole-spec
    bisection steps; at most `limit` in all."""
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
        found += flag_hybrids(spec_a, spec_b)
        notes.append("IREE executable substitution (--iree-hal-substitute-executable-configuration) is not "
                     "planned yet: hybrids for IREE come from flag bisection only")
    if spec_a.source != spec_b.source:
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
        parts = sorted({owner[op] for op in ops if op in owner})
        side = "B" if base == "a" else "A"
        boundaries = list(dict.fromkeys(spec.tvm.dataflow_boundaries_after + bindings))
        edited = dataclasses.replace(spec, tvm=dataclasses.replace(spec.tvm, dataflow_boundaries_after=boundaries))
        out.append(Hybrid("", base, "dataflow-boundary", {"dataflow_boundaries_after": bindings},
                          f"{k.name} split as {side} computes it ({' + '.join(parts)}): dataflow boundary "
                          f"after {', '.join(bindings)}", ops, [k.name], edited))
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
                          f"{fn} scheduled as in {side} ({Path(theirs[fn]).name})",
                          list(functions[fn].source_ops), [functions[fn].name], edited))
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
        words = ", ".join(f"{'skip' if p in skip_b else 'run'} {p}" for p in subset)
        edited = dataclasses.replace(spec_a, tvm=dataclasses.replace(spec_a.tvm, skip_passes=skip))
        out.append(Hybrid("", "a", "passes", {"skip_passes": skip, "toggled": subset},
                          f"A with B's pass setting for {', '.join(subset)} ({words})", [], [], edited))
    return out


def flag_hybrids(spec_a: VariantSpec, spec_b: VariantSpec) -> list[Hybrid]:
    """A with B's setting for a subset of the iree-compile flags that differ."""
    fa, fb = spec_a.iree.flags, spec_b.iree.flags
    differing = [("remove", f) for f in fa if f not in fb] + [("add", f) for f in fb if f not in fa]
    out = []
    for subset in _subsets(differing):
        removed = {f for op, f in subset if op == "remove"}
        flags = [f for f in fa if f not in removed] + [f for op, f in subset if op == "add"]
        words = ", ".join(f"{op} {f}" for op, f in subset)
        edited = dataclasses.replace(spec_a, iree=dataclasses.replace(spec_a.iree, flags=flags))
        out.append(Hybrid("", "a", "flags", {"flags": flags, "toggled": [list(x) for x in subset]},
                          f"A with B's flags for: {words}", [], [], edited))
    return out


# ---- evaluation -------------------------------------------------------------------------

def _blocks(samples: np.ndarray, repeats: int, blocks: int) -> np.ndarray | None:
    if repeats < 1 or blocks < 2 or samples.size != repeats * blocks:
        return None
    return samples.reshape(blocks, repeats)


def recovered(t_a, t_b, t_h, base: str) -> np.ndarray:
    """Share of the A-B delta the hybrid's one decision carries (module doc)."""
    t_a, t_b, t_h = (np.asarray(x, dtype=float) for x in (t_a, t_b, t_h))
    delta = t_a - t_b
    with np.errstate(divide="ignore", invalid="ignore"):
        return (t_a - t_h) / delta if base == "a" else (t_h - t_b) / delta


def recovered_interval(samples: dict[str, np.ndarray], base: str, repeats: int, blocks: int,
                       n_boot: int = 2000, seed: int = 0) -> tuple[float, float, float, str]:
    """Point estimate and bootstrap interval of `recovered`; samples keyed 'a', 'b', 'h'.

    Blocks are resampled when every variant has repeats x blocks samples in block order (the
    interleaved protocol's layout), else each variant's samples are resampled on their own."""
    point = float(recovered(np.median(samples["a"]), np.median(samples["b"]), np.median(samples["h"]), base))
    rng = np.random.default_rng(seed)
    shaped = {k: _blocks(np.asarray(v, dtype=float), repeats, blocks) for k, v in samples.items()}
    if all(v is not None for v in shaped.values()):
        idx = rng.integers(0, blocks, size=(n_boot, blocks))
        meds = {k: np.median(v[idx].reshape(n_boot, -1), axis=1) for k, v in shaped.items()}
        method = f"bootstrap over {blocks} measurement blocks ({repeats} samples per variant each)"
    else:
        meds = {}
        for k, v in samples.items():
            v = np.asarray(v, dtype=float)
            meds[k] = np.median(v[rng.integers(0, v.size, size=(n_boot, v.size))], axis=1)
        method = "bootstrap of each variant's samples independently"
    boot = recovered(meds["a"], meds["b"], meds["h"], base)
    boot = boot[np.isfinite(boot)]
    if boot.size == 0:
        return point, float("nan"), float("nan"), method
    tail = 100 * (1 - LEVEL) / 2
    lo, hi = np.percentile(boot, [tail, 100 - tail])
    return point, float(lo), float(hi), method


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


def evaluate(measurement: dict[str, Any], name_a: str, name_b: str, hybrids: list[Hybrid],
             units: list[dict[str, Any]] | None = None, threshold: float = THRESHOLD,
             delta_significant: bool | None = None, failed: dict[str, str] | None = None,
             n_boot: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Per hybrid: T_A, T_B, T_h, recovered share with interval, verdict and a sentence."""
    variants = measurement["variants"]
    repeats, blocks = _layout(measurement)
    failed = failed or {}
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
        samples = {"a": variants[name_a]["samples_s"], "b": variants[name_b]["samples_s"],
                   "h": variants[h.name]["samples_s"]}
        point, lo, hi, method = recovered_interval({k: np.asarray(v) for k, v in samples.items()}, h.base,
                                                   repeats, blocks, n_boot, seed)
        verdict_ = verdict(lo, hi, threshold)
        if delta_significant is False:
            verdict_ = "inconclusive"
        medians = {k: float(np.median(v)) for k, v in samples.items()}
        text = (f"{h.description}: recovers {point:.0%} [{lo:.0%}, {hi:.0%}] of the A-B delta "
                f"({medians['h'] * 1e6:.1f} us vs A {medians['a'] * 1e6:.1f} us, B {medians['b'] * 1e6:.1f} us): "
                f"{verdict_}")
        if delta_significant is False:
            text += " (the whole-graph delta itself is not significant)"
        rows.append({**row, "median_s": medians, "recovered": {"median": point, "low": lo, "high": hi,
                                                                 "level": LEVEL, "method": method},
                     "verdict": verdict_, "sentence": text + "."})
    return {"threshold": threshold, "rule": f"confirmed when the {LEVEL:.0%} interval of the recovered share "
                                           f"lies above {threshold:.0%}, refuted when below",
            "formula": "base A: (T_A - T_h) / (T_A - T_B); base B: (T_h - T_B) / (T_A - T_B); T = median "
                       "whole-graph seconds per call",
            "hybrids": rows}
