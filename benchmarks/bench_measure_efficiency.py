"""Measurement efficiency: GPU seconds rootcause.measure's protocol needs to pin a ratio down.

    python benchmarks/bench_measure_efficiency.py BUNDLE_A BUNDLE_B [--target-width 0.01] [--budget-s 45]
        [--stop-check scheduled|every-block|both]

Runs the protocol of `rootcause run` (rootcause.measure.measure_interleaved: calibration of the
calls per sample, warm-up, interleaved blocks, early stop once the bootstrap interval of
median(A)/median(B) is narrower than --target-width relative to the ratio) --trials times in
one process, each trial with its own calibration and warm-up, the first permutation rotated by
trial. Per trial: how it stopped, blocks run, and the wall time of the measure call ("GPU
seconds": the device is held all along) split into calibration + warm-up, timed blocks (with
the convergence checks) and the final statistics; plus the device-busy share of the blocks
(sum of the samplers' own wall time over the blocks' wall time) and the stop rule's own share of
the block time (its seconds as rootcause.measure records them in Measurement.checks: order-statistic estimates and
full bootstraps). --stop-check picks the rule: 'scheduled' (the default of `rootcause run`),
'every-block' (the full bootstrap after every block, the rule before), or 'both' (the trials
alternate between the two, same first permutation per pair, to compare them on one machine state).

The width curve is recomputed from the trial's own samples with the same statistic the stop
rule uses (rootcause.measure.ratio_ci, same seed): the block, the seconds from the start of
the call, and the seconds of timed samples alone (what a free stop rule would cost), at which
the interval first got narrower than 2% (+-1%) and than --target-width.
Prints a table; writes $OUT/measure_efficiency_<label>.json when OUT is set (or --json FILE).
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable

import numpy as np

from bench_profiler_overhead import add_protocol_arguments, load_case, out_file, us
from rootcause import host_state
from rootcause.errors import UsageError
from rootcause.fileio import write_json
from rootcause.measure import Protocol, measure_interleaved, ratio_ci

WIDTHS = (0.02, 0.01)  # +-1% and +-0.5%


def logged_timers(sessions: list, log: list[tuple[str, float, float]]) -> dict[str, Callable]:
    """Session.timer wrapped so every sample's wall-clock start and end are logged."""
    def timer_for(session):
        def make(number: int) -> Callable[[], float]:
            sampler = session.timer(number)

            def sample() -> float:
                t0 = time.perf_counter()
                seconds = sampler()
                log.append((session.bundle.name, t0, time.perf_counter()))
                return seconds
            return sample
        return make
    return {s.bundle.name: timer_for(s) for s in sessions}


def width_curve(result: dict[str, Any], a: str, b: str, timed: list, t_call: float,
                points: int) -> list[dict[str, float]]:
    """(block, seconds since the call started, relative width) at about `points` block counts."""
    p = result["protocol"]
    xa, xb = result["variants"][a]["samples_s"], result["variants"][b]["samples_s"]
    per_block = p["repeats"] * 2
    blocks = result["blocks_run"]
    ks = sorted(set(np.unique(np.geomspace(1, blocks, points).astype(int)).tolist()) | {blocks})
    busy = np.cumsum([end - start for _, start, end in timed])
    curve = []
    for k in ks:
        n = k * p["repeats"]
        r, (lo, hi) = ratio_ci(xa[:n], xb[:n], p["confidence"], p["resamples"], p["seed"])
        # seconds: since the measure call started (all costs); busy_s: the blocks' samplers alone.
        curve.append({"blocks": k, "seconds": timed[k * per_block - 1][2] - t_call,
                      "busy_s": float(busy[k * per_block - 1]), "rel_width": (hi - lo) / r})
    return curve


def first_below(curve: list[dict[str, float]], width: float) -> dict[str, float] | None:
    return next((c for c in curve if c["rel_width"] < width), None)


def trial(sessions: list, index: int, args: argparse.Namespace) -> dict[str, Any]:
    a, b = sessions[0].bundle.name, sessions[1].bundle.name
    log: list[tuple[str, float, float]] = []
    rule = args.stop_check if args.stop_check != "both" else ("scheduled", "every-block")[index % 2]
    protocol = Protocol(warmup_calls=args.warmup_calls, warmup_seconds=args.warmup_s, blocks=args.max_blocks,
                        repeats=args.repeats, target_rel_width=args.target_width, budget_seconds=args.budget_s,
                        offset=index // 2 if args.stop_check == "both" else index, stop_check=rule)
    t0 = time.perf_counter()
    result = measure_interleaved(logged_timers(sessions[:2], log), args.budget_s, protocol)
    t1 = time.perf_counter()
    timed = log[-result["blocks_run"] * protocol.repeats * 2:]  # the blocks' samples come last
    blocks_start = timed[0][1]
    ratio = result["ratios"][0]
    curve = width_curve(result, a, b, timed, t0, args.curve_points)
    checks = result["checks"]
    return {"trial": index, "stop_check": rule, "checks": checks,
            "check_share_of_blocks": (checks["check_s"] + checks["full_s"]) / result["elapsed_s"],
            "stopped": result["stopped"], "blocks_run": result["blocks_run"],
            "samples_per_variant": len(result["variants"][a]["samples_s"]),
            "calls_per_sample": {n: v["calls_per_sample"] for n, v in result["variants"].items()},
            "medians_s": {n: v["median_s"] for n, v in result["variants"].items()},
            "ratio": ratio["ratio"], "ci": ratio["ci"], "rel_width": (ratio["ci"][1] - ratio["ci"][0]) / ratio["ratio"],
            "gpu_seconds": t1 - t0,
            "calibration_and_warmup_s": blocks_start - t0,
            "blocks_s": result["elapsed_s"],
            "final_statistics_s": t1 - (blocks_start + result["elapsed_s"]),
            "busy_share_of_blocks": sum(e - s for _, s, e in timed) / result["elapsed_s"],
            "first_below": {f"{w:g}": first_below(curve, w) for w in sorted({*WIDTHS, args.target_width})},
            "curve": curve, "measurement": result}


def show(trials: list[dict[str, Any]]) -> None:
    for t in trials:
        lo, hi = t["ci"]
        c = t["checks"]
        print(f"   trial {t['trial']} ({t['stop_check']}): {t['stopped']:<10} {t['blocks_run']:5d} blocks  ratio {t['ratio']:.4f} "
              f"[{lo:.4f}, {hi:.4f}] width {100 * t['rel_width']:.2f}%  GPU {t['gpu_seconds']:6.2f} s = "
              f"warm-up {t['calibration_and_warmup_s']:5.2f} + blocks {t['blocks_s']:6.2f} + stats "
              f"{t['final_statistics_s']:4.2f}; busy {100 * t['busy_share_of_blocks']:.0f}% of blocks")
        print(f"      stop rule: {c['checks']} checks, {c['full']} full bootstraps; {c['check_s']:.3f} s estimates + "
              f"{c['full_s']:.3f} s bootstraps = {100 * t['check_share_of_blocks']:.1f}% of block time")
        print(f"      medians: {', '.join(f'{n} {us(m).strip()}' for n, m in t['medians_s'].items())}")
        for w, hit in t["first_below"].items():
            where = (f"block {hit['blocks']}, {hit['seconds']:.2f} s into the call ({hit['busy_s']:.2f} s of "
                     f"timed samples)" if hit else "not reached")
            print(f"      width < {100 * float(w):g}%: {where}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_protocol_arguments(parser)
    parser.add_argument("--target-width", type=float, default=0.01, help="relative interval width to stop at")
    parser.add_argument("--budget-s", type=float, default=40.0, help="seconds of timed blocks per trial")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--stop-check", choices=("scheduled", "every-block", "both"), default="scheduled",
                        help="stop rule of the protocol; 'both' alternates trials between the two")
    parser.add_argument("--curve-points", type=int, default=30, help="block counts the width curve is computed at")
    args = parser.parse_args(argv)
    if len(args.bundles) != 2:
        print("bench_measure_efficiency: give exactly two bundles (A B)", file=sys.stderr)
        return 2
    try:
        before = host_state.snapshot()
        sessions, info = load_case(args.bundles, args.device)
        label = args.label or f"{sessions[0].bundle.name}_vs_{sessions[1].bundle.name}"
        a, b = sessions[0].bundle.name, sessions[1].bundle.name
        print(f"== measurement efficiency: {label}: {a}/{b}, target width {args.target_width:g} (relative), "
              f"budget {args.budget_s:g} s of blocks per trial")
        file = out_file(args.json, f"measure_efficiency_{label}")
        result = {"benchmark": "measure_efficiency", "label": label, "a": a, "b": b,
                  "target_width": args.target_width, "budget_s": args.budget_s, "trials": [], "case": info}
        for i in range(args.trials):
            result["trials"].append(trial(sessions, i, args))
            show(result["trials"][-1:])
            if file:  # after every trial: a run stopped by the host's deadline keeps what it finished
                write_json(file, result | {"env": {"before": before, "after": host_state.snapshot()}})
    except UsageError as err:
        print(f"bench_measure_efficiency: {err}", file=sys.stderr)
        return 2
    after = host_state.snapshot()
    gpu = [t["gpu_seconds"] for t in result["trials"]]
    print(f"   GPU seconds per trial: median {np.median(gpu):.2f}, range {min(gpu):.2f}-{max(gpu):.2f}; converged "
          f"in {sum(t['stopped'] == 'converged' for t in result['trials'])}/{len(gpu)} trials")
    result["env"] = {"before": before, "after": after, "warnings": host_state.drift(before, after)}
    if file:
        write_json(file, result)
        print(f"   wrote {file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
