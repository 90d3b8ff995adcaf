"""Chrome / Perfetto trace JSON (torch.profiler's Kineto traces, JAX, rocprof v1) -> KernelEvents.

The file is {"traceEvents": [...], ...} (Kineto puts schemaVersion, deviceProperties,
distributedInfo, ... first) or a bare list of events. Times are microseconds (floats;
ns = round(us * 1000)).

GPU rows, in file order, with `kind`:
- kernel: 'X' (complete: ts, dur) events or 'B'/'E' pairs on one (pid, tid) whose cat is a
  kernel category ('kernel', as torch.profiler writes), or, with another cat, whose args
  describe a launch ('grid' or 'kernel_details', as JAX writes);
- memcpy / memset: cat 'gpu_memcpy' / 'gpu_memset' (args.bytes is the size).
PyTorch 1.8-1.10 (the Kineto format of 2021) named the categories otherwise: 'Kernel', 'Memcpy',
'Memset', 'Runtime' and 'Operator' (today's cpu_op, ProfilerStep#N among them), and spelled the
GPU rows' External id 'external id'; both spellings are read.
torch.profiler args give grid, block, 'registers per thread', 'shared memory', stream, device,
correlation and 'External id'. The device is args.device, else the event's pid (Kineto's GPU
rows have pid = device). A ROCm kernel may have no grid: grid is NA then.

The CPU op that launched each GPU row (cpu_op column) is the cpu_op event with the row's
External id, else the innermost cpu_op around the runtime call (cuda_runtime / cuda_driver)
with the row's correlation id on that call's thread. The row's module_path is the chain of
nn.Module spans (python_function events named 'nn.Module: <Class>_<n>', which torch.profiler
writes with with_stack or with_modules) around that runtime call on its thread, outermost first
(parsers/chrome_host.py; a trace's numbers are checked in parsers/chrome_values.py). Host events
are never rows; steps() gives the ProfilerStep#N spans and read_trace() the deviceProperties GPU names.

Decoding: msgspec reads the document with traceEvents left raw (validating its syntax), then
decodes the events (parsers.jsonstream.view_batches: at once, or in chunks when large) into a
Struct naming only the fields used.
"""
from __future__ import annotations

import os
import re
from itertools import chain
from operator import attrgetter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from parsers import chrome_host, chrome_values
from parsers.base import ParseError
from parsers.events import check_intervals, frame, int_column, str_column
from parsers.jsonstream import view_batches

if TYPE_CHECKING:
    import pandas as pd

SOURCE = "chrome"
KERNEL_CATS = {"kernel", "gpu_kernel", "kernel_dispatch"}
GPU_KINDS = {**{c: "kernel" for c in KERNEL_CATS}, "gpu_memcpy": "memcpy", "gpu_memset": "memset",
             "memcpy": "memcpy", "memset": "memset"}  # compared lower-cased: 2021's 'Memcpy' and 'Memset'
CPU_OP_CATS = {"cpu_op", "operator"}  # 'Operator': PyTorch 1.8-1.10's name for cpu_op
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime"}
HOST_CATS = {"cuda_runtime", "cuda_driver", "cpu_op", "user_annotation", "python_function", "runtime",
             "ac2g", "overhead", "gpu_user_annotation", "trace"}
STEP_CATS = {"user_annotation", "cpu_op", "gpu_user_annotation", "Operator"}
STEP_PREFIX = "ProfilerStep#"
# Where a trace has no ProfilerStep (torch.autograd.profiler, a profile without a schedule), the
# data loader's fetch that opens each iteration of a training loop marks the steps instead.
LOADER_PREFIX = "enumerate(DataLoader)#"
# Top-level keys of trace files (Kineto, Chrome, Perfetto): one as the first key identifies the
# format, however long the header before "traceEvents" is.
TOP_KEYS = {"traceEvents", "schemaVersion", "deviceProperties", "distributedInfo", "displayTimeUnit",
            "traceName", "otherData", "metadata", "systemTraceEvents", "baseTimeNanoseconds",
            "record_shapes", "trace_id", "cupti_version", "cuda_runtime_version", "with_stack"}
STEP_COLUMNS = {
    "step": "N of ProfilerStep#N, or the iteration's number (int64)",
    "name": "the annotation's name",
    "start_ns": "start, ns on the trace's clock (int64)",
    "end_ns": "end, ns (int64)",
    "duration_ns": "end_ns - start_ns (int64)",
    "cat": "user_annotation / cpu_op (host side) or gpu_user_annotation (the GPU's span of it); 'iteration' for "
           "a step from one data-loader fetch to the next (a trace with no ProfilerStep)",
    "pid": "process (host) or device (GPU span) id",
    "tid": "thread or stream id",
}
HOST_COLUMNS = {
    "name": "the op, annotation or runtime call's name",
    "start_ns": "start, ns on the trace's clock (int64)",
    "end_ns": "end, ns (int64)",
    "duration_ns": "end_ns - start_ns, inclusive of what it encloses (int64)",
    "cat": "cpu_op / Operator, user_annotation, or the runtime category of a synchronizing call or a graph "
           "launch (cudaGraphLaunch, hipGraphLaunch)",
    "pid": "process id, as text",
    "tid": "thread id, as text",
}
_FIRST_KEY = re.compile(rb'^\s*\{\s*"([A-Za-z_]{1,64})"\s*:')


@dataclass
class ChromeTrace:
    """events: KernelEvents (kernel, memcpy and memset rows); steps: STEP_COLUMNS;
    devices: deviceProperties id -> GPU name; rank: distributedInfo.rank (None when absent)."""

    events: "pd.DataFrame"
    steps: "pd.DataFrame"
    devices: dict[int, str] = field(default_factory=dict)
    rank: int | None = None
    host: "pd.DataFrame | None" = None  # HOST_COLUMNS: cpu ops, user annotations and synchronizing calls


def matches(data: bytes) -> bool:
    head = data.lstrip()
    if head[:1] == b"[":
        return b'"ph"' in head[:4096] and b'"ts"' in head[:4096]
    if head[:1] != b"{":
        return False
    first = _FIRST_KEY.match(head)
    return (first is not None and first.group(1).decode() in TOP_KEYS) or b'"traceEvents"' in head


def events(data: bytes, file: str = "<bytes>") -> "pd.DataFrame":
    return read_trace(data, file).events


def read_path(path: str | os.PathLike) -> "pd.DataFrame":
    return read_trace_path(path).events


def steps(data: bytes, file: str = "<bytes>") -> "pd.DataFrame":
    """The ProfilerStep#N spans of a trace (STEP_COLUMNS), in file order; without any, the iterations
    between consecutive data-loader fetches of one thread, when there are at least three fetches."""
    return read_trace(data, file).steps


def read_trace_path(path: str | os.PathLike) -> ChromeTrace:
    from parsers.compression import decompress

    with open(path, "rb") as f:
        return read_trace(decompress(f.read(), str(path)), str(path))


# ---- decoding ------------------------------------------------------------------------------

_Args = msgspec.defstruct("_Args", [
    ("grid", Any, None), ("block", Any, None),
    ("registers", Any, msgspec.field(default=None, name="registers per thread")),
    ("shared", Any, msgspec.field(default=None, name="shared memory")),
    ("stream", Any, None), ("device", Any, None), ("correlation", Any, None),
    ("external_id", Any, msgspec.field(default=None, name="External id")),
    ("external_id_2021", Any, msgspec.field(default=None, name="external id")),  # GPU rows of 2021 traces
    ("bytes", Any, None), ("kernel_details", Any, None),
], gc=False)
_Event = msgspec.defstruct("_Event", [
    ("ph", str, ""), ("cat", str, ""), ("name", Any, None), ("pid", Any, None), ("tid", Any, None),
    ("ts", Any, None), ("dur", Any, None), ("args", _Args | None, None),
], gc=False)
_Document = msgspec.defstruct("_Document", [
    ("traceEvents", msgspec.Raw, msgspec.Raw(b"")), ("deviceProperties", Any, None), ("distributedInfo", Any, None),
])


def read_trace(data: bytes, file: str = "<bytes>") -> ChromeTrace:
    """Rows, steps and devices of one trace document (uncompressed bytes)."""
    devices, rank, raw = _document(data, file)
    acc = _Accumulator()
    _, batches = view_batches(raw, file, _Event)
    try:
        for numbers, recs in batches:
            acc.add(numbers, recs, file)
    except ParseError as err:  # the events are a document's field: say so
        raise ParseError(err.file, f"traceEvents {err.where}", err.what) from None
    acc.finish(file)
    return ChromeTrace(acc.table(file), acc.step_table(), devices, rank, acc.host_table())


def _document(data: bytes, file: str) -> tuple[dict[int, str], int | None, memoryview]:
    """(GPU names, rank, the raw traceEvents array) of a document or bare event list."""
    head = data[:64].lstrip()
    if head[:1] == b"[":
        try:
            msgspec.json.decode(data, type=msgspec.Raw)  # syntax only
        except (msgspec.DecodeError, RecursionError) as err:
            raise _json_error(data, err, file) from None
        return {}, None, memoryview(data)
    try:
        doc = msgspec.json.decode(data, type=_Document)
    except msgspec.ValidationError as err:
        raise ParseError(file, _place(err), f"not a trace document: {_message(err)}") from None
    except (msgspec.DecodeError, RecursionError) as err:
        raise _json_error(data, err, file) from None
    if not len(memoryview(doc.traceEvents)):
        raise ParseError(file, "traceEvents", "no \"traceEvents\" list in the document")
    raw = memoryview(doc.traceEvents)
    if raw[:1] != b"[":
        raise ParseError(file, "traceEvents", "expected a list of trace events")
    return _devices(doc.deviceProperties), _rank(doc.distributedInfo), raw


def _json_error(data: bytes, err: Exception, file: str) -> ParseError:
    text = str(err)
    m = re.search(r"\(byte (\d+)\)", text)
    if not m and "truncated" not in text:
        return ParseError(file, "byte 0", f"bad JSON: {text or 'nested too deeply'}")
    at = int(m.group(1)) if m else len(data)
    line = data.count(b"\n", 0, at) + 1
    col = at - (data.rfind(b"\n", 0, at) + 1) + 1
    return ParseError(file, f"line {line}, column {col}", f"bad JSON: {text.split(' (byte')[0]}")


def _place(err: msgspec.ValidationError) -> str:
    m = re.search(r"at `\$(.*)`", str(err))
    return m.group(1).lstrip(".") if m else "document"


def _message(err: msgspec.ValidationError) -> str:
    return str(err).split(" - at ")[0]


def _devices(props: Any) -> dict[int, str]:
    """deviceProperties: [{"id": 0, "name": "NVIDIA H200", ...}, ...] -> {0: "NVIDIA H200"};
    entries without an integer id and a string name are left out."""
    out: dict[int, str] = {}
    for p in props if isinstance(props, list) else ():
        if isinstance(p, dict) and type(p.get("id")) is int and isinstance(p.get("name"), str):
            out[p["id"]] = p["name"]
    return out


def _rank(info: Any) -> int | None:
    rank = info.get("rank") if isinstance(info, dict) else None
    return rank if type(rank) is int else None


class _Accumulator:
    """What the chunks leave: GPU rows, cpu ops and runtime calls for the launch linkage, steps.

    Events are sorted by the role of their cat once per distinct cat in a chunk (a trace has
    a few dozen cats and a million events), not event by event."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, str, Any, Any, Any]] = []  # (index, kind, event, ts, dur)
        self.open_b: dict[tuple, list[tuple[int, Any, str | None]]] = {}
        self.ops: list[Any] = []  # cpu_op events
        self.calls: list[Any] = []  # runtime calls (cuda_runtime, cuda_driver)
        self.annotations: list[Any] = []  # user_annotation events (record_function, ProfilerStep#N)
        self.modules: list[Any] = []  # python_function events of nn.Module forwards ('nn.Module: X_n')
        self.step_rows: list[tuple[int, Any]] = []
        self.loader_rows: list[Any] = []  # data-loader fetches: steps of a trace without ProfilerStep

    def add(self, numbers, recs, file: str) -> None:
        phs = list(map(_PH, recs))
        seen = set(phs)
        if "B" in seen or "E" in seen:  # 'B'/'E' pairs (rare): one by one, in order
            self._add_slow(numbers, recs, phs, file)
            return
        if seen != {"X"}:  # metadata, flow, instant and counter events are not spans
            keep = [k for k, ph in enumerate(phs) if ph == "X"]
            numbers, recs = [numbers[k] for k in keep], [recs[k] for k in keep]
        by_cat: dict[str, list[int]] = {}
        for k, cat in enumerate(map(_CAT, recs)):
            by_cat.setdefault(cat, []).append(k)
        for cat, ks in by_cat.items():
            role = _role(cat)
            if role in _KIND_OF_ROLE:
                evs = [recs[k] for k in ks]
                self.rows.extend(zip([numbers[k] for k in ks], [role] * len(ks), evs, map(_TS, evs), map(_DUR, evs)))
            elif role == "maybe":  # an unknown cat: a kernel if its args describe a launch
                for k in ks:
                    if _launch_args(recs[k].args):
                        self.rows.append((numbers[k], "kernel", recs[k], recs[k].ts, recs[k].dur))
            elif role == "cpu_op":
                self.ops.extend(recs[k] for k in ks)
            elif role == "runtime":
                self.calls.extend(recs[k] for k in ks)
            elif cat.lower() == "user_annotation":
                self.annotations.extend(recs[k] for k in ks)
            elif cat == "python_function":
                self.modules.extend(recs[k] for k in ks if type(recs[k].name) is str
                                    and recs[k].name.startswith(chrome_host.MODULE_PREFIX))
            if cat in STEP_CATS:
                self.step_rows.extend((numbers[k], recs[k]) for k in ks if _is_step(recs[k].name))
                self.loader_rows.extend(recs[k] for k in ks if _is_loader_fetch(recs[k].name))

    def _add_slow(self, numbers, recs, phs, file: str) -> None:
        for i, ev, ph in zip(numbers, recs, phs):
            if ph == "X":
                self.add([i], [ev], file)
            elif ph == "B":  # every 'B' is stacked (B/E nest per thread), GPU rows are flagged
                self.open_b.setdefault(_thread(ev, file, i), []).append((i, ev, _kind(ev)))
            elif ph == "E":
                stack = self.open_b.get(_thread(ev, file, i))
                if not stack:
                    raise ParseError(file, f"event {i}", "'E' event without a matching 'B'")
                j, begin, kind = stack.pop()
                if kind is not None:
                    self.rows.append((j, kind, begin, begin.ts, chrome_values.minus(ev.ts, begin.ts, file, i)))

    def finish(self, file: str) -> None:
        for stack in self.open_b.values():
            if any(k is not None for _, _, k in stack):
                raise ParseError(file, f"event {stack[-1][0]}", "'B' event never closed by an 'E'")
        self.rows.sort(key=lambda r: r[0])

    def host_table(self) -> "pd.DataFrame":
        """HOST_COLUMNS of the host's spans: cpu ops, user annotations, the runtime calls that wait
        for the GPU (their names say Synchronize) and graph launches, with finite times."""
        import pandas as pd

        kept = [ev for ev in chain(self.ops, self.annotations,
                                   (c for c in self.calls if _is_sync(c.name) or _is_graph_launch(c.name)))
                if type(ev.name) is str and chrome_values.finite(ev.ts) and chrome_values.finite(ev.dur) and ev.dur >= 0]
        start = _checked_ns(kept, "ts")
        end = start + _checked_ns(kept, "dur")
        return pd.DataFrame({
            "name": [ev.name for ev in kept], "start_ns": start, "end_ns": end, "duration_ns": end - start,
            "cat": [ev.cat for ev in kept], "pid": [str(ev.pid) for ev in kept], "tid": [str(ev.tid) for ev in kept],
        }, columns=list(HOST_COLUMNS))

    def table(self, file: str) -> "pd.DataFrame":
        import numpy as np

        rows = self.rows
        labels = [r[0] for r in rows]
        args = [r[2].args or _NO_ARGS for r in rows]
        start = chrome_values.ns_column([r[3] for r in rows], labels, file, "ts")
        out: dict[str, Any] = {
            "kernel": str_column([r[2].name for r in rows], labels, "event", file, "name"),
            "start_ns": start,
        }
        dur = chrome_values.ns_column([r[4] for r in rows], labels, file, "dur")
        with np.errstate(over="ignore"):
            end = start + dur
        wrapped = (dur > 0) & (end < start)
        if wrapped.any():
            i = int(np.flatnonzero(wrapped)[0])
            raise ParseError(file, f"event {labels[i]}", "column 'dur': ts + dur is beyond the int64 ns range")
        out["end_ns"] = end
        for prefix, key in (("grid", "grid"), ("block", "block")):
            triples = chrome_values.triples(list(map(attrgetter(key), args)), labels, file, key)
            for n, axis in enumerate("xyz"):
                out[f"{prefix}_{axis}"] = int_column(triples[n], labels, "event", file, f"args.{key}")
        for col, key, name in (("registers", "registers", "registers per thread"), ("shared_bytes", "shared", "shared memory"),
                               ("stream", "stream", "stream"), ("correlation_id", "correlation", "correlation"),
                               ("bytes", "bytes", "bytes")):
            out[col] = int_column(list(map(attrgetter(key), args)), labels, "event", file, f"args.{name}")
        external = [a.external_id if a.external_id is not None else a.external_id_2021 for a in args]
        out["external_id"] = int_column(external, labels, "event", file, "args.External id")
        device = [a.device if a.device is not None else chrome_values.int_or_none(r[2].pid) for a, r in zip(args, rows)]
        out["device"] = int_column(device, labels, "event", file, "args.device")
        out["kind"] = [r[1] for r in rows]
        out["cpu_op"] = chrome_host.launching_ops(self.ops, self.calls, out["external_id"], out["correlation_id"])
        out["module_path"] = chrome_host.module_paths(self.modules, self.calls, out["correlation_id"])
        return check_intervals(frame(out, SOURCE), file, "event", labels)

    def step_table(self) -> "pd.DataFrame":
        import numpy as np
        import pandas as pd

        kept = []
        for i, ev in self.step_rows:
            n = ev.name[len(STEP_PREFIX):]
            if n.isdigit() and len(n) < 18 and chrome_values.finite(ev.ts) and chrome_values.finite(ev.dur) and ev.dur >= 0:
                kept.append((int(n), ev))
        if not kept:
            return self._iterations()
        spans = [ev for _, ev in kept]
        start = _checked_ns(spans, "ts")
        end = start + _checked_ns(spans, "dur")
        return pd.DataFrame({
            "step": np.array([n for n, _ in kept], dtype=np.int64), "name": [ev.name for _, ev in kept],
            "start_ns": start, "end_ns": end, "duration_ns": end - start, "cat": [ev.cat for _, ev in kept],
            "pid": pd.array([chrome_values.int_or_none(ev.pid) for _, ev in kept], dtype="Int64"),
            "tid": pd.array([chrome_values.int_or_none(ev.tid) for _, ev in kept], dtype="Int64"),
        }, columns=list(STEP_COLUMNS))

    def _iterations(self) -> "pd.DataFrame":
        """Steps from one data-loader fetch to the next on the thread with the most fetches (the
        training loop's): N fetches give N - 1 steps; the last fetch's iteration has no end."""
        import numpy as np
        import pandas as pd

        by_thread: dict[tuple, list[Any]] = {}
        for ev in self.loader_rows:
            if chrome_values.finite(ev.ts):
                by_thread.setdefault((str(ev.pid), str(ev.tid)), []).append(ev)
        fetches = max(by_thread.values(), key=len, default=[])
        if len(fetches) < 3:
            return pd.DataFrame(columns=list(STEP_COLUMNS))
        fetches = sorted(fetches, key=lambda ev: ev.ts)
        start = _checked_ns(fetches, "ts")
        n = len(fetches) - 1
        return pd.DataFrame({
            "step": np.arange(n, dtype=np.int64), "name": [ev.name for ev in fetches[:n]],
            "start_ns": start[:n], "end_ns": start[1:], "duration_ns": start[1:] - start[:n], "cat": ["iteration"] * n,
            "pid": pd.array([chrome_values.int_or_none(ev.pid) for ev in fetches[:n]], dtype="Int64"),
            "tid": pd.array([chrome_values.int_or_none(ev.tid) for ev in fetches[:n]], dtype="Int64"),
        }, columns=list(STEP_COLUMNS))


_NO_ARGS = _Args()
_PH, _CAT, _TS, _DUR = attrgetter("ph"), attrgetter("cat"), attrgetter("ts"), attrgetter("dur")


def _checked_ns(events: list, key: str) -> Any:
    """int64 ns of the events' time field key ("ts" or "dur"), which the caller has checked finite
    (chrome_values.finite)."""
    values = [getattr(ev, key) for ev in events]
    return chrome_values.ns_column(values, list(range(len(values))), "", key)


_KIND_OF_ROLE = {"kernel", "memcpy", "memset"}


def _role(cat: str) -> str:
    """kernel / memcpy / memset (GPU rows), cpu_op, runtime, host, or maybe (a kernel when its
    args describe a launch, as JAX writes)."""
    low = cat.lower()
    if low in GPU_KINDS:
        return GPU_KINDS[low]
    if low in CPU_OP_CATS:
        return "cpu_op"
    if low in RUNTIME_CATS:
        return "runtime"
    return "host" if low in HOST_CATS else "maybe"


def _kind(ev: Any) -> str | None:
    role = _role(ev.cat)
    if role in _KIND_OF_ROLE:
        return role
    return "kernel" if role == "maybe" and _launch_args(ev.args) else None


def _launch_args(args: Any) -> bool:
    return args is not None and (args.grid is not None or args.kernel_details is not None)


def _is_step(name: Any) -> bool:
    return type(name) is str and name.startswith(STEP_PREFIX)


def _is_sync(name: Any) -> bool:
    return type(name) is str and "Synchronize" in name


def _is_graph_launch(name: Any) -> bool:
    return type(name) is str and "GraphLaunch" in name


def _is_loader_fetch(name: Any) -> bool:
    return type(name) is str and name.startswith(LOADER_PREFIX)


def _thread(ev: Any, file: str, index: int) -> tuple:
    key = (ev.pid, ev.tid)
    try:
        hash(key)
    except TypeError:
        raise ParseError(file, f"event {index}", f"pid/tid: expected numbers or strings, got {key!r}") from None
    return key
