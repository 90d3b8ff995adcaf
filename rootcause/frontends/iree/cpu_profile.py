"""IREE local-task host-execution profile: iree-benchmark-module with device profiling, then
`iree-profile dispatch` as JSONL (parsers/iree_profile.py reads it). Both tools ship with
iree-base-runtime."""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any


from rootcause.artifacts.bundle import bundle_inputs, read_bundle
from rootcause.child import tied
from rootcause.errors import UsageError
from rootcause.fileio import write_atomic
from rootcause.frontends.base import profile_name
from rootcause.frontends.iree.runtime import tool_input


def iree_tool(name: str) -> Path:
    import iree.runtime

    tool = Path(iree.runtime.__file__).resolve().parent.parent / "_runtime_libs" / name
    if not tool.is_file():
        found = shutil.which(name)
        if not found:
            raise UsageError(f"{name} not found (iree-base-runtime ships it under iree/_runtime_libs)")
        tool = Path(found)
    return tool


def capture(bundle_dir: Path, out_dir: Path, calls: int) -> dict[str, Any]:
    """Profile `calls` calls of a local-task bundle; write the dispatch JSONL into out_dir as
    <bundle>.iree-dispatch.jsonl."""
    bundle = read_bundle(bundle_dir)
    out_file = Path(out_dir) / profile_name(bundle.name, ".iree-dispatch.jsonl")
    with tempfile.TemporaryDirectory() as tmp:
        inputs = [f"--input={tool_input(array, Path(tmp) / str(i))}" for i, array in enumerate(bundle_inputs(bundle))]
        prof = Path(tmp) / "capture.ireeprof"
        cmd = [str(iree_tool("iree-benchmark-module")), f"--module={bundle.module_path}",
               "--device=local-task", f"--function={bundle.entry}", *inputs,
               f"--benchmark_min_time={calls}x", "--device_profiling_mode=host-execution",
               f"--device_profiling_output={prof}"]
        proc = subprocess.run(cmd, capture_output=True, text=True, **tied())
        if "unsupported profiling mode" in proc.stderr or "device_profiling_output" in proc.stderr:
            from importlib import metadata

            raise UsageError(f"{bundle_dir}: iree-base-runtime {metadata.version('iree-base-runtime')} has no "
                             "host-execution profiler (newer runtimes do); this module needs that runtime, so "
                             "no per-dispatch CPU profile of it can be taken (CUPTI on a GPU profiles any version)")
        if proc.returncode != 0 or not prof.is_file():
            raise UsageError(f"{bundle_dir}: iree-benchmark-module profile failed: "
                             f"{(proc.stderr.strip().splitlines() or ['no output'])[-1]}")
        dump = subprocess.run([str(iree_tool("iree-profile")), "dispatch", "--dispatch_events", "--format=jsonl",
                               str(prof)], capture_output=True, text=True)
        if dump.returncode != 0:
            raise UsageError(f"{prof.name}: iree-profile dispatch failed: "
                             f"{(dump.stderr.strip().splitlines() or ['no output'])[-1]}")
    write_atomic(out_file, dump.stdout)
    # back_to_back: iree-benchmark-module runs the calls one after another with nothing but its own
    # loop between them, so the period from one call's first dispatch to the next's is the call
    return {"profiler": "iree-profile", "ok": True, "file": out_file.name, "calls": calls,
            "mode": "host-execution (local-task)", "back_to_back": True}
