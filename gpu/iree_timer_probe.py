"""Why do iree-benchmark-module and the iree.runtime wall clock disagree on einsum-fused-small?

Run on the GPU host (host_run.sh does, when bundles/iree_probe/ is carried):
    python3 gpu/iree_timer_probe.py OUT.json BUNDLE...
Per bundle, seconds per call (minimum of 7 samples of `number` calls, the least disturbed):
- python_sync: the runner's timer (sync ABI: the call returns after its fence.await);
- python_readback: the same, each call's results copied to the host inside the timer;
- python_inputs_<memory type>: inputs placed in other HAL memory types than DEVICE_LOCAL
  (iree-benchmark-module's .npy inputs go through buffer generation, which may pick a mappable
  type), to see whether input placement moves the fused kernel;
- benchmark_<flags>: iree-benchmark-module, default flags and with CUDA HAL flags changed.
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

from rootcause.artifacts.bundle import bundle_inputs, read_bundle
from rootcause.sessions import load_session


def best(sample, repeats: int = 7) -> float:
    return min(sample() for _ in range(repeats))


def wall(function, inputs, number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        function(*inputs)
    return (time.perf_counter() - start) / number


def probe(path: str) -> dict:
    bundle = read_bundle(path)
    device = os.environ.get("PROBE_DEVICE", "cuda")
    session = load_session(bundle, device)
    arrays = bundle_inputs(bundle)
    session.set_inputs(arrays)
    session.call()
    number = 200
    row = {"bundle": bundle.name, "abi": session.abi, "number": number,
           "python_sync": best(session.timer(number)),
           "python_readback": best(session.timer(number, readback=True))}
    rt = session.ireert
    types = {"device_local_host_visible": rt.MemoryType.DEVICE_LOCAL | rt.MemoryType.HOST_VISIBLE,
             "host_local_device_visible": rt.MemoryType.HOST_LOCAL | rt.MemoryType.DEVICE_VISIBLE}
    for name, memory_type in types.items():
        try:
            inputs = [rt.asdevicearray(session.config.device, a, memory_type=memory_type,
                                       allowed_usage=rt.BufferUsage.DEFAULT | rt.BufferUsage.MAPPING)
                      for a in arrays]
            for _ in range(20):
                session.function(*inputs)
            row[f"python_inputs_{name}"] = best(lambda: wall(session.function, inputs, number))
        except Exception as err:  # a memory type the driver refuses is a result too
            row[f"python_inputs_{name}"] = f"{type(err).__name__}: {str(err).splitlines()[0]}"
    flag_sets = {"default": {}, "graphs": {"cuda_use_streams": "false"},
                 "no_async_alloc": {"cuda_async_allocations": "false"}}
    from iree.runtime.benchmark import benchmark_module
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for i, a in enumerate(arrays):
            np.save(Path(tmp) / f"{i}.npy", a)
            files.append(f"@{Path(tmp) / f'{i}.npy'}")
        for name, flags in flag_sets.items():
            try:
                rows = benchmark_module(str(bundle.module_path), session.entry, files, timeout=120, device=session.driver,
                                        benchmark_repetitions=3, benchmark_report_aggregates_only=False, **flags)
                row[f"benchmark_{name}"] = [float(r.report["real_time"]) * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3}[
                    r.report["time_unit"]] for r in rows if r.report.get("run_type") == "iteration"]
            except Exception as err:
                row[f"benchmark_{name}"] = f"{type(err).__name__}: {str(err).strip().splitlines()[-1][:300]}"
    return row


def main() -> int:
    out = [probe(p) for p in sys.argv[2:]]
    with open(sys.argv[1], "w") as file:
        json.dump(out, file, indent=2)
    for row in out:
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
