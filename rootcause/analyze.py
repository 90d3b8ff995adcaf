"""`rootcause analyze SPEC_A SPEC_B`: build, run, attribute, diagnose, confirm and report A against B.

Stages, each through its own module: build (rootcause.build, cached) -> hybrids planned from
the two specs and catalogs and built (rootcause.confirm) -> run (rootcause.run: verify,
interleaved measurement of A, B and the hybrids, CUPTI on a GPU) -> CPU profile (TVM VM
instrument, IREE local-task host-execution) -> align, attribute, diagnose -> confirm
(each hybrid's share of its unit's profiled delta, or of the A-B delta for whole-spec hybrids) ->
report (rootcause.report) into --out.

Split across hosts: `analyze A B --bundle-only --target cuda:sm_90 --out OUT` builds here and
writes OUT/plan.json and OUT/bundles/ (one bundle per variant, its manifest named after the
spec); `rootcause run OUT/bundles/* --out RUN` runs on the GPU host and measures each bundle
under that name; `analyze A B --out OUT --from-run RUN` attributes, confirms and reports here.
The analysis of a run directory is the same code whether the run was local or remote. A run of
llvm bundles records no per-kernel profile (`rootcause run` profiles GPUs only): --from-run then
takes the CPU profiles of A and B on this host, into RUN, and the report says so.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rootcause import build as build_mod, bundle as bundle_mod, confirm, spec as spec_mod
from rootcause.errors import OutputsDiffer, UsageError
from rootcause.fileio import write_atomic, write_json
from rootcause.spec import VariantSpec

_T0 = time.monotonic()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec_a", metavar="SPEC_A", help="variant A (baseline): file.toml or file.toml#NAME")
    parser.add_argument("spec_b", metavar="SPEC_B", help="variant B (candidate): file.toml or file.toml#NAME")
    parser.add_argument("--out", type=Path, help="output directory (default reports/<a>_vs_<b>/)")
    parser.add_argument("--target", default=None,
                        help="auto (default: the GPU when present, else llvm) | cuda:sm_XX | rocm:gfxNNN | llvm; "
                             "with --bundle-only the default is the specs' own target")
    parser.add_argument("--budget-s", type=float, default=10.0,
                        help="seconds for the interleaved timing loop of all variants (default 10)")
    parser.add_argument("--bundle-only", action="store_true",
                        help="build A, B and the hybrids into OUT/bundles and stop (run them elsewhere)")
    parser.add_argument("--from-run", type=Path, metavar="DIR",
                        help="analyze a `rootcause run` directory (made here or on another host) against "
                             "OUT/plan.json from an earlier --bundle-only")
    parser.add_argument("--no-confirm", action="store_true", help="skip the counterfactual hybrids")
    parser.add_argument("--hybrids", type=int, default=4, help="most hybrids built (default 4)")
    parser.add_argument("--threshold", type=float, default=confirm.THRESHOLD,
                        help="recovered share (of the unit's delta, or of the A-B delta) a hybrid's interval "
                             "must exceed to confirm (default 0.5)")
    parser.add_argument("--device", help="GPU name for diagnose (default: from the run's env.json)")
    parser.add_argument("--profile-calls", type=int, default=10, help="graph calls profiled per variant")


def progress(message: str) -> None:
    print(f"[analyze {time.monotonic() - _T0:6.1f}s] {message}", file=sys.stderr, flush=True)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


# ---- target -----------------------------------------------------------------------------

def detect_gpu() -> str | None:
    """'cuda:sm_XX' when an NVIDIA GPU answers NVML, 'rocm:gfxNNN' when the amdgpu KFD lists one, else None."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            if pynvml.nvmlDeviceGetCount() > 0:
                major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(pynvml.nvmlDeviceGetHandleByIndex(0))
                return f"cuda:sm_{major}{minor}"
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no pynvml, no driver, no device: not a CUDA host
        pass
    for props in sorted(Path("/sys/class/kfd/kfd/topology/nodes").glob("*/properties")):
        for line in props.read_text(errors="replace").splitlines():
            key, _, value = line.partition(" ")
            if key == "gfx_target_version" and value.strip().isdigit() and int(value) > 0:
                v = int(value)  # major*10000 + minor*100 + stepping, e.g. 90402 = gfx942
                return f"rocm:gfx{v // 10000}{v // 100 % 100}{v % 100:x}"
    return None


def resolve_target(requested: str | None, spec: VariantSpec, bundle_only: bool) -> str:
    if requested is None and bundle_only:
        requested = spec.target
    if requested is None:
        requested = "auto"
    if requested != "auto":
        return spec_mod.with_target(spec, requested).target  # validates the syntax
    gpu = detect_gpu()
    if gpu is None:
        return "llvm"
    # A spec written for this kind of GPU keeps its arch (IREE 3.13 has no sm_90: specs say sm_80).
    return spec.target if spec.target.split(":")[0] == gpu.split(":")[0] else gpu


# ---- build ------------------------------------------------------------------------------

def build_all(spec_a: VariantSpec, spec_b: VariantSpec, out: Path, no_confirm: bool,
              limit: int) -> dict[str, Any]:
    """Build A, B and the planned hybrids into out/bundles; write out/plan.json."""
    bundles_dir = out / "bundles"
    paths = {}
    for side, spec in (("A", spec_a), ("B", spec_b)):
        progress(f"building {side} = {spec.name} for {spec.target}")
        paths[spec.name] = build_mod.build_bundle(spec, bundles_dir / _safe(spec.name))
    hybrids, notes, failed = [], [], {}
    if not no_confirm:
        catalogs = [bundle_mod.kernels(paths[s.name]) for s in (spec_a, spec_b)]
        hybrids, notes = confirm.plan(spec_a, spec_b, *catalogs, limit=limit,
                                      bundles={"a": paths[spec_a.name], "b": paths[spec_b.name]},
                                      work_dir=out / "hybrids")
        if not hybrids:
            progress("no hybrid can be built for this pair: " + ("; ".join(notes) or "the specs differ in nothing "
                                                                 "a hybrid can swap"))
        for h in hybrids:
            progress(f"building hybrid {h.name}: {h.description}")
            try:
                paths[h.name] = build_mod.build_bundle(h.spec, bundles_dir / _safe(h.name))
            except UsageError as err:
                failed[h.name] = f"build failed: {err}"
                progress(f"hybrid {h.name} did not build: {err}")
    plan = {"a": spec_a.name, "b": spec_b.name, "target": spec_a.target,
            "specs": {"a": spec_a.to_dict(), "b": spec_b.to_dict()},
            "hybrids": [h.to_dict() for h in hybrids], "failed": failed, "notes": notes,
            "bundles": {name: str(p.relative_to(out)) for name, p in paths.items()}}
    write_json(out / "plan.json", plan)
    return plan


def read_plan(out: Path) -> dict[str, Any]:
    from rootcause.compare import read_json

    return read_json(out / "plan.json", f"no plan here; run `rootcause analyze A B --bundle-only --out {out}` "
                                        "first (or pass the --out used then)")


# ---- run on this host -------------------------------------------------------------------

def _run_namespace(bundles: list[Path], run_dir: Path, budget_s: float, profile: str, calls: int):
    """`rootcause run`'s own arguments, parsed by its own parser (its defaults stay its own)."""
    from rootcause import run as run_mod

    parser = argparse.ArgumentParser(prog="rootcause run")
    run_mod.add_arguments(parser)
    return parser.parse_args([*map(str, bundles), "--out", str(run_dir), "--profile", profile,
                              "--budget-s", str(budget_s), "--profile-calls", str(calls)])


def run_here(plan: dict[str, Any], out: Path, run_dir: Path, budget_s: float, calls: int) -> None:
    """`rootcause run` of A, B and the built hybrids, plus the CPU profiler where there is no GPU."""
    from rootcause import run as run_mod

    names = [n for n in plan["bundles"] if n not in plan["failed"]]
    on_gpu = not plan["target"].startswith("llvm")
    while True:
        progress(f"verify + measure {', '.join(names)} (budget {budget_s:g} s)")
        args = _run_namespace([out / plan["bundles"][n] for n in names], run_dir, budget_s,
                              "cupti" if plan["target"].startswith("cuda") else "none", calls)
        try:
            with contextlib.redirect_stdout(sys.stderr):
                run_mod.run(args)
            break
        except OutputsDiffer as err:
            record = getattr(err, "record", {})
            bad = {c["variant"] for c in record.get("checks", []) if not all(r["ok"] for r in c["outputs"])}
            bad_hybrids = bad - {plan["a"], plan["b"]}
            if not bad_hybrids or bad & {plan["a"], plan["b"]}:
                raise
            for name in bad_hybrids:
                plan["failed"][name] = "outputs differ from A or the reference: excluded"
                progress(f"hybrid {name} computes different outputs: excluded, measuring again")
            names = [n for n in names if n not in bad_hybrids]
            write_json(out / "plan.json", plan)
    if not on_gpu:
        profile_cpu(plan, out, run_dir, calls)


def profile_cpu(plan: dict[str, Any], out: Path, run_dir: Path, calls: int) -> None:
    """Per-kernel CPU profiles of A and B (the hybrids are only timed), recorded in measurement.json."""
    measurement_path = run_dir / "measurement.json"
    result = json.loads(measurement_path.read_text())
    for name in (plan["a"], plan["b"]):
        bundle_dir = out / plan["bundles"][name]
        frontend = bundle_mod.read_manifest(bundle_dir)["frontend"]
        progress(f"profiling {name} on the CPU ({'TVM VM instrument' if frontend == 'tvm' else 'IREE host-execution'})")
        try:
            if frontend == "tvm":
                from rootcause.profilers import tvm_vm

                info = tvm_vm.capture(bundle_dir, run_dir / f"{_safe(name)}.tvm-vm.json", calls=calls)
            else:
                info = profile_iree_cpu(bundle_dir, run_dir / f"{_safe(name)}.iree-dispatch.jsonl", calls)
        except UsageError as err:
            info = {"profiler": "tvm-vm" if frontend == "tvm" else "iree-profile", "ok": False, "error": str(err)}
            progress(f"{name}: CPU profile failed: {err}")
        result.setdefault("profiles", {})[name] = info
    write_json(measurement_path, result)


def _iree_tool(name: str) -> Path:
    import iree.runtime

    tool = Path(iree.runtime.__file__).resolve().parent.parent / "_runtime_libs" / name
    if not tool.is_file():
        found = shutil.which(name)
        if not found:
            raise UsageError(f"{name} not found (iree-base-runtime ships it under iree/_runtime_libs)")
        tool = Path(found)
    return tool


def profile_iree_cpu(bundle_dir: Path, out_file: Path, calls: int) -> dict[str, Any]:
    """IREE local-task host-execution profile: iree-benchmark-module, then `iree-profile dispatch` JSONL."""
    import numpy as np

    manifest = bundle_mod.read_manifest(bundle_dir)
    with tempfile.TemporaryDirectory() as tmp:
        inputs = []
        for i, array in enumerate(bundle_mod.load_inputs(bundle_dir)):
            np.save(Path(tmp) / f"{i}.npy", array)
            inputs.append(f"--input=@{Path(tmp) / f'{i}.npy'}")
        prof = Path(tmp) / "capture.ireeprof"
        cmd = [str(_iree_tool("iree-benchmark-module")), f"--module={bundle_dir / manifest['module']}",
               "--device=local-task", f"--function={manifest['entry']}", *inputs,
               f"--benchmark_min_time={calls}x", "--device_profiling_mode=host-execution",
               f"--device_profiling_output={prof}"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0 or not prof.is_file():
            raise UsageError(f"{bundle_dir}: iree-benchmark-module profile failed: "
                             f"{(proc.stderr.strip().splitlines() or ['no output'])[-1]}")
        dump = subprocess.run([str(_iree_tool("iree-profile")), "dispatch", "--dispatch_events", "--format=jsonl",
                               str(prof)], capture_output=True, text=True)
        if dump.returncode != 0:
            raise UsageError(f"{prof.name}: iree-profile dispatch failed: "
                             f"{(dump.stderr.strip().splitlines() or ['no output'])[-1]}")
    write_atomic(out_file, dump.stdout)
    return {"profiler": "iree-profile", "ok": True, "file": out_file.name, "calls": calls,
            "mode": "host-execution (local-task)"}


# ---- analysis of a run directory ---------------------------------------------------------

def _profile_file(run_dir: Path, measurement: dict[str, Any], name: str) -> Path:
    info = measurement.get("profiles", {}).get(name)
    if info and info.get("ok") and info.get("file"):
        return run_dir / info["file"]
    candidates = sorted(run_dir.glob(f"{name}.*.json")) + sorted(run_dir.glob(f"{name}.*.csv")) + \
        sorted(run_dir.glob(f"{name}.*.jsonl"))
    if candidates:
        return candidates[0]
    why = info.get("error") if info else "no profile recorded"
    raise UsageError(f"{run_dir / 'measurement.json'}: profiles.{name}: {why}; attribution needs a per-kernel "
                     f"profile of both variants (`rootcause run --profile cupti` on a GPU host)")


def _whole(measurement: dict[str, Any], name: str, where: Path):
    """Measured whole-graph latency of one variant, through compare's reader (one reader)."""
    from rootcause.compare import measured_whole_graph

    variants = measurement["measurement"].get("variants") or {}
    if name not in variants:
        raise UsageError(f"{where}: measurement.variants: no variant '{name}' (it holds "
                         f"{', '.join(map(repr, variants)) or 'none'}); run the bundles in OUT/bundles, whose "
                         "manifests carry the spec names")
    return measured_whole_graph(variants[name], f"{where}: measurement.variants.{name}")


def _needs_cpu_profiles(plan: dict[str, Any], measurement: dict[str, Any]) -> bool:
    """A run of llvm bundles without per-kernel profiles of A and B (rootcause run has no CPU profiler)."""
    if not plan["target"].startswith("llvm"):
        return False
    profiles = measurement.get("profiles") or {}
    return any(not (profiles.get(n) or {}).get("file") for n in (plan["a"], plan["b"]))


def analyze_run(plan: dict[str, Any], out: Path, run_dir: Path, threshold: float,
                device: str | None = None, calls: int = 10, command: str | None = None) -> tuple[dict[str, Any], str]:
    """Attribution (with confirmation) of a run directory; writes attribution.json and the reports."""
    from rootcause.align import align
    from rootcause.attribute import attribute
    from rootcause.compare import summary
    from rootcause.diagnose import diagnose

    from rootcause.compare import read_json, resolve_device, run_environment, profile_events

    mpath = run_dir / "measurement.json"
    missing = f"no measurement here (is {run_dir} a `rootcause run` directory?)"
    measurement = read_json(mpath, missing)
    if not isinstance(measurement, dict) or not isinstance(measurement.get("measurement"), dict):
        raise UsageError(f"{mpath}: no \"measurement\" (the run stopped at verification?)")
    run_notes = []
    if _needs_cpu_profiles(plan, measurement):
        progress(f"{run_dir} holds no per-kernel profile of {plan['a']} and {plan['b']}: profiling them here")
        profile_cpu(plan, out, run_dir, calls)
        measurement = read_json(mpath, missing)
        run_notes.append("the run recorded no per-kernel profile (llvm bundles): analyze --from-run took the "
                         "CPU profiles of A and B on this host")
    a, b = plan["a"], plan["b"]
    manifests = {n: bundle_mod.read_manifest(out / plan["bundles"][n]) for n in (a, b)}
    catalogs = {n: bundle_mod.kernels(out / plan["bundles"][n]) for n in (a, b)}
    progress("align, attribute, diagnose")
    split_notes: list[str] = []
    events = {n: profile_events(str(_profile_file(run_dir, measurement, n)), None, split_notes, n) for n in (a, b)}
    entries = {n: manifests[n]["entry"] for n in (a, b)}
    alignment = align(events[a], events[b], catalogs[a], catalogs[b], entries[a], entries[b])
    environment = run_environment(str(mpath))
    att = attribute(events[a], events[b], alignment, _whole(measurement, a, mpath), _whole(measurement, b, mpath),
                    labels=(a, b), environment=environment)
    att.notes[:0] = split_notes
    device = resolve_device(device, environment)
    try:
        diagnose(att, alignment, catalogs[a], catalogs[b], device, entries[a], entries[b])
    except KeyError as err:
        raise UsageError(f"--device: {err.args[0]}") from None
    for v, n in (("a", a), ("b", b)):
        att.variants[v].update({"profile": str(_profile_file(run_dir, measurement, n)),
                                "catalog": str(out / plan["bundles"][n]), "entry": entries[n],
                                "source": sorted(set(events[n]["source"].astype(str)))})
    m = measurement["measurement"]
    att.device, att.command = device, command
    att.measurement = {"file": str(mpath), "protocol": m.get("protocol"), "rounds": m.get("rounds"),
                       "budget_s": m.get("budget_s"), "variants": [a, b]}
    doc = att.to_dict()
    hybrids = [confirm.Hybrid.from_dict(h) for h in plan.get("hybrids", [])]
    unit_calls = {u["unit"]: {"a": confirm.unit_call_times(events[a], u["kernels_a"]),
                              "b": confirm.unit_call_times(events[b], u["kernels_b"])} for u in doc["units"]}
    doc["confirmation"] = confirm.evaluate(measurement["measurement"], a, b, hybrids, doc["units"], threshold,
                                           doc["whole_graph"]["significant"], plan.get("failed", {}),
                                           unit_calls=unit_calls)
    doc["confirmation"]["notes"] = plan.get("notes", [])
    doc["run"] = {"directory": str(run_dir), "verification_ok": measurement.get("verification", {}).get("ok"),
                  "env_warnings": measurement.get("env_warnings", []), "target": plan["target"],
                  "profiles": {n: measurement.get("profiles", {}).get(n) for n in (a, b)}, "notes": run_notes}
    text = summary(att)
    lines = [text, "", "Counterfactual hybrids:"]
    lines += [f"  - {r['sentence']}" for r in doc["confirmation"]["hybrids"]] or ["  (none built)"]
    lines += [f"  note: {n}" for n in doc["confirmation"]["notes"]]
    return doc, "\n".join(lines)


# ---- the command ------------------------------------------------------------------------

def _argv(args: argparse.Namespace, out: Path, from_run: Path | None) -> list[str]:
    """The `rootcause analyze` command line equivalent to args (as attribution.json records it)."""
    argv = ["rootcause", "analyze", args.spec_a, args.spec_b, "--out", str(out)]
    if from_run is not None:
        argv += ["--from-run", str(from_run)]
    else:
        argv += ["--target", str(args.target or "auto"), "--budget-s", f"{args.budget_s:g}",
                 "--profile-calls", str(args.profile_calls)]
        argv += ["--no-confirm"] if args.no_confirm else ["--hybrids", str(args.hybrids)]
    if args.threshold != confirm.THRESHOLD:
        argv += ["--threshold", f"{args.threshold:g}"]
    if args.device:
        argv += ["--device", args.device]
    return argv


def run(args: argparse.Namespace) -> int:
    if args.budget_s <= 0:
        raise UsageError(f"--budget-s: must be > 0, got {args.budget_s:g}")
    if args.hybrids < 0:
        raise UsageError(f"--hybrids: must be >= 0, got {args.hybrids}")
    if args.bundle_only and args.from_run:
        raise UsageError("--bundle-only and --from-run: choose one (build here, or analyze a run made elsewhere)")
    spec_a, spec_b = spec_mod.load(args.spec_a), spec_mod.load(args.spec_b)
    if spec_a.name == spec_b.name:
        raise UsageError(f"{args.spec_b}: variant name '{spec_b.name}' is the same as A's; each needs its own name")
    out: Path = args.out or Path("reports") / f"{_safe(spec_a.name)}_vs_{_safe(spec_b.name)}"
    if args.from_run:
        plan = read_plan(out)
        if (plan["a"], plan["b"]) != (spec_a.name, spec_b.name):
            raise UsageError(f"{out / 'plan.json'}: built for {plan['a']} vs {plan['b']}, not "
                             f"{spec_a.name} vs {spec_b.name}")
        run_dir = args.from_run
    else:
        target = resolve_target(args.target, spec_a, args.bundle_only)
        spec_a, spec_b = spec_mod.with_target(spec_a, target), spec_mod.with_target(spec_b, target)
        out.mkdir(parents=True, exist_ok=True)
        plan = build_all(spec_a, spec_b, out, args.no_confirm, args.hybrids)
        if args.bundle_only:
            bundles = " ".join(str(out / plan["bundles"][n]) for n in plan["bundles"] if n not in plan["failed"])
            print(f"built {len(plan['bundles'])} bundle(s) into {out / 'bundles'} for {target}\n"
                  f"next, on the target host:  rootcause run {bundles} --out RUN_DIR --budget-s {args.budget_s:g}\n"
                  f"then here:                 rootcause analyze {args.spec_a} {args.spec_b} --out {out} "
                  f"--from-run RUN_DIR")
            return 0
        run_dir = out / "run"
        run_here(plan, out, run_dir, args.budget_s, args.profile_calls)
    from rootcause.compare import command_line, write_outputs

    doc, text = analyze_run(plan, out, run_dir, args.threshold, args.device, args.profile_calls,
                            command_line(_argv(args, out, run_dir if args.from_run else None)))
    written = write_outputs(doc, out)
    print(text)
    print("\nwrote " + ", ".join(str(p) for p in written))
    progress("done")
    return 0
