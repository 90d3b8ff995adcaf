"""Chrome / Perfetto trace JSON (torch.profiler, JAX, rocprof v1) -> KernelEvents.

The file is {"traceEvents": [...], ...} or a bare list of events. Times are microseconds
(floats; ns = round(us * 1000)). Kernel launches are 'X' (complete: ts, dur) events or 'B'/'E'
pairs on one (pid, tid) whose cat is a kernel category ('kernel', as torch.profiler writes),
or, with another cat, whose args describe a launch ('grid' or 'kernel_details', as JAX
writes). Host-side events ('cuda_runtime', 'cpu_op', ...) are never kernels. torch.profiler
args give grid, block, 'registers per thread', 'shared memory', stream, device, correlation.
"""
from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from parsers.base import ParseError
from parsers.events import check_intervals, frame, int_column, str_column

if TYPE_CHECKING:
    import pandas as pd

SOURCE = "chrome"
KERNEL_CATS = {"kernel", "gpu_kernel", "kernel_dispatch"}
HOST_CATS = {"cuda_runtime", "cuda_driver", "cpu_op", "user_annotation", "python_function", "runtime",
             "gpu_memcpy", "gpu_memset", "ac2g", "overhead"}


def matches(data: bytes) -> bool:
    head = data[:4096].lstrip()
    return head[:1] in (b"{", b"[") and (b'"traceEvents"' in head or (b'"ph"' in head and b'"ts"' in head))


def events(data: bytes, file: str = "<bytes>") -> "pd.DataFrame":
    try:
        doc = json.loads(data)
    except json.JSONDecodeError as err:
        raise ParseError(file, f"line {err.lineno}, column {err.colno}", f"bad JSON: {err.msg}") from None
    except UnicodeDecodeError as err:
        raise ParseError(file, f"byte {err.start}", "not UTF-8") from None
    except RecursionError:
        raise ParseError(file, "traceEvents", "JSON nested too deeply") from None
    trace = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(trace, list):
        raise ParseError(file, "traceEvents", "expected a list of trace events")
    rows: list[tuple[int, dict, Any, Any]] = []  # (event index, event, ts_us, dur_us)
    open_b: dict[tuple, list[tuple[int, dict, bool]]] = {}
    for i, ev in enumerate(trace):
        if not isinstance(ev, dict):
            raise ParseError(file, f"event {i}", f"expected an object, got {type(ev).__name__}")
        ph = ev.get("ph")
        if ph == "X":
            if _is_kernel(ev):
                rows.append((i, ev, ev.get("ts"), ev.get("dur")))
        elif ph == "B":  # every 'B' is stacked (B/E nest per thread), kernels are flagged
            open_b.setdefault((ev.get("pid"), ev.get("tid")), []).append((i, ev, _is_kernel(ev)))
        elif ph == "E":
            stack = open_b.get((ev.get("pid"), ev.get("tid")))
            if not stack:
                raise ParseError(file, f"event {i}", "'E' event without a matching 'B'")
            j, begin, kernel = stack.pop()
            if kernel:
                rows.append((j, begin, begin.get("ts"), _minus(ev.get("ts"), begin.get("ts"), file, i)))
    for stack in open_b.values():
        if any(k for _, _, k in stack):
            raise ParseError(file, f"event {stack[-1][0]}", "'B' event never closed by an 'E'")
    rows.sort(key=lambda r: r[0])
    labels = [r[0] for r in rows]
    ts = [_us_to_ns(r[2], file, r[0], "ts") for r in rows]
    dur = [_us_to_ns(r[3], file, r[0], "dur") for r in rows]
    args = [r[1].get("args") or {} for r in rows]
    out: dict[str, Any] = {
        "kernel": str_column([r[1].get("name") for r in rows], labels, "event", file, "name"),
        "start_ns": int_column(ts, labels, "event", file, "ts", optional=False),
    }
    out["end_ns"] = out["start_ns"] + int_column(dur, labels, "event", file, "dur", optional=False)
    for prefix, key in (("grid", "grid"), ("block", "block")):
        triples = [_triple(a.get(key), file, labels[k], key) for k, a in enumerate(args)]
        for n, axis in enumerate("xyz"):
            out[f"{prefix}_{axis}"] = int_column([t[n] for t in triples], labels, "event", file, f"args.{key}")
    for col, key in (("registers", "registers per thread"), ("shared_bytes", "shared memory"),
                     ("stream", "stream"), ("device", "device"), ("correlation_id", "correlation")):
        out[col] = int_column([a.get(key) for a in args], labels, "event", file, f"args.{key}")
    return check_intervals(frame(out, SOURCE), file, "event", labels)


def _is_kernel(ev: dict) -> bool:
    cat = str(ev.get("cat", "")).lower()
    if cat in KERNEL_CATS:
        return True
    if cat in HOST_CATS:
        return False
    args = ev.get("args")
    return isinstance(args, dict) and ("grid" in args or "kernel_details" in args)


def _us_to_ns(value: Any, file: str, index: int, key: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        what = "missing" if value is None else f"expected a number of microseconds, got {value!r}"
        raise ParseError(file, f"event {index}", f"column {key!r}: {what}")
    ns = value * 1000
    if not math.isfinite(ns) or not -2.0 ** 63 <= ns < 2.0 ** 63:
        raise ParseError(file, f"event {index}", f"column {key!r}: {value!r} microseconds is beyond the int64 ns range")
    return int(round(ns))


def _minus(end: Any, start: Any, file: str, index: int) -> Any:
    if not isinstance(end, (int, float)) or not isinstance(start, (int, float)):
        raise ParseError(file, f"event {index}", "column 'ts': 'B'/'E' pair without numeric ts")
    return end - start


def _triple(value: Any, file: str, index: int, key: str) -> list:
    if value is None:
        return [None, None, None]
    if not isinstance(value, list) or len(value) != 3:
        raise ParseError(file, f"event {index}", f"column 'args.{key}': expected [x, y, z], got {value!r}")
    return value
