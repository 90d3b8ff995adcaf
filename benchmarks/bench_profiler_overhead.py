"""Profiler overhead: whole-graph latency with CUPTI kernel activity tracing on vs off.

    python benchmarks/bench_profiler_overhead.py BUNDLE... [--label pool_fusion] [--budget-s 20]

The bundles of one case are loaded in this one process with the same inputs. Then:
1. pristine: each variant timed by rootcause.measure's protocol before CUPTI is ever enabled
   (this also calibrates the calls per sample, as `rootcause run` does);
2. interleaved: one protocol run whose arms are VARIANT/untraced and VARIANT/cupti. The
   cupti arm enables CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL before its samples, the untraced
   arm flushes and disables it; the switch happens between samples, outside any timer. Arm
   order rotates block by block, so neither arm always follows the other.
Overhead = median(cupti) / median(untraced) - 1 with the protocol's bootstrap interval of
the ratio. Goal: at most 5%. `after_disable` compares the untraced arm with the pristine run
(sequential, not interleaved): what CUPTI leaves behind once disabled.
Evidence that tracing happened: kernel records per traced call (and their names), counted in
CUPTI's buffer callback.

Without CUPTI (no cupti-python, or a CPU device: llvm bundles) the second run times
VARIANT/untraced against VARIANT/untraced_again: the protocol's A/A noise floor. The output says
CUPTI is unavailable and why, and reports no overhead. Prints a table; writes
$OUT/profiler_overhead_<label>.json when OUT is set (or --json FILE).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from rootcause import host_state
from rootcause.errors import UsageError
from rootcause.fileio import write_json
from rootcause.measure import Protocol, measure, measure_interleaved
from rootcause.artifacts.bundle import read_bundle
from rootcause.sessions import load_session
from rootcause.verify import common_inputs

GOAL_PCT = 5.0
KERNEL_KINDS = (3, 10)  # CUPTI_ACTIVITY_KIND_KERNEL, CONCURRENT_KERNEL


# ---- shared with bench_measure_efficiency.py ---------------------------------------------

def load_case(paths: list[str], device: str | None) -> tuple[list, dict[str, Any]]:
    """Sessions of the bundles, inputs set (the same arrays for all), and load timings."""
    bundles = [read_bundle(p) for p in paths]
    names = [b.name for b in bundles]
    if len(set(names)) != len(names):
        raise UsageError(f"bundles: variant names repeat ({', '.join(names)})")
    t0 = time.perf_counter()
    inputs = common_inputs(bundles)
    t1 = time.perf_counter()
    sessions = [load_session(b, device) for b in bundles]
    for s in sessions:
        s.set_inputs(inputs)
        s.call()  # the first call (module load, JIT) outside every timer
    t2 = time.perf_counter()
    info = {"bundles": {b.name: str(b.path) for b in bundles}, "targets": {b.name: b.target for b in bundles},
            "devices": {s.bundle.name: s.device for s in sessions},
            "timers": {s.bundle.name: getattr(s, "timer_includes", "not recorded") for s in sessions},
            "inputs_s": t1 - t0, "load_and_first_call_s": t2 - t1}
    return sessions, info


def out_file(explicit: str | None, stem: str) -> Path | None:
    if explicit:
        return Path(explicit)
    return Path(os.environ["OUT"]) / f"{stem}.json" if os.environ.get("OUT") else None


def us(seconds: float) -> str:
    return f"{seconds * 1e6:10.2f} us"


# ---- CUPTI --------------------------------------------------------------------------------

class Tracer:
    """CUPTI kernel activity in this process, switched on and off between samples. Records are
    only counted (kind, name, end - start), per variant: the buffer callback stays cheap, and
    buffers are flushed whenever the traced variant changes, so every delivered record belongs
    to `current`."""

    def __init__(self, cupti_module):
        self.api = cupti_module
        self.on = False
        self.registered = False
        self.current: str | None = None
        self.records: Counter[str] = Counter()
        self.kernel_ns: Counter[str] = Counter()
        self.names: dict[str, Counter[str]] = {}
        self.switches = 0

    def _requested(self):
        return 8 * 1024 * 1024, 0

    def _completed(self, activities) -> None:
        names = self.names.setdefault(self.current, Counter())
        for a in activities:
            if a.kind in KERNEL_KINDS:
                self.records[self.current] += 1
                self.kernel_ns[self.current] += a.end - a.start
                names[str(a.name)] += 1

    def enable(self, variant: str) -> None:
        if self.on and self.current == variant:
            return
        if self.on:
            self.api.activity_flush_all(1)  # the other variant's records, before `current` changes
        self.current = variant
        if not self.on:
            if not self.registered:
                self.api.activity_register_callbacks(self._requested, self._completed)
                self.registered = True
            self.api.activity_enable(self.api.ActivityKind.CONCURRENT_KERNEL)
            self.on = True
            self.switches += 1

    def disable(self) -> None:
        if not self.on:
            return
        self.api.activity_flush_all(1)  # buffered records reach _completed before the next arm
        self.api.activity_disable(self.api.ActivityKind.CONCURRENT_KERNEL)
        self.on = False


def open_tracer(devices: list[str]) -> tuple[Tracer | None, str]:
    """A Tracer, or None and the reason CUPTI cannot trace here."""
    if any(d != "cuda" for d in devices):
        return None, f"unavailable: device {'/'.join(sorted(set(devices)))} (CUPTI traces CUDA devices only)"
    try:
        from cupti import cupti
    except ImportError as err:
        return None, f"unavailable: cupti-python not importable: {err}"
    return Tracer(cupti), "ok"


# ---- the benchmark ------------------------------------------------------------------------

def _arm(sampler: Callable[[], float], number: int, before: Callable[[], None], calls: Counter, key: str):
    def sample() -> float:
        before()  # CUPTI switch: outside the sampler's own timer
        seconds = sampler()
        calls[key] += number
        return seconds
    return sample


def pristine(sessions: list, args: argparse.Namespace) -> dict[str, Any]:
    protocol = Protocol(warmup_calls=args.warmup_calls, warmup_seconds=args.warmup_s, blocks=args.max_blocks,
                        repeats=args.repeats, target_rel_width=None, budget_seconds=args.pristine_budget_s)
    return measure_interleaved({s.bundle.name: s.timer for s in sessions}, args.pristine_budget_s, protocol)


def interleaved(sessions: list, numbers: dict[str, int], tracer: Tracer | None,
                args: argparse.Namespace) -> tuple[dict[str, Any], Counter, str]:
    traced = "cupti" if tracer else "untraced_again"
    switch_off = tracer.disable if tracer else (lambda: None)
    calls: Counter = Counter()
    arms, pairs = {}, []
    for s in sessions:
        name, number = s.bundle.name, numbers[s.bundle.name]
        switch_on = (lambda n=name: tracer.enable(n)) if tracer else (lambda: None)
        arms[f"{name}/untraced"] = _arm(s.timer(number), number, switch_off, calls, f"{name}/untraced")
        arms[f"{name}/{traced}"] = _arm(s.timer(number), number, switch_on, calls, f"{name}/{traced}")
        pairs.append((f"{name}/{traced}", f"{name}/untraced"))
    if len(sessions) >= 2:  # does tracing change the ratio between the first two variants?
        a, b = sessions[0].bundle.name, sessions[1].bundle.name
        pairs += [(f"{a}/untraced", f"{b}/untraced"), (f"{a}/{traced}", f"{b}/{traced}")]
    protocol = Protocol(warmup_calls=3, warmup_seconds=args.arm_warmup_s, blocks=args.max_blocks,
                        repeats=args.repeats, target_rel_width=args.target_width, budget_seconds=args.budget_s)
    result = measure(arms, protocol, pairs=pairs).to_dict()
    switch_off()
    return result, calls, traced


def summarize(sessions: list, base: dict[str, Any], run: dict[str, Any], calls: Counter, traced: str,
              tracer: Tracer | None) -> dict[str, Any]:
    ratios = {(r["a"], r["b"]): r for r in run["ratios"]}
    rows = {}
    for s in sessions:
        name = s.bundle.name
        r = ratios[(f"{name}/{traced}", f"{name}/untraced")]
        untraced = run["variants"][f"{name}/untraced"]["median_s"]
        row = {"calls_per_sample": base["variants"][name]["calls_per_sample"],
               "pristine_median_s": base["variants"][name]["median_s"],
               "untraced_median_s": untraced,
               f"{traced}_median_s": run["variants"][f"{name}/{traced}"]["median_s"],
               "after_disable_pct": 100 * (untraced / base["variants"][name]["median_s"] - 1),
               "samples_per_arm": len(run["variants"][f"{name}/untraced"]["samples_s"])}
        if tracer:
            traced_calls = calls[f"{name}/cupti"]
            row["overhead_pct"] = 100 * (r["ratio"] - 1)
            row["overhead_ci_pct"] = [100 * (r["ci"][0] - 1), 100 * (r["ci"][1] - 1)]
            row["meets_goal"] = row["overhead_ci_pct"][1] <= GOAL_PCT
            row["cupti"] = {"traced_calls": traced_calls, "kernel_records": tracer.records[name],
                            "records_per_call": tracer.records[name] / traced_calls,
                            "kernel_time_per_call_s": tracer.kernel_ns[name] * 1e-9 / traced_calls,
                            "kernels": dict(tracer.names.get(name, Counter()).most_common(50))}
            if not tracer.records[name]:
                row["cupti"]["warning"] = "CUPTI was enabled but delivered no kernel records: overhead not valid"
        else:
            row["overhead_pct"] = None
            row["aa_ratio"] = r["ratio"]
            row["aa_ci"] = list(r["ci"])
        # Kernels the build catalogued (manifest), beside CUPTI's launches per call as a cross-check.
        row["catalog_kernels"] = len(s.bundle.manifest.get("kernels") or [])
        rows[name] = row
    out: dict[str, Any] = {"variants": rows}
    if tracer:
        out["cupti_enables"] = tracer.switches
    if len(sessions) >= 2:
        a, b = sessions[0].bundle.name, sessions[1].bundle.name
        out["variant_ratio"] = {arm: {k: ratios[(f"{a}/{arm}", f"{b}/{arm}")][k] for k in ("ratio", "ci")}
                                for arm in ("untraced", traced)} | {"a": a, "b": b}
    return out


def show(label: str, cupti_state: str, summary: dict[str, Any], run: dict[str, Any]) -> None:
    print(f"== profiler overhead: {label}  (CUPTI: {cupti_state})")
    print(f"   interleaved run: {run['blocks_run']} blocks, stopped: {run['stopped']}, {run['elapsed_s']:.1f} s")
    for name, row in summary["variants"].items():
        traced = "cupti" if "cupti_median_s" in row else "untraced_again"
        print(f"   {name}: pristine {us(row['pristine_median_s'])}  untraced {us(row['untraced_median_s'])}  "
              f"{traced} {us(row[traced + '_median_s'])}  ({row['samples_per_arm']} samples/arm, "
              f"{row['calls_per_sample']} calls/sample)")
        if row["overhead_pct"] is not None:
            lo, hi = row["overhead_ci_pct"]
            print(f"      overhead {row['overhead_pct']:+.2f}% [{lo:+.2f}, {hi:+.2f}] (goal <= {GOAL_PCT:g}%: "
                  f"{'met' if row['meets_goal'] else 'NOT met'}); untraced after disable vs pristine "
                  f"{row['after_disable_pct']:+.2f}% (sequential)")
            rec = row["cupti"]
            print(f"      CUPTI: {rec['kernel_records']} kernel records over {rec['traced_calls']} traced calls "
                  f"({rec['records_per_call']:.2f}/call; catalog: {row['catalog_kernels']} kernels), kernel time "
                  f"{us(rec['kernel_time_per_call_s']).strip()}/call: "
                  f"{', '.join(f'{k} x{v}' for k, v in list(rec['kernels'].items())[:5])}")
            if rec.get("warning"):
                print(f"      WARNING: {rec['warning']}")
        else:
            print(f"      no overhead measured (CUPTI {cupti_state}); A/A noise floor: ratio {row['aa_ratio']:.4f} "
                  f"[{row['aa_ci'][0]:.4f}, {row['aa_ci'][1]:.4f}]")
    vr = summary.get("variant_ratio")
    if vr:
        for arm in ("untraced", "cupti", "untraced_again"):
            if arm in vr:
                print(f"   {vr['a']}/{vr['b']} ({arm}): {vr[arm]['ratio']:.4f} [{vr[arm]['ci'][0]:.4f}, "
                      f"{vr[arm]['ci'][1]:.4f}]")


def add_protocol_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundles", nargs="+", metavar="BUNDLE", help="bundle directories of one case")
    parser.add_argument("--label", help="case name for the output file (default: first bundle's name)")
    parser.add_argument("--device", help="cuda | rocm | cpu (default: from each bundle's target)")
    parser.add_argument("--warmup-calls", type=int, default=75, help="warm-up samples per variant")
    parser.add_argument("--warmup-s", type=float, default=2.0, help="timed warm-up seconds per variant")
    parser.add_argument("--repeats", type=int, default=5, help="samples of each arm per block")
    parser.add_argument("--max-blocks", type=int, default=100000, help="most blocks (budget and width stop first)")
    parser.add_argument("--json", help="output file (default: $OUT/<bench>_<label>.json when OUT is set)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_protocol_arguments(parser)
    parser.add_argument("--pristine-budget-s", type=float, default=5.0, help="timed seconds before CUPTI is enabled")
    parser.add_argument("--budget-s", type=float, default=20.0, help="timed seconds of the interleaved run")
    parser.add_argument("--arm-warmup-s", type=float, default=0.5, help="timed warm-up per arm of the interleaved run")
    parser.add_argument("--target-width", type=float, default=0.01,
                        help="stop once every ratio's interval is narrower than this (relative)")
    args = parser.parse_args(argv)
    try:
        before = host_state.snapshot()
        sessions, info = load_case(args.bundles, args.device)
        label = args.label or sessions[0].bundle.name
        tracer, cupti_state = open_tracer([s.device for s in sessions])
        t0 = time.perf_counter()
        base = pristine(sessions, args)
        numbers = {n: v["calls_per_sample"] for n, v in base["variants"].items()}
        t1 = time.perf_counter()
        run, calls, traced = interleaved(sessions, numbers, tracer, args)
        t2 = time.perf_counter()
    except UsageError as err:
        print(f"bench_profiler_overhead: {err}", file=sys.stderr)
        return 2
    after = host_state.snapshot()
    summary = summarize(sessions, base, run, calls, traced, tracer)
    show(label, cupti_state, summary, run)
    result = {"benchmark": "profiler_overhead", "label": label, "cupti": cupti_state, "goal_pct": GOAL_PCT,
              **summary, "case": info, "wall_s": {"pristine": t1 - t0, "interleaved": t2 - t1},
              "pristine": base, "interleaved": run, "env": {"before": before, "after": after,
                                                             "warnings": host_state.drift(before, after)}}
    file = out_file(args.json, f"profiler_overhead_{label}")
    if file:
        write_json(file, result)
        print(f"   wrote {file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
