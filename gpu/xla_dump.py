"""On the GPU host: what XLA compiled there for an XLA bundle, for the catalog the build host could
not make (it has no GPU): the optimized HLO text, and jax's profiler trace of a few calls reduced
to its GPU kernel events (name, the HLO instruction XLA names in args.hlo_op, duration), one JSON
file each in OUT.

    python3 gpu/xla_dump.py BUNDLE OUT [CALLS]
"""
from __future__ import annotations

import gzip
import json
import sys
import tempfile
from pathlib import Path


def main(argv: list[str]) -> int:
    from rootcause.artifacts.bundle import bundle_inputs, read_bundle
    from rootcause.frontends.xla.runtime import XlaSession

    bundle, out = read_bundle(argv[0]), Path(argv[1])
    calls = int(argv[2]) if len(argv) > 2 else 5
    out.mkdir(parents=True, exist_ok=True)
    session = XlaSession(bundle, "cuda")
    (out / f"{bundle.name}.optimized.hlo.txt").write_text(session.compiled.as_text())
    session.set_inputs(bundle_inputs(bundle))
    session.call()
    jax = session.jax
    with tempfile.TemporaryDirectory() as tmp:
        jax.profiler.start_trace(tmp)
        for _ in range(calls):
            session.call()
        jax.profiler.stop_trace()
        trace = json.loads(gzip.decompress(next(Path(tmp).rglob("*.trace.json.gz")).read_bytes()))
    pids = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
            if e.get("ph") == "M" and e.get("name") == "process_name"}
    kernels = [{"name": e["name"], "pid": pids.get(e["pid"]), "ts": e["ts"], "dur": e.get("dur"),
                "args": {k: v for k, v in (e.get("args") or {}).items() if k in ("hlo_op", "hlo_module", "correlation_id", "run_id")}}
               for e in trace["traceEvents"] if e.get("ph") == "X" and "/device:GPU" in str(pids.get(e["pid"], ""))]
    (out / f"{bundle.name}.gpu-kernels.json").write_text(json.dumps({"calls": calls, "jax": jax.__version__,
                                                                     "events": kernels}, indent=0))
    print(f"{bundle.name}: {len(kernels)} GPU events in {calls} calls; HLO {len(session.compiled.as_text())} chars")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
