"""Split a trace of repeated graph calls into calls, and summarise each call.

A profiled run calls the compiled graph many times, often for several variants in one process
(the H200 CUPTI capture holds 20 calls of FuseOps ON, 3 kernels each, then 20 calls of OFF,
19 kernels each). With neither `calls` nor `kernels_per_call` given, the kernel-name sequence
is cut greedily into *segments*: at each position the period p is chosen whose repetition
covers the most launches (ties: the smallest p), so 'add add add concat ...' inside one OFF call
(period 1, 5) loses to the whole 19-kernel call that repeats 20 times. Each repetition is one
call; a segment is one run of identical calls, i.e. one variant signature. A stretch that does
not repeat becomes a single call of its own segment. Calls are numbered 0..n-1 across the trace.
When that finds only one-launch calls (a graph that launches one kernel many times a call), the
gaps decide: calls are cut where the idle time before a launch is GAP_RATIO times every gap
inside a call, if that gives equal calls of one kernel sequence.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

from rootcause.errors import UsageError

MAX_PERIOD = 4096  # launches per call searched by the automatic split


def split_calls(events: pd.DataFrame, calls: int | None = None,
                kernels_per_call: int | None = None, max_period: int = MAX_PERIOD) -> pd.DataFrame:
    """Events sorted by start with 'call', 'segment' and 'signature' filled.

    calls / kernels_per_call force equal calls (the launch count must divide evenly);
    otherwise periods are detected as the module docstring says.
    """
    ev = events.sort_values("start_ns", kind="stable").reset_index(drop=True)
    n = len(ev)
    if calls is not None or kernels_per_call is not None:
        k = _fixed_period(n, calls, kernels_per_call)
        bounds = [(i, k, 1) for i in range(0, n, k)] if n else []
        bounds = _merge_runs(ev, bounds)
    else:
        codes = pd.factorize(ev["kernel"])[0]
        bounds = _auto_segments(codes, max_period)
        if all(period == 1 for _, period, _ in bounds):
            # every 'call' one launch: a graph launching one kernel many times per call looks like
            # that by names alone; the host gaps between calls (far longer than inside one) tell
            bounds = _gap_calls(ev) or bounds
    call = np.full(n, -1, dtype=np.int64)
    segment = np.full(n, -1, dtype=np.int64)
    signature = np.empty(n, dtype=object)
    next_call = 0
    for seg, (start, period, repeats) in enumerate(bounds):
        stop = start + period * repeats
        call[start:stop] = next_call + np.arange(stop - start) // period
        segment[start:stop] = seg
        signature[start:stop] = _signature(ev["kernel"].iloc[start:start + period])
        next_call += repeats
    ev["call"] = call
    ev["segment"] = segment
    ev["signature"] = signature
    return ev


def _fixed_period(n: int, calls: int | None, kernels_per_call: int | None) -> int:
    if calls is not None and kernels_per_call is not None and calls * kernels_per_call != n:
        raise UsageError(f"split_calls: calls={calls} x kernels_per_call={kernels_per_call} != {n} launches")
    if kernels_per_call is not None:
        k = kernels_per_call
    else:
        if calls is None or calls <= 0 or n % calls:
            raise UsageError(f"split_calls: {n} launches do not split into calls={calls} equal calls")
        k = n // calls
    if k <= 0 or n % k:
        raise UsageError(f"split_calls: {n} launches do not split into calls of {k} kernels")
    return k


def _merge_runs(ev: pd.DataFrame, bounds: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Fixed-size calls grouped into segments of identical name sequences."""
    out: list[tuple[int, int, int]] = []
    names = ev["kernel"].to_numpy()
    for start, period, _ in bounds:
        if out and out[-1][1] == period:
            s0, p0, r0 = out[-1]
            if np.array_equal(names[s0:s0 + p0], names[start:start + period]):
                out[-1] = (s0, p0, r0 + 1)
                continue
        out.append((start, period, 1))
    return out


def _auto_segments(codes: np.ndarray, max_period: int) -> list[tuple[int, int, int]]:
    """[(start, period, repeats)] covering codes[0:n] in order."""
    n = len(codes)
    finder = _PeriodFinder(codes, max_period)
    out: list[tuple[int, int, int]] = []
    i = 0
    pending = None  # start of a stretch that does not repeat
    while i < n:
        period, repeats = finder.best(i)
        if repeats < 2:
            pending = i if pending is None else pending
            i += 1
            continue
        if pending is not None:
            out.append((pending, i - pending, 1))
            pending = None
        out.append((i, period, repeats))
        i += period * repeats
    if pending is not None:
        out.append((pending, n - pending, 1))
    return out


class _PeriodFinder:
    """The period starting at i whose back-to-back repeats cover most launches (ties: the
    smallest), for i increasing.

    Two exact searches. Directly: every p <= max_period with codes[i + p] == codes[i], each
    extended by comparing slices; in traces of repeated calls few positions are searched
    (each found repetition is skipped whole), so this is fast. But a kernel common to many
    calls between launches that do not repeat (8,000 of them took 157 s) makes every position
    try thousands of p: once the direct search has tried as many candidates as the trace has
    launches (each costs about what the runs cost a launch), the runs of the trace are computed (O(n log n) per doubling level, see _runs) and each
    position is answered from the O(log n) runs that hold a square starting there."""

    DIRECT_PER_LAUNCH: float = 1.0  # candidates the direct search may try, per launch

    def __init__(self, codes: np.ndarray, max_period: int) -> None:
        self.codes, self.max_period = codes, max_period
        self.tried, self.budget = 0, self.DIRECT_PER_LAUNCH * len(codes)
        self.runs: list[list[int]] | None = None
        self.active: list[list[int]] = []
        self.next_run = 0

    def best(self, i: int) -> tuple[int, int]:
        if self.runs is None and self.tried < self.budget:
            return self._direct(i)
        if self.runs is None:
            self.runs = _runs(self.codes, self.max_period).tolist()
        while self.next_run < len(self.runs) and self.runs[self.next_run][0] <= i:
            self.active.append(self.runs[self.next_run])
            self.next_run += 1
        self.active = [r for r in self.active if r[1] - 2 * r[2] >= i]
        best = (1, 1, 1)  # coverage, period, repeats
        for _, end, p in self.active:  # a multiple of a run's period covers no more than it
            repeats = (end - i) // p
            if p * repeats > best[0] or (p * repeats == best[0] and p < best[1]):
                best = (p * repeats, p, repeats)
        return best[1], best[2]

    def _direct(self, i: int) -> tuple[int, int]:
        codes = self.codes
        limit = min(self.max_period, (len(codes) - i) // 2)
        window = codes[i + 1:i + limit + 1]
        best = (1, 1, 1)  # coverage, period, repeats
        candidates = (np.flatnonzero(window == codes[i]) + 1).tolist()
        self.tried += len(candidates)
        for p in candidates:
            repeats = 1 + _match_run(codes, i, p) // p
            if repeats >= 2 and p * repeats > best[0]:
                best = (p * repeats, p, repeats)
        return best[1], best[2]


def _match_run(codes: np.ndarray, i: int, p: int) -> int:
    """How many t >= 0 in a row have codes[i+t] == codes[i+p+t]."""
    n = len(codes)
    run, step = 0, max(64, 4 * p)
    while i + p + run < n:
        stop = min(n - p - i, run + step)
        eq = codes[i + run:i + stop] == codes[i + p + run:i + p + stop]
        if not eq.all():
            return run + int(np.argmin(eq))
        run, step = stop, step * 2
    return run


# ---- runs: maximal repetitions, found from Lyndon roots (Bannai et al., "The Runs Theorem",
# SIAM J. Comput. 2017). Every run of period p contains, for one of the two letter orders, a
# Lyndon word of length p that is the longest Lyndon word starting at its position; so the
# candidates are (i, lyndon[i]) for both orders, each extended both ways by a longest common
# extension. Suffix ranks and common extensions come from one prefix-doubling table:
# O(n log n) per level, log(longest repeat) levels, all in NumPy.

def _runs(codes: np.ndarray, max_period: int) -> np.ndarray:
    """Rows (start, end, period), sorted by start: every run codes[start:end] of smallest
    period `period` <= max_period and length >= 2 * period."""
    n = len(codes)
    if n < 2:
        return np.empty((0, 3), dtype=np.int64)
    levels = _levels(codes)
    found = []
    for rank in (levels[-1], _levels(codes.max() - codes)[-1]):  # the two letter orders
        i = np.arange(n, dtype=np.int64)
        p = _next_smaller(rank) - i  # the longest Lyndon word at i
        keep = (p <= max_period) & (i + p < n)
        i, p = i[keep], p[keep]
        ahead = _extension(levels, i, i + p, n, forward=True)
        behind = _extension(levels, i, i + p, n, forward=False)
        square = ahead + behind >= p
        found.append(np.stack([i - behind, i + p + ahead, p], axis=1)[square])
    rows = np.unique(np.concatenate(found), axis=0)  # sorted by start
    return rows


def _levels(codes: np.ndarray) -> list[np.ndarray]:
    """levels[k][i]: the rank of codes[i:i + 2**k] among those slices (a slice cut short by the
    end ranks below every longer one), up to the first level at which all ranks differ; that
    last level is the rank of each suffix."""
    n = len(codes)
    kind = np.int32 if n < 2**31 else np.int64
    _, rank = np.unique(codes, return_inverse=True)
    levels = [rank.astype(kind)]
    h, distinct = 1, int(rank.max()) + 1
    while distinct < n:
        after = np.zeros(n, dtype=np.int64)  # 0: past the end
        after[:n - h] = rank[h:] + 1
        keys, rank = np.unique(rank.astype(np.int64) * (n + 1) + after, return_inverse=True)
        distinct = len(keys)
        levels.append(rank.astype(kind))
        h *= 2
    return levels


def _next_smaller(rank: np.ndarray) -> np.ndarray:
    """For each i the first j > i with rank[j] < rank[i], else n."""
    r = rank.tolist()
    n = len(r)
    out = [n] * n
    stack: list[int] = []
    for i in range(n - 1, -1, -1):
        while stack and r[stack[-1]] > r[i]:
            stack.pop()
        if stack:
            out[i] = stack[-1]
        stack.append(i)
    return np.asarray(out, dtype=np.int64)


def _extension(levels: list[np.ndarray], i: np.ndarray, j: np.ndarray, n: int, forward: bool) -> np.ndarray:
    """Longest common extension of the positions pairs (i, j), i != j: forward, how many
    codes[i + t] == codes[j + t] in a row; backward, codes[i - 1 - t] == codes[j - 1 - t].
    Greedy over the levels, longest first (no two slices of the last level's length are equal)."""
    length = np.zeros(len(i), dtype=np.int64)
    for k in range(len(levels) - 2, -1, -1):
        h = 1 << k
        a, b = (i + length, j + length) if forward else (i - length - h, j - length - h)
        ok = (np.maximum(a, b) + h <= n) if forward else (np.minimum(a, b) >= 0)
        ids = levels[k]
        ok[ok] = ids[a[ok]] == ids[b[ok]]
        length += h * ok
    return length


GAP_RATIO = 4.0  # a gap between calls is at least this many times the longest gap inside one


def _gap_calls(ev: pd.DataFrame) -> list[tuple[int, int, int]] | None:
    """Calls cut where the idle time before a launch jumps by GAP_RATIO or more above every
    smaller gap, at the first such jump (largest first) that cuts the trace into two or more
    calls of one kernel sequence; None when the gaps show no such structure."""
    n = len(ev)
    if n < 4:
        return None
    start = ev["start_ns"].to_numpy("int64")
    ends = np.maximum.accumulate(ev["end_ns"].to_numpy("int64"))
    gaps = np.maximum(start[1:] - ends[:-1], 0).astype("float64")
    order = np.sort(gaps)
    ratio = order[1:] / np.maximum(order[:-1], 1.0)
    names = ev["kernel"].to_numpy()
    # each jump of GAP_RATIO or more is a candidate threshold, the largest jump first: a launch lag
    # inside one call (a first call's warm-up) can jump further than the gaps between calls do
    for j in np.argsort(-ratio, kind="stable"):
        if ratio[j] < GAP_RATIO:
            return None
        cuts = np.flatnonzero(gaps > order[j]) + 1  # first launch of each new call
        edges = np.concatenate([[0], cuts, [n]])
        lengths = np.diff(edges)
        if len(lengths) < 2 or len(set(lengths.tolist())) != 1:
            continue
        period = int(lengths[0])
        if all(np.array_equal(names[s:s + period], names[:period]) for s in edges[:-1]):
            return [(0, period, len(lengths))]
    return None


def _signature(names: pd.Series) -> str:
    """Short stable id of one call's kernel-name sequence."""
    text = "\n".join(names.tolist())
    return f"{len(names)}k-{hashlib.sha1(text.encode()).hexdigest()[:10]}"


def call_summary(events: pd.DataFrame) -> pd.DataFrame:
    """One row per call: launches, kernel_ns (sum of durations), busy_ns (union of kernel
    intervals: overlap on several streams counts once), span_ns (first start to last end),
    gap_ns (span - busy: idle time between kernels inside the call), first_start_ns,
    last_end_ns. ncu rows have no real timeline, so their span and gaps are NA."""
    ev = events if "call" in events else events.assign(call=-1)
    keys = ["segment", "call"] if "segment" in ev else ["call"]
    ev = ev.sort_values([*keys, "start_ns"], kind="stable")
    start = ev["start_ns"].to_numpy()
    end = ev["end_ns"].to_numpy()
    group = ev.groupby(keys, sort=False).ngroup().to_numpy()
    # union of intervals: a new busy stretch begins where start passes every earlier end
    run_end = pd.Series(end).groupby(group).cummax().to_numpy()
    prev_end = np.concatenate([[np.iinfo(np.int64).min], run_end[:-1]])
    new = (start > prev_end) | np.concatenate([[True], group[1:] != group[:-1]])
    stretch = np.cumsum(new)
    st = pd.DataFrame({"g": group, "s": stretch, "start": start, "end": run_end})
    per = st.groupby(["g", "s"], sort=False).agg(start=("start", "min"), end=("end", "max"))
    busy = (per["end"] - per["start"]).groupby(level=0).sum()
    grouped = ev.groupby(keys, sort=False)
    out = grouped.agg(launches=("kernel", "size"), kernel_ns=("duration_ns", "sum"),
                      first_start_ns=("start_ns", "min"), last_end_ns=("end_ns", "max"),
                      source=("source", "first")).reset_index()
    if "signature" in ev:
        out.insert(len(keys), "signature", grouped["signature"].first().to_numpy())
    out["busy_ns"] = busy.to_numpy()
    out["span_ns"] = (out["last_end_ns"] - out["first_start_ns"]).astype("Int64")
    out["gap_ns"] = (out["span_ns"] - out["busy_ns"]).astype("Int64")
    synthetic = out["source"] == "ncu"
    out.loc[synthetic, ["span_ns", "gap_ns"]] = pd.NA
    return out
