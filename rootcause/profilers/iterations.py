"""A trace's iterations where it has no ProfilerStep, from what the trace itself marks.

In order (the first kind a trace has is taken, each side on its own):
  1. repeated user annotations (record_function / user_annotation spans whose names repeat or are
     numbered: `execute_3`, `MoE[...]`, `## forward ##`), at the outermost level that repeats, or
     the one `--iterations NAME` names;
  2. one CUDA or HIP graph launch per step (cudaGraphLaunch, hipGraphLaunch);
  3. data-loader fetches (parsers.chrome_trace reads those into the steps, cat 'iteration');
  4. optimizer steps (`Optimizer.step#...`, else `Optimizer.zero_grad#...`).
Kinds 1, 2 and 4 are read here from the host table (parsers.chrome_trace.HOST_COLUMNS) and
returned as steps (parsers.chrome_trace.STEP_COLUMNS): an iteration runs from one mark's start
to the next's, so N marks give N - 1 iterations, the host between them included, as the loop
pays it; an annotation that opens each iteration (a forward) marks it as well as one that
encloses it. Only after all four does rootcause look for repeating kernel sequences
(profilers.calls).

The kind is the step table's `cat`: SOURCES gives the whole-graph source (WholeGraph.source) each
stands for; ITERATION_CATS are the kinds that run from one mark to the next. Annotation spans that
hold their iteration's GPU work (a loop body that waits for the GPU inside its record_function)
are steps themselves, as ProfilerStep spans are (SPAN_CAT): the idle time between two requests
an inference engine serves is no iteration's.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from parsers.chrome_trace import LOADER_PREFIX, STEP_COLUMNS, STEP_PREFIX
from rootcause.errors import UsageError

# step table cat -> WholeGraph.source
ITERATION_CATS = {"iteration": "loader-iterations", "annotation": "annotation-iterations",
                  "graph-launch": "graph-launches", "optimizer-step": "optimizer-steps"}
# an annotation whose spans hold their iteration's GPU work (the loop body waits for the GPU inside
# it): the spans themselves are the steps, as ProfilerStep's are
SPAN_CAT = "annotation-span"
SOURCES = {**ITERATION_CATS, SPAN_CAT: "annotation-iterations"}
ENCLOSED_SHARE = 0.8  # of the spans with GPU work, how many must hold all of it
OPTIMIZER_PREFIXES = ("Optimizer.step#", "Optimizer.zero_grad#")
# Annotations that are not iterations whatever their count: the kinds above and collectives
# (`nccl:all_reduce` runs once per bucket, several times an iteration)
_NOT_MARKS = (STEP_PREFIX, LOADER_PREFIX, "Optimizer.", "nccl:", "gloo:")
_NUMBER = re.compile(r"[\s#_:.\-]*\d+$")
_GRAPH_LAUNCH = re.compile(r"^(cuda|hip|cu)GraphLaunch")


def stem(name: str) -> str:
    """An annotation's name without the number that counts its instances ('execute_3' -> 'execute')."""
    return _NUMBER.sub("", name) or name


def _marks_to_steps(starts: np.ndarray, names: list[str], pids: list, tids: list, cat: str) -> pd.DataFrame:
    """N marks (sorted starts) as N - 1 steps, each from one mark's start to the next's."""
    n = len(starts) - 1
    return pd.DataFrame({
        "step": np.arange(n, dtype=np.int64), "name": names[:n], "start_ns": starts[:n], "end_ns": starts[1:],
        "duration_ns": starts[1:] - starts[:n], "cat": [cat] * n,
        "pid": pd.array([_int(p) for p in pids[:n]], dtype="Int64"),
        "tid": pd.array([_int(t) for t in tids[:n]], dtype="Int64"),
    }, columns=list(STEP_COLUMNS))


def _int(value: object) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None


def _empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(STEP_COLUMNS))


def _groups(host: pd.DataFrame) -> dict[tuple[str, str, str], pd.DataFrame]:
    """(stem, pid, tid) -> that thread's user annotations of one stem, in order, where there are
    two or more and none overlaps the next (a mark that repeats in sequence)."""
    ann = host[(host["cat"].str.lower() == "user_annotation")
               & ~host["name"].str.startswith(_NOT_MARKS)]
    out = {}
    for key, rows in ann.assign(stem=ann["name"].map(stem)).groupby(["stem", "pid", "tid"], sort=False):
        rows = rows.sort_values("start_ns", kind="stable")
        if len(rows) >= 2 and (rows["start_ns"].to_numpy()[1:] >= rows["end_ns"].to_numpy()[:-1]).all():
            out[key] = rows
    return out


def _inside(inner: pd.DataFrame, outer: pd.DataFrame) -> bool:
    """Every span of inner lies within one of outer's."""
    starts, ends = outer["start_ns"].to_numpy(), outer["end_ns"].to_numpy()
    idx = np.searchsorted(starts, inner["start_ns"].to_numpy(), side="right") - 1
    ok = idx >= 0
    return bool(ok.all() and (inner["end_ns"].to_numpy() <= ends[np.clip(idx, 0, None)]).all())


def _encloses(rows: pd.DataFrame, events: pd.DataFrame | None) -> bool:
    """Whether the spans hold their iterations' GPU work: of the spans in which GPU rows start,
    ENCLOSED_SHARE or more see the last of them end before the span does."""
    if events is None or events.empty:
        return False
    starts, ends = rows["start_ns"].to_numpy("int64"), rows["end_ns"].to_numpy("int64")
    idx = np.searchsorted(starts, events["start_ns"].to_numpy("int64"), side="right") - 1
    keep = idx >= 0
    last = pd.Series(events["end_ns"].to_numpy("int64")[keep]).groupby(idx[keep]).max()
    if last.empty:
        return False
    return bool((last.to_numpy() <= ends[last.index.to_numpy()]).mean() >= ENCLOSED_SHARE)


def _spans_to_steps(rows: pd.DataFrame) -> pd.DataFrame:
    n = len(rows)
    return pd.DataFrame({
        "step": np.arange(n, dtype=np.int64), "name": list(rows["name"]),
        "start_ns": rows["start_ns"].to_numpy("int64"), "end_ns": rows["end_ns"].to_numpy("int64"),
        "duration_ns": rows["duration_ns"].to_numpy("int64"), "cat": [SPAN_CAT] * n,
        "pid": pd.array([_int(p) for p in rows["pid"]], dtype="Int64"),
        "tid": pd.array([_int(t) for t in rows["tid"]], dtype="Int64"),
    }, columns=list(STEP_COLUMNS))


def annotation_iterations(host: pd.DataFrame | None, name: str | None = None, events: pd.DataFrame | None = None
                          ) -> tuple[pd.DataFrame, list[str]]:
    """(steps, the other candidates' names) from repeated user annotations: the outermost stem
    that repeats (of several, the one whose spans take the most time), or the one `name` names
    (its stem or a full name). Spans that hold their iteration's GPU work (_encloses) are the
    steps themselves; else each step runs from one span's start to the next's. UsageError when
    `name` names none."""
    if host is None or host.empty:
        if name:
            raise UsageError(f"--iterations {name}: the trace has no user annotations")
        return _empty(), []
    groups = _groups(host)
    if name:
        chosen = [k for k, rows in groups.items() if k[0] == name or (rows["name"] == name).any()]
        if not chosen:
            known = ", ".join(sorted({k[0] for k in groups})[:8]) or "none"
            raise UsageError(f"--iterations {name}: no annotation of that name repeats in the trace (those that "
                             f"repeat: {known})")
        outer = chosen
    else:
        outer = [k for k in groups if not any(o != k and _inside(groups[k], groups[o]) for o in groups)]
    if not outer:
        return _empty(), []
    best = max(outer, key=lambda k: (int(groups[k]["duration_ns"].sum()), -int(groups[k]["start_ns"].iloc[0])))
    rows = groups[best]
    others = [k[0] for k in outer if k != best]
    if _encloses(rows, events):
        return _spans_to_steps(rows), others
    steps = _marks_to_steps(rows["start_ns"].to_numpy("int64"), list(rows["name"]), list(rows["pid"]),
                            list(rows["tid"]), "annotation")
    return steps, others


def graph_launch_iterations(host: pd.DataFrame | None) -> pd.DataFrame:
    """Steps from one graph launch to the next (three launches at least), on the thread that
    launches the most graphs."""
    if host is None or host.empty:
        return _empty()
    launches = host[host["name"].str.match(_GRAPH_LAUNCH)]
    if launches.empty:
        return _empty()
    thread = launches.groupby(["pid", "tid"]).size().idxmax()
    rows = launches[(launches["pid"] == thread[0]) & (launches["tid"] == thread[1])].sort_values("start_ns")
    if len(rows) < 3:
        return _empty()
    return _marks_to_steps(rows["start_ns"].to_numpy("int64"), list(rows["name"]), list(rows["pid"]),
                           list(rows["tid"]), "graph-launch")


def optimizer_iterations(host: pd.DataFrame | None) -> pd.DataFrame:
    """Steps from one optimizer step to the next (`Optimizer.step#`, else `Optimizer.zero_grad#`;
    three at least)."""
    if host is None or host.empty:
        return _empty()
    for prefix in OPTIMIZER_PREFIXES:
        rows = host[host["name"].str.startswith(prefix)].sort_values("start_ns")
        if len(rows) >= 3:
            return _marks_to_steps(rows["start_ns"].to_numpy("int64"), list(rows["name"]), list(rows["pid"]),
                                   list(rows["tid"]), "optimizer-step")
    return _empty()


def choose(steps: pd.DataFrame, host: pd.DataFrame | None, name: str | None = None,
           events: pd.DataFrame | None = None) -> tuple[pd.DataFrame, list[str]]:
    """The trace's iterations by the module doc's order, from the parser's steps (ProfilerStep
    spans, else data-loader iterations) and the host table; (steps, other annotation candidates).
    `name` (--iterations) picks an annotation even where ProfilerStep exists."""
    profiler_steps = not steps.empty and (steps.get("cat") != "iteration").any()
    if name:
        return annotation_iterations(host, name, events)
    if profiler_steps:
        return steps, []
    found, others = annotation_iterations(host, None, events)
    if not found.empty:
        return found, others
    graphs = graph_launch_iterations(host)
    if not graphs.empty:
        return graphs, []
    if not steps.empty:
        return steps, []
    return optimizer_iterations(host), []
