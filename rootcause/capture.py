"""Profile bundles in a process of their own: CUPTI activity records, or a run under ncu.

Profiles run apart from the timing run (a profiler perturbs timing). `rootcause run` starts this
module as a child:

    python -m rootcause.capture cupti BUNDLE [BUNDLE ...] --result R.json --out-dir DIR [--calls N] [--warmup N]
    ncu --csv --page raw --profile-from-start off ... python -m rootcause.capture ncu BUNDLE --result R.json

cupti mode profiles its bundles one after another (the runtime imported once; each bundle
loaded, warmed, profiled and released before the next) and writes each one's kernel activity
records (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) of the profiled calls as DIR/<variant>.cupti.json,
a JSON list of every field cupti-python exposes, as parsers/cupti_json.py reads. ncu mode
profiles one bundle and brackets its profiled calls with cuProfilerStart/Stop, so that ncu
(started with --profile-from-start off) sees them and not the warm-up.
The child prints nothing on stdout (ncu's CSV goes there); its summary, or its typed failure,
is the envelope of the child protocol (rootcause.child) in the --result file.
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import sys
import time
from pathlib import Path
from typing import Any, Callable

from rootcause import child
from rootcause.artifacts.bundle import bundle_inputs, read_bundle
from rootcause.errors import ToolFailed
from rootcause.fileio import write_json
from rootcause.host_state import sm_clock_reader
from rootcause.sessions import load_session


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


def record_dict(activity: Any) -> dict[str, Any]:
    """Every public, non-callable attribute of a cupti-python activity record."""
    out = {}
    for name in dir(activity):
        if name.startswith("_"):
            continue
        try:
            value = getattr(activity, name)
        except Exception:  # some union members raise for records of another layout
            continue
        if not callable(value):
            out[name] = _plain(value)
    return out


# An SM clock within 5% of its maximum has finished its climb from idle (345 MHz on the H200).
FULL_CLOCK = 0.95


def _clock(session) -> Callable[[], tuple[int, int]] | None:
    """The SM clock reader of the GPU a session runs on (sessions run on CUDA device 0), or None."""
    return sm_clock_reader(0) if str(getattr(session, "device", "")).startswith("cuda") else None


def _warm(session, calls: int, seconds: float = 1.0,
          clock: Callable[[], tuple[int, int]] | None = None) -> dict[str, Any]:
    """At least `calls` calls (module load, lazy kernel loading), then more until the GPU's SM
    clock (clock: (MHz, maximum MHz)) reads within 5% of its maximum or `seconds` have passed:
    the climb from idle clocks stays out of the profiled calls. Where no clock can be read (no
    NVML, not a CUDA device) or a power cap holds it lower, the whole `seconds`. What it did:
    its calls, its seconds, the last clock read."""
    start = time.monotonic()
    done, mhz = 0, None
    while True:
        session.call()
        done += 1
        if done < calls:
            continue
        if time.monotonic() - start >= seconds:
            break
        if clock is not None:
            mhz, top = clock()
            if mhz >= FULL_CLOCK * top:
                break
    return {"warmup": done, "warmup_s": round(time.monotonic() - start, 3), "sm_clock_mhz": mhz}


def cupti_file(out_dir: Path, name: str) -> Path:
    """Where a variant's CUPTI records go."""
    return Path(out_dir) / f"{name}.cupti.json"


def cupti_capture(bundle_dirs: list[str], out_dir: Path, calls: int, warmup: int,
                  device: str | None) -> dict[str, Any]:
    """Each bundle's profiled calls in turn, in this process: {"variants": {name: summary}}."""
    try:
        from cupti import cupti
    except ImportError:
        raise ToolFailed("cupti-python is not installed in this environment (pip install cupti-python)") from None

    records: list[dict[str, Any]] = []

    def requested():
        return 8 * 1024 * 1024, 0

    def completed(activities):
        records.extend(record_dict(a) for a in activities)

    cupti.activity_register_callbacks(requested, completed)
    summaries: dict[str, dict[str, Any]] = {}
    clock = None  # the GPU's, found with the first session (all run on one device)
    for i, bundle_dir in enumerate(bundle_dirs):
        records.clear()
        bundle = read_bundle(bundle_dir)
        session = load_session(bundle, device)
        session.set_inputs(bundle_inputs(bundle))
        if i == 0:
            clock = _clock(session)
        warm = _warm(session, warmup, clock=clock)
        call_starts, end = _profiled_calls(cupti, session, calls)
        del session
        gc.collect()  # the session's device memory goes before the next bundle loads
        kernels = sorted((r for r in records if r.get("kind") in (3, 10) and r.get("start", 0) >= call_starts[0]),
                         key=lambda r: r["start"])
        out = write_json(cupti_file(out_dir, bundle.name), kernels)
        summaries[bundle.name] = {"variant": bundle.name, "file": out.name, "calls": calls, **warm,
                                  "records": len(kernels), "call_starts_ns": call_starts, "end_ns": end}
    return {"variants": summaries}


def _profiled_calls(cupti: Any, session: Any, calls: int) -> tuple[list[int], int]:
    """The calls with kernel activity recorded, flushed: each call's start and the end (CUPTI ns)."""
    cupti.activity_enable(cupti.ActivityKind.CONCURRENT_KERNEL)
    call_starts = []
    for _ in range(calls):
        call_starts.append(cupti.get_timestamp())
        session.call()
    end = cupti.get_timestamp()
    cupti.activity_flush_all(1)
    cupti.activity_disable(cupti.ActivityKind.CONCURRENT_KERNEL)
    return call_starts, end


def _profiler_api():
    """cuProfilerStart/Stop from the driver: ncu's --profile-from-start off waits for them."""
    cuda = ctypes.CDLL("libcuda.so.1")
    return cuda.cuProfilerStart, cuda.cuProfilerStop


def ncu_target(bundle_dir: str, calls: int, warmup: int, device: str | None) -> dict[str, Any]:
    bundle = read_bundle(bundle_dir)
    session = load_session(bundle, device)
    session.set_inputs(bundle_inputs(bundle))
    warm = _warm(session, warmup, clock=_clock(session))
    start, stop = _profiler_api()
    start()
    for _ in range(calls):
        session.call()
    stop()
    return {"variant": bundle.name, "calls": calls, **warm}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="profile bundles (child of `rootcause run`)")
    parser.add_argument("mode", choices=("cupti", "ncu"))
    parser.add_argument("bundles", nargs="+", help="cupti: one or more; ncu: one")
    parser.add_argument("--result", type=Path, required=True, help="the envelope file (rootcause.child)")
    parser.add_argument("--out-dir", type=Path, help="cupti: where each bundle's records go")
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--device")
    args = parser.parse_args(argv)
    if args.mode == "ncu" and len(args.bundles) != 1:
        parser.error("ncu mode profiles one bundle (its CSV names no variant)")
    if args.mode == "cupti" and args.out_dir is None:
        parser.error("cupti mode needs --out-dir")

    def work() -> dict[str, Any]:
        if args.mode == "cupti":
            return cupti_capture(args.bundles, args.out_dir, args.calls, args.warmup, args.device)
        return ncu_target(args.bundles[0], args.calls, args.warmup, args.device)

    return child.serve(work, args.result)


if __name__ == "__main__":
    sys.exit(main())
