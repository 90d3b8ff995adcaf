"""Per-kernel durations of a TVM Relax bundle on the CPU: its launches replayed one by one.

TVM 0.27's relax VirtualMachine has no `profile=True` (the old profiler executable is gone:
`vm_profiler_load_executable` does not exist in an exported module), but
`VirtualMachine.set_instrument(fn)` calls fn(func, symbol, before_run, ret, *args) around every
Call instruction. Timing kernels inside that hook puts the hook's own cost in them: the VM turns
every argument tensor into a Python object before the after-hook can read the clock, measured
here at 1-3 us per launch (more than the whole delta of a 19- against a 3-launch graph). So one
call is recorded through the hook (each PrimFunc launch: its function and its argument tensors,
VM builtins such as vm.builtin.alloc_tensor left out), and each profiled call replays those
launches in order from Python, the clock read right around each call of the compiled function:
the same kernels on the same buffers in graph order, ~0.2 us of call overhead in each bracket.
The trace's gaps are Python's loop, not the VM's: the residual (VM dispatch, allocation, host)
comes from the measurement, not from the trace.

Each replay follows one call of the graph timed without the hook (`timed_ns`, in the record and
the trace's otherData): the graph's latency in the profile's own session, which the analysis
scales the kernel times by against the run's measurement (attribute's scale_to_whole).

The capture is written as Chrome trace JSON ('X' events, cat 'kernel', ts/dur in us, args.call
= graph call), which parsers/chrome_trace.py reads back and any trace viewer opens.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rootcause.errors import UsageError
from rootcause.fileio import write_json
from rootcause.frontends.base import profile_name
from rootcause.artifacts.bundle import bundle_inputs, read_bundle

SOURCE = "tvm-vm-replay"


def capture(bundle_dir: str | Path, out_dir: str | Path, calls: int = 10, warmup: int = 3) -> dict[str, Any]:
    """Profile `calls` graph calls of a CPU TVM bundle after `warmup` calls; write Chrome trace JSON
    into out_dir as <bundle>.tvm-vm.json."""
    import numpy as np

    from rootcause.frontends.tvm.runtime import import_tvm

    tvm = import_tvm()
    bundle = read_bundle(bundle_dir)
    out = Path(out_dir) / profile_name(bundle.name, ".tvm-vm.json")
    if bundle.frontend != "tvm":
        raise UsageError(f"{bundle.path}: the TVM VM profiler needs a TVM bundle, not {bundle.frontend}")
    dev = tvm.cpu(0)
    try:
        vm = tvm.runtime.vm.VirtualMachine(tvm.runtime.load_module(str(bundle.module_path)), dev)
    except Exception as err:  # TVM raises its own error types from C++
        raise UsageError(f"{bundle.module_path}: TVM cannot load it: {str(err).splitlines()[0]}") from None
    args = [tvm.runtime.tensor(np.ascontiguousarray(a), device=dev) for a in bundle_inputs(bundle)]
    kernels = {k["name"] for k in bundle.manifest.get("kernels", [])}
    launches: list[tuple[str, Any, list[Any]]] = []  # (kernel, its function, its arguments) in launch order
    state = {"record": False, "skipped": 0}

    def instrument(func, symbol, before_run, ret_value, *call_args):
        if state["record"] and before_run:
            name = str(symbol)
            if _is_kernel(name, kernels):
                launches.append((name, func, list(call_args)))
            else:
                state["skipped"] += 1
        return 0

    entry = vm[bundle.entry]
    for _ in range(warmup):
        entry(*args)
    vm.set_instrument(instrument)  # one call records the launches and their argument tensors
    state["record"] = True
    entry(*args)
    vm.set_instrument(None)
    events: list[dict[str, Any]] = []
    timed = []
    for i in range(calls):
        t0 = time.perf_counter_ns()  # a timed call of the graph, then its launches replayed one by one
        entry(*args)
        timed.append(time.perf_counter_ns() - t0)
        for name, func, call_args in launches:
            start = time.perf_counter_ns()
            func(*call_args)
            end = time.perf_counter_ns()
            events.append({"name": name, "ph": "X", "cat": "kernel", "pid": 0, "tid": 0,
                           "ts": start / 1e3, "dur": (end - start) / 1e3, "args": {"call": i}})
    if not events:
        raise UsageError(f"{bundle.path}: the VM instrument saw no kernel calls in a call of {bundle.entry}")
    write_json(out, {"traceEvents": events, "displayTimeUnit": "ns",
                     "otherData": {"source": SOURCE, "variant": bundle.name, "calls": calls,
                                   "warmup": warmup, "clock": "time.perf_counter_ns",
                                   "builtins_skipped": state["skipped"], "timed_ns": timed,
                                   "gaps": "Python's between replayed launches, not the VM's"}})
    return {"profiler": "tvm-vm", "ok": True, "file": Path(out).name, "calls": calls, "warmup": warmup,
            "records": len(events), "timed_ns": timed}


def _is_kernel(name: str, catalog: set[str]) -> bool:
    if catalog:
        return name in catalog
    return not name.startswith("vm.")
