"""XLA's own per-thunk timing on the CPU: jax's profiler traces every thunk XLA's CPU runtime runs
(an event named after its HLO instruction, with args hlo_op and hlo_module). The trace's thunk
events are kept, one call after another, as a Chrome trace of kernel events (`cat` kernel,
args.call the call's ordinal), the form every CPU profile takes here."""
from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path
from typing import Any

from rootcause.artifacts.bundle import bundle_inputs, read_bundle
from rootcause.errors import ToolFailed
from rootcause.fileio import json_text, write_atomic
from rootcause.frontends.base import profile_name
from rootcause.frontends.xla.runtime import XlaSession


def capture(bundle_dir: Path, out_dir: Path, calls: int) -> dict[str, Any]:
    bundle = read_bundle(bundle_dir)
    out_file = Path(out_dir) / profile_name(bundle.name, ".xla-thunks.json")
    session = XlaSession(bundle, "cpu")
    session.set_inputs(bundle_inputs(bundle))
    session.call()  # compiled and warm before the trace
    jax = session.jax
    with tempfile.TemporaryDirectory() as tmp:
        jax.profiler.start_trace(tmp)
        try:
            for _ in range(calls):
                session.call()
        finally:
            jax.profiler.stop_trace()
        traces = sorted(Path(tmp).rglob("*.trace.json.gz"))
        if not traces:
            raise ToolFailed(f"{bundle_dir}: jax's profiler wrote no trace")
        doc = json.loads(gzip.decompress(traces[0].read_bytes()))
    events = thunk_events(doc.get("traceEvents", []), {k["name"] for k in bundle.manifest.get("kernels", [])})
    if not events:
        raise ToolFailed(f"{bundle_dir}: jax's profiler recorded no XLA thunk of this module")
    write_atomic(out_file, json_text({"traceEvents": events, "displayTimeUnit": "ns"}))
    return {"profiler": "jax-profiler (XLA CPU thunks)", "ok": True, "file": out_file.name, "calls": calls}


def thunk_events(trace: list[dict[str, Any]], kernels: set[str]) -> list[dict[str, Any]]:
    """The thunk events of the traced calls as kernel events, numbered by call: a call is one
    XLA run (args.run_id), in the order the runs started."""
    thunks = [e for e in trace if e.get("ph") == "X" and isinstance(e.get("args"), dict)
              and e["args"].get("hlo_op") and (not kernels or e["args"]["hlo_op"] in kernels)]
    runs: dict[str, int] = {}
    out = []
    for e in sorted(thunks, key=lambda e: float(e["ts"])):
        call = runs.setdefault(str(e["args"].get("run_id")), len(runs))
        out.append({"name": e["args"]["hlo_op"], "ph": "X", "cat": "kernel", "pid": 0, "tid": 0,
                    "ts": float(e["ts"]), "dur": float(e.get("dur", 0.0)), "args": {"call": call}})
    return out
