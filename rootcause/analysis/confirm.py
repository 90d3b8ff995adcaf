"""Counterfactual confirmation: judging hybrids that take one side's decision at one unit only.

A finding "unit u explains the delta" is tested by building a hybrid variant that changes
only u's compiler decision and measuring it interleaved with A and B. Each frontend plans its
own kinds (its `plan_hybrids`; rootcause.pipeline.plan_hybrids keeps the distinct ones); this
module only judges them:

- TVM, fusion: a kernel of one side that covers ops the other side computes in several
  kernels gets dataflow boundaries (spec tvm.dataflow_boundaries_after) at the other side's
  kernel edges, so FuseOps cannot fuse across them there while every other group stays.
- TVM, schedules: a function whose schedule override differs gets the other side's override.
- TVM, passes: when the skip_passes differ in two or more passes, one hybrid per differing
  pass (four or fewer; else the two halves): one level of a bisection over passes.
- IREE, configurations: a dispatch both sides run (shared source ops) whose executable is
  configured differently (lowering_config, translation_info) gets the other side's configuration
  transplanted into its own configured executable and substituted back (spec
  iree.substitute_configurations): the same graph and executables, one executable's codegen
  decision swapped (e.g. a deduplicated executable configured as the build that does not share
  it configures its own).
- IREE, executables: where the two sides' executables for that dispatch differ in their bodies
  too (a deduplicated executable specialized for another call's value ranges), the other side's
  whole configured executable, renamed, substituted for base's: judged beside the configuration
  hybrid, it tells a configuration's share from the body's.
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
inconclusive; inconclusive too when the delta it is judged against is not significant, or when a
unit's share is surely above OVERSHOOT while the whole-graph share is surely above GRAPH_OVERSHOOT
(the swap moved the graph past the other side: 438% of a unit is then no confirmation).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from rootcause.model import Hybrid
from rootcause.stats import CONFIRM_THRESHOLD, LEVEL, bootstrap_medians, percentile_interval
# A hybrid judged on one unit whose recovered share is surely above OVERSHOOT, and whose whole-graph
# share is surely above GRAPH_OVERSHOOT, moved the graph past the other side: it changed more than
# that unit. (Above OVERSHOOT alone is no sign: a launch-bound unit's kernels hold a fifth of what
# its launches cost, and a hybrid that recovers 100% of the whole delta recovers 500% of them.)
OVERSHOOT = 2.0
GRAPH_OVERSHOOT = 1.25


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
        meds[k] = bootstrap_medians(v, n_boot, rng)
    return meds, "bootstrap of each variant's samples independently"


def _percentiles(point: float, boot: np.ndarray) -> tuple[float, float, float]:
    boot = boot[np.isfinite(boot)]
    if boot.size == 0 or not np.isfinite(point):
        return point, float("nan"), float("nan")
    lo, hi = percentile_interval(boot)
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
    u_a, u_b = bootstrap_medians(calls["a"], n_boot, rng), bootstrap_medians(calls["b"], n_boot, rng)
    boot = recovered_unit(meds["a"], meds["b"], meds["h"], u_a, u_b, base)
    method += (f", with A's {len(calls['a'])} and B's {len(calls['b'])} profiled calls resampled "
               "independently for the unit's delta")
    return (*_percentiles(point, boot), method)


def verdict(low: float, high: float, threshold: float = CONFIRM_THRESHOLD) -> str:
    if np.isnan(low) or np.isnan(high):
        return "inconclusive"
    if low > threshold:
        return "confirmed"
    if high < threshold:
        return "refuted"
    return "inconclusive"


def _layout(measurement: dict[str, Any]) -> tuple[int, int]:
    """(repeats, blocks) of a measurement: measure.measure_interleaved's layout."""
    if "protocol" in measurement and isinstance(measurement["protocol"], dict):
        return int(measurement["protocol"].get("repeats", 1)), int(measurement.get("blocks_run", 0))
    return 1, int(measurement.get("rounds", 0))


def unit_of(h: Hybrid, units: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The attribution unit a hybrid targets: the one sharing its ops, else its kernels. A hybrid
    that changes kernels of several units targets none: it is judged on the whole graph."""
    side = "kernels_a" if h.base == "a" else "kernels_b"
    hit = [u for u in units if (h.source_ops and set(h.source_ops) & set(u.get("source_ops", [])))
           or (h.kernels and set(h.kernels) & set(u.get(side, [])))]
    return hit[0] if len(hit) == 1 else None


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
             units: list[dict[str, Any]] | None = None, threshold: float = CONFIRM_THRESHOLD,
             delta_significant: bool | None = None, failed: dict[str, str] | None = None,
             n_boot: int = 2000, seed: int = 0,
             unit_calls: dict[int, dict[str, np.ndarray]] | None = None) -> dict[str, Any]:
    """Per hybrid: T_A, T_B, T_h, the judged share (of its unit's delta, else of the A-B delta)
    with interval and verdict, the whole-graph share beside it, and a sentence.

    unit_calls: per unit id, that unit's kernel seconds per profiled call of A and B ('a', 'b')
    (attribute's Attribution.unit_calls_ns, per launch); without them a unit hybrid is judged on the whole-graph share."""
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
            why = failed.get(h.name, "the run has no samples of it (it was not among the bundles run)")
            rows.append({**row, "verdict": "not measured", "error": why,
                         "sentence": f"{h.description}: not measured: {why}."})
            continue
        rows.append({**row, **_judge(h, u, variants, name_a, name_b, repeats, blocks, threshold,
                                     delta_significant, unit_calls, n_boot, seed)})
    _body_against_configuration(rows)
    return {"threshold": threshold,
            "rule": f"confirmed when the {LEVEL:.0%} interval of the recovered share lies above {threshold:.0%}, "
                    "refuted when below; a hybrid that changes one unit is judged against that unit's delta, "
                    "a whole-spec hybrid against the A-B delta",
            "formula": "unit share, base A: (T_h - T_A) / (t_u(B) - t_u(A)); base B: (T_h - T_B) / (t_u(A) - "
                       "t_u(B)); whole-graph share, base A: (T_A - T_h) / (T_A - T_B); base B: (T_h - T_B) / "
                       "(T_A - T_B); T = median whole-graph seconds per call, t_u = median profiled seconds "
                       "per call of the unit's kernels",
            "hybrids": rows}


def _body_against_configuration(rows: list[dict[str, Any]]) -> None:
    """An executable hybrid (the other side's whole executable) beside the configuration hybrid of
    the same executable and base: when the whole executable is confirmed and its configuration
    alone is not, the rest lies in the executable's body (its tiles, its value-range assumptions),
    and the executable's row says so with the configuration's figure."""
    def exe(r):
        return r["base"], tuple(sorted((r.get("change") or {}).get("substitute_configurations", {})))

    configs = {exe(r): r for r in rows if r["kind"] == "configuration" and "recovered" in r}
    for r in rows:
        c = configs.get(exe(r)) if r["kind"] == "executable" and "recovered" in r else None
        if c is None or c["verdict"] == r["verdict"] or r["verdict"] != "confirmed":
            continue
        rec = c["recovered"]
        r["body_not_configuration"] = True
        r["sentence"] = (r["sentence"].rstrip(".") + f"; its configuration alone recovers "
                         f"{_share(rec['median'], rec['low'], rec['high'])} ({c['verdict']}), so the rest of the "
                         "unit's delta is in the executable's body, not in its configuration.")


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
        if why is None and unit[1] > OVERSHOOT and graph[1] > GRAPH_OVERSHOOT:
            why = (f"it moves the graph by more than {OVERSHOOT:.0%} of the unit's delta and more than the whole A-B "
                   "delta, so the swap changes more than this unit")
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
    no_delta = why is not None and why.endswith("not significant")
    if no_delta:  # a share of a delta that is not established is no figure: the time alone is said
        text = f"{head.removesuffix(': it recovers ')} and {speed}"
    text += f": {verdict_}"
    if why:
        text += f" ({why})"
    if against == "unit" and not no_delta:
        text += f"; whole-graph share {graph_text} of the {d_graph:.1f} us A-B delta"
    out.update({"recovered": {"median": judged[0], "low": judged[1], "high": judged[2], "level": LEVEL,
                              "method": judged[3], "of": against, "shown": not no_delta},
                "verdict": verdict_, "sentence": text + "."})
    return out
