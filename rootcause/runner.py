"""The run stage: verify, measure and profile bundles on this host (`rootcause run`, and
`analyze` through a RunRequest).

1. load every bundle with its runner (runtimes only: no compiler is imported);
2. verify: the same inputs for every variant, outputs equal to each other and to the
   reference (exit 1 with the errors per output when not);
3. measure whole-graph latency, variants interleaved, with NVML state before and after; with
   --processes N in N fresh child processes one after another (a share of the budget each),
   pooled: per-process medians, the median of all samples, a hierarchical-bootstrap interval,
   and a warning when the processes disagree by more than one process's interval;
4. profile each variant in its own child process: CUPTI activity records, or ncu (opt-in).

Writes into the run directory (rootcause.artifacts.rundir), each file atomically:
measurement.json, env.json, <variant>.cupti.json, <variant>.ncu.csv. A profiler that is missing or fails is named in measurement.json, never
silently skipped.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parsers.ncu_csv import NCU_METRICS
from rootcause import child, envs, host_state
from rootcause.artifacts import handoff
from rootcause.artifacts.bundle import Bundle, read_bundle
from rootcause.artifacts.rundir import check_replaceable as check_run_dir, write_env, write_measurement
from rootcause.errors import InternalError, OutputsDiffer, ToolFailed, UsageError
from rootcause.fileio import make_folder, write_atomic
from rootcause.sessions import load_session
from rootcause.toolchains import runtime_python
from rootcause.verify import common_inputs, verify

if TYPE_CHECKING:  # for the annotation; the functions import measure where they use it
    from rootcause.measure import Protocol


@dataclass
class RunRequest:
    """What to run and how: the arguments of `rootcause run`, as data."""

    bundles: list[Path]
    out: Path
    profile: str = "cupti"  # cupti | ncu | none
    budget_s: float = 20.0
    processes: int = 1
    warmup_calls: int | None = None
    warmup_s: float | None = None
    rtol: float | None = None
    atol: float | None = None
    device: str | None = None
    profile_calls: int = 5
    ncu_metrics: str = NCU_METRICS
    ncu: str = "ncu"


# ---- measurement ----------------------------------------------------------------------

def _on_cpu(devices: Iterable[str | None]) -> bool:
    """Whether every variant runs on the CPU (a session that names no device runs there)."""
    return all(d in (None, "cpu") for d in devices)


def _protocol(sessions: list, budget_s: float, warmup_calls: int | None, warmup_s: float | None,
              offset: int = 0) -> Protocol:
    """The budgeted protocol of a run; its band is the analysis's whole-graph threshold for where
    the variants run (a CPU's larger share), so a run whose first two variants' interval holds its
    edge spends its budget before the analysis must say 'measure longer'."""
    from rootcause.measure import BUDGETED_BLOCKS, Protocol
    from rootcause.stats import whole_graph_share

    protocol = Protocol(budget_seconds=budget_s, blocks=BUDGETED_BLOCKS, offset=offset,
                        band=whole_graph_share(_on_cpu(getattr(s, "device", None) for s in sessions)))
    if warmup_calls is not None:
        protocol.warmup_calls = warmup_calls
    if warmup_s is not None:
        protocol.warmup_seconds = warmup_s
    return protocol


def measure(sessions: list, budget_s: float, warmup_calls: int | None = None,
            warmup_s: float | None = None) -> dict[str, Any]:
    """Whole-graph latency by rootcause.measure's interleaved protocol."""
    from rootcause.measure import measure_interleaved

    protocol = _protocol(sessions, budget_s, warmup_calls, warmup_s)
    result = measure_interleaved({s.bundle.name: s.timer for s in sessions}, budget_s=budget_s, protocol=protocol)
    result["timers"] = {s.bundle.name: getattr(s, "timer_includes", "not recorded by this runner") for s in sessions}
    # the python whose process timed each variant: this one, or another release's environment's
    result["timed_by"] = {s.bundle.name: str(getattr(s, "python", None) or sys.executable) for s in sessions}
    return result


def measure_in_processes(bundles: list[Bundle], processes: int, budget_s: float, warmup_calls: int | None,
                         warmup_s: float | None, device: str | None, out: Path) -> dict[str, Any]:
    """The interleaved protocol in `processes` fresh children, one after another, each with
    budget_s / processes and its own rotation offset; pooled by rootcause.measure.pool_processes."""
    from rootcause.measure import pool_processes

    results, timers = [], None
    for i in range(processes):
        file = out / f".measure.{i}.json"
        cmd = [sys.executable, "-m", "rootcause.runner", "--measure-child", str(file), "--index", str(i),
               "--budget-s", repr(budget_s / processes)] + [str(b.path) for b in bundles]
        cmd += (["--device", device] if device else []) + (["--warmup-calls", str(warmup_calls)]
                                                            if warmup_calls is not None else [])
        cmd += ["--warmup-s", repr(warmup_s)] if warmup_s is not None else []
        proc = child.run(cmd, env=_child_env())
        res = child.result(proc, file, f"measurement child {i} of --processes {processes}")
        timers = res.pop("timers", timers)
        results.append(res)
    pooled = pool_processes(results)
    pooled["budget_s"] = budget_s
    pooled["timers"] = timers
    return pooled


def _measure_child(argv: list[str]) -> int:
    """Child of measure_in_processes: load the bundles (verified by the parent), set the common
    inputs, run the protocol; its result goes back in the child envelope (rootcause.child)."""
    p = argparse.ArgumentParser(prog="rootcause.runner --measure-child")
    p.add_argument("--measure-child", required=True, type=Path)
    p.add_argument("--index", type=int, default=0)
    p.add_argument("--budget-s", type=float, required=True)
    p.add_argument("--warmup-calls", type=int)
    p.add_argument("--warmup-s", type=float)
    p.add_argument("--device")
    p.add_argument("bundles", nargs="+")
    args = p.parse_args(argv)
    return child.serve(lambda: _measure(args), args.measure_child)


def _measure(args: argparse.Namespace) -> dict[str, Any]:
    from rootcause.measure import measure_interleaved

    bundles = [read_bundle(b) for b in args.bundles]
    sessions = [load_session(b, args.device) for b in bundles]
    inputs = common_inputs(bundles)
    for s in sessions:
        s.set_inputs(inputs)
    # A different first permutation per process, so no variant always leads a process.
    protocol = _protocol(sessions, args.budget_s, args.warmup_calls, args.warmup_s, offset=args.index)
    result = measure_interleaved({s.bundle.name: s.timer for s in sessions}, args.budget_s, protocol)
    result["timers"] = {s.bundle.name: getattr(s, "timer_includes", "not recorded by this runner") for s in sessions}
    return result


# ---- profiling ------------------------------------------------------------------------

def _child_env() -> dict[str, str]:
    # The child must import rootcause from where this process did (no install on the GPU host).
    root = str(Path(__file__).resolve().parents[1])
    return child.python_env({"PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)})


def _profile_python(bundle: Bundle) -> tuple[str, dict[str, str]]:
    """The python (and environment) a bundle's profiled child runs with: this one, or that of an
    environment with the bundle's runtime version (rootcause.toolchains.runtime_python)."""
    python = runtime_python(bundle)
    return (sys.executable, _child_env()) if python is None else (str(python), envs.checkout_env())


def _capture(profiler: str, what: str, cmd: list[str], envelope: Path,
             env: dict[str, str]) -> tuple[subprocess.CompletedProcess | None, dict[str, Any]]:
    """Run a capture child (rootcause.capture, under the profiler for ncu) of `what` (a variant,
    or the variants); its process and its summary, or None and the failed profile's record: a
    profiler that fails is named in measurement.json, and the run goes on."""
    try:
        proc = child.run(cmd, env=env)
    except FileNotFoundError:
        return None, {"profiler": profiler, "ok": False, "error": f"{cmd[0]} not found"}
    try:
        return proc, child.result(proc, envelope, f"the {profiler} capture of {what}")
    except (UsageError, ToolFailed, InternalError) as err:
        return None, {"profiler": profiler, "ok": False, "error": str(err)}


def profile_cupti(bundles: list[Bundle], out: Path, calls: int, device: str | None) -> dict[str, dict[str, Any]]:
    """Each bundle's CUPTI capture summary, by name. One child per runtime environment profiles
    all of its bundles in turn: the runtime and CUPTI are imported once, not once a variant.
    Where that child fails, each of its bundles is profiled again in a child of its own, so one
    bundle's failure stays its own."""
    groups: dict[str, tuple[dict[str, str], list[Bundle]]] = {}
    for bundle in bundles:
        python, child_env = _profile_python(bundle)
        groups.setdefault(python, (child_env, []))[1].append(bundle)
    profiles: dict[str, dict[str, Any]] = {}
    for python, (child_env, members) in groups.items():
        got = _cupti_child(members, out, calls, device, python, child_env)
        if len(members) > 1 and not all(p["ok"] for p in got.values()):
            for bundle in members:
                got.update(_cupti_child([bundle], out, calls, device, python, child_env))
        profiles.update(got)
    return profiles


def _cupti_child(bundles: list[Bundle], out: Path, calls: int, device: str | None, python: str,
                 child_env: dict[str, str]) -> dict[str, dict[str, Any]]:
    """One capture child's summaries of its bundles, by name (each the child's failure where it failed)."""
    alone = len(bundles) == 1
    envelope = handoff.result_file(out, f"{bundles[0].name}.cupti" if alone else "cupti-capture")
    cmd = [python, "-m", "rootcause.capture", "cupti", *(str(b.path) for b in bundles), "--result", str(envelope),
           "--out-dir", str(out), "--calls", str(calls)] + (["--device", device] if device else [])
    what = bundles[0].name if alone else f"{len(bundles)} variants ({', '.join(b.name for b in bundles)})"
    proc, summary = _capture("cupti", what, cmd, envelope, child_env)
    if proc is None:
        return {b.name: summary for b in bundles}
    return {b.name: {"profiler": "cupti", "ok": True, **summary["variants"][b.name]} for b in bundles}


def profile_ncu(bundle: Bundle, out: Path, calls: int, device: str | None, ncu: str, metrics: str) -> dict[str, Any]:
    file = out / f"{bundle.name}.ncu.csv"
    envelope = handoff.result_file(out, f"{bundle.name}.ncu")
    python, child_env = _profile_python(bundle)
    cmd = [ncu, "--csv", "--page", "raw", "--metrics", metrics, "--profile-from-start", "off",
           "--clock-control", "none", "--target-processes", "all",
           python, "-m", "rootcause.capture", "ncu", str(bundle.path), "--result", str(envelope),
           "--calls", str(calls), "--warmup", "3"] + (["--device", device] if device else [])
    proc, failed = _capture("ncu", bundle.name, cmd, envelope, child_env)
    if proc is None:
        return failed
    if '"ID"' not in proc.stdout:  # the child ran, but ncu recorded no kernel
        return {"profiler": "ncu", "ok": False, "error": f"ncu recorded no kernel: "
                f"{child.first_error_line(proc.stdout + proc.stderr)}"}
    write_atomic(file, proc.stdout)
    return {"profiler": "ncu", "ok": True, "file": file.name, "calls": calls, "metrics": metrics.split(","),
            "clock_control": "none"}


# ---- the stage ------------------------------------------------------------------------

def _excludable(record: dict[str, Any], sessions: list[Any]) -> set[str]:
    """The variants after the first two (the pair: A and B, as analyze orders them; hybrids follow)
    whose outputs differ, when A and B themselves agree: those are excluded and the rest measured.
    Empty when A or B is among them, or when nothing else is: then the run stops (exit 1)."""
    bad = {c["variant"] for c in record.get("checks", []) if not all(r.get("ok") for r in c.get("outputs", []))}
    bad |= set(record.get("nan") or {})
    pair = {s.bundle.name for s in sessions[:2]}
    return set() if len(sessions) <= 2 or bad & pair else bad


def run_bundles(args: RunRequest) -> dict[str, Any]:
    """Verify, measure and profile; the measurement.json document (also written into args.out).
    OutputsDiffer (with .record) when the variants' outputs differ."""
    if args.budget_s <= 0:
        raise UsageError(f"--budget-s: must be > 0, got {args.budget_s}")
    if args.processes < 1:
        raise UsageError(f"--processes: must be >= 1, got {args.processes}")
    bundles = [read_bundle(p) for p in args.bundles]
    names = [b.name for b in bundles]
    if len(set(names)) != len(names):
        raise UsageError(f"bundles: variant names repeat ({', '.join(names)}); each bundle needs its own name")
    out: Path = make_folder(args.out)
    check_run_dir(out)
    before = host_state.snapshot()
    sessions = [load_session(b, args.device) for b in bundles]
    for s in sessions:  # what a runtime made here that the analysis reads (XLA: the HLO it compiled)
        for name, text in (getattr(s, "run_files", lambda: {})() or {}).items():
            write_atomic(out / name, text)
    result: dict[str, Any] = {"bundles": {b.name: str(b.path) for b in bundles},
                              "devices": {s.bundle.name: s.device for s in sessions}}
    tolerance = None
    if args.rtol is not None or args.atol is not None:
        tolerance = (args.rtol or 0.0, args.atol or 0.0)
    while True:
        try:
            result["verification"] = verify(sessions, common_inputs(bundles), tolerance)
            break
        except OutputsDiffer as err:
            record = getattr(err, "record", {"ok": False, "error": str(err)})
            extra = _excludable(record, sessions)
            if not extra:
                result["verification"] = record
                write_measurement(out, result)
                write_env(out, {"before": before, "after": host_state.snapshot(), "warnings": []})
                raise
            for name in extra:
                result.setdefault("excluded", {})[name] = "outputs differ from the first bundle's or the reference"
                print(f"rootcause run: {name} computes different outputs: excluded, the rest measured",
                      file=sys.stderr)
            sessions = [s for s in sessions if s.bundle.name not in extra]
            bundles = [b for b in bundles if b.name not in extra]
            result["bundles"] = {b.name: str(b.path) for b in bundles}
            result["devices"] = {s.bundle.name: s.device for s in sessions}
    during = host_state.snapshot()
    if args.processes == 1:
        result["measurement"] = measure(sessions, args.budget_s, args.warmup_calls, args.warmup_s)
    else:
        del sessions[:]  # free device memory before the measuring children start
        result["measurement"] = measure_in_processes(bundles, args.processes, args.budget_s, args.warmup_calls,
                                                     args.warmup_s, args.device, out)
    after = host_state.snapshot()
    warnings = host_state.drift(during, after)
    result["env_warnings"] = warnings
    write_env(out, {"before": before, "measure_start": during, "after": after, "warnings": warnings})
    on_gpu = not _on_cpu(result["devices"].values())
    for warning in warnings + result["measurement"].get("warnings", []):
        if on_gpu or not warning.startswith("GPU state not recorded"):  # a CPU run needs no NVML; env.json keeps it
            print(f"rootcause run: warning: {warning}", file=sys.stderr)
    del sessions  # free device memory before the profiling children start
    if args.profile == "cupti":
        profiles = profile_cupti(bundles, out, args.profile_calls, args.device)
    elif args.profile == "ncu":
        profiles = {b.name: profile_ncu(b, out, args.profile_calls, args.device, args.ncu, args.ncu_metrics)
                    for b in bundles}
    else:
        profiles = {b.name: {"profiler": "none", "ok": True} for b in bundles}
    for bundle in bundles:
        if not profiles[bundle.name]["ok"]:
            print(f"rootcause run: {bundle.name}: {args.profile} failed: {profiles[bundle.name]['error']}",
                  file=sys.stderr)
    result["profiles"] = profiles
    write_measurement(out, result)
    return result


if __name__ == "__main__":
    from parsers import ParseError

    try:
        sys.exit(_measure_child(sys.argv[1:]))
    except (ParseError, UsageError) as err:  # one line; the parent repeats it
        print(f"rootcause runner --measure-child: {err}", file=sys.stderr)
        sys.exit(2)
