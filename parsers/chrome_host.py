"""The host side of a Chrome trace (parsers.chrome_trace): which CPU op launched each GPU row, and
the chain of nn.Module spans around its runtime call.

A GPU row's cpu_op is the cpu_op event with the row's External id, else the innermost cpu_op
around the runtime call (cuda_runtime / cuda_driver) with the row's correlation id on that
call's thread; its module_path the nn.Module spans (python_function events named
'nn.Module: <Class>_<n>') around that call on its thread, outermost first.
"""
from __future__ import annotations

from operator import attrgetter
from typing import Any

from parsers import chrome_values

MODULE_PREFIX = "nn.Module: "  # python_function spans of nn.Module forwards (torch.profiler with_stack/with_modules)
_ARGS, _NAME = attrgetter("args"), attrgetter("name")


def launching_ops(ops: list, calls: list, external_ids, correlations) -> list:
    """Name of the cpu_op that launched each row (None when the trace does not say): the op
    with the row's External id, else the innermost op around the runtime call with the row's
    correlation, on that call's thread."""
    import numpy as np
    import pandas as pd

    n = len(external_ids)
    names = np.full(n, None, dtype=object)
    if not n or not ops:
        return names.tolist()
    op_ext = pd.array([chrome_values.int_or_none(a.external_id) if a is not None else None for a in map(_ARGS, ops)], dtype="Int64")
    op_name = np.array([name if type(name) is str else None for name in map(_NAME, ops)], dtype=object)
    by_ext = pd.Series(op_name, index=op_ext).loc[lambda s: s.index.notna() & s.notna()]
    by_ext = by_ext[~by_ext.index.duplicated()]
    ext = pd.array(external_ids, dtype="Int64")
    hit = pd.Series(ext).map(by_ext).to_numpy(dtype=object, na_value=None)
    names[:] = hit
    todo = np.flatnonzero(pd.isna(hit) & ~pd.isna(pd.array(correlations, dtype="Int64")))
    if todo.size and calls:
        found = enclosing_ops(ops, op_name, calls, pd.array(correlations, dtype="Int64")[todo])
        names[todo] = found
    return names.tolist()


def module_paths(modules: list, calls: list, correlations) -> list:
    """Each row's chain of nn.Module spans around its runtime call, outermost first, joined by
    '.' (None where the trace has none around it): every module span's own chain is found once
    per thread by the nesting sweep, then the innermost one around each call, as for cpu ops."""
    import numpy as np
    import pandas as pd

    n = len(correlations)
    if not n or not modules or not calls:
        return [None] * n
    start, end, ok = chrome_values.times(modules)
    chains = np.full(len(modules), None, dtype=object)
    codes = thread_codes(modules)
    for code in np.unique(codes):
        mine = np.flatnonzero((codes == code) & ok)
        order = mine[np.lexsort((-end[mine], start[mine]))]
        parent = parents(start[order], end[order])
        for k, i in enumerate(order.tolist()):
            name = modules[i].name[len(MODULE_PREFIX):]
            chains[i] = name if parent[k] < 0 else f"{chains[order[parent[k]]]}.{name}"
    wanted = pd.array(correlations, dtype="Int64")
    out = np.full(n, None, dtype=object)
    have = np.flatnonzero(~pd.isna(wanted))
    if have.size:
        out[have] = enclosing_ops(modules, chains, calls, wanted[have])
    return out.tolist()


def enclosing_ops(ops: list, op_name, calls: list, wanted_corr) -> list:
    """For each wanted correlation: the innermost cpu_op around the runtime call with that
    correlation, on the call's (pid, tid), or None. Ops on a thread nest, so the innermost
    around time t is the last op starting at or before t, or the nearest ancestor of it that
    still runs at t (parents found once by a sweep)."""
    import numpy as np
    import pandas as pd

    call_corr = pd.array([chrome_values.int_or_none(a.correlation) if a is not None else None for a in map(_ARGS, calls)], dtype="Int64")
    call_ts, _, call_ok = chrome_values.times([c if type(c.dur) in (int, float) else WithDur(c) for c in calls])
    usable = ~pd.isna(call_corr) & call_ok
    first = pd.Series(np.flatnonzero(usable), index=call_corr[usable])
    first = first[~first.index.duplicated()]
    which = pd.Series(pd.array(wanted_corr, dtype="Int64")).map(first).to_numpy(dtype=float, na_value=np.nan)
    out = np.full(len(which), None, dtype=object)
    found = ~np.isnan(which)
    if not found.any():
        return out.tolist()
    call_of = which[found].astype(np.int64)
    codes = thread_codes(ops + [calls[k] for k in call_of.tolist()])
    op_code, query_code = codes[:len(ops)], codes[len(ops):]
    query_t = call_ts[call_of]
    query_at = np.flatnonzero(found)
    op_start, op_end, op_ok = chrome_values.times(ops)
    op_ok &= np.array([n is not None for n in op_name.tolist()], dtype=bool)
    for code in np.unique(query_code):
        mine = np.flatnonzero((op_code == code) & op_ok)
        if not mine.size:
            continue
        order = mine[np.lexsort((-op_end[mine], op_start[mine]))]  # by start, outer first on ties
        starts, ends = op_start[order], op_end[order]
        parent = parents(starts, ends)
        q = np.flatnonzero(query_code == code)
        t = query_t[q]
        j = np.searchsorted(starts, t, side="right") - 1
        for _ in range(64):  # walk up while the op ended before t (nesting depth bounds it)
            up = (j >= 0) & (ends[np.maximum(j, 0)] < t)
            if not up.any():
                break
            j = np.where(up, parent[np.maximum(j, 0)], j)
        good = j >= 0
        out[query_at[q[good]]] = op_name[order[j[good]]]
    return out.tolist()


class WithDur:
    """A runtime call seen as a zero-length span (its dur may be missing)."""

    def __init__(self, ev: Any):
        self.ts, self.dur, self.pid, self.tid, self.args = ev.ts, 0, ev.pid, ev.tid, ev.args


def parents(starts, ends) -> Any:
    """Index of each span's enclosing span (-1 at top level); spans sorted by start, outer
    first on ties."""
    import numpy as np

    parent = [-1] * len(starts)
    stack: list[int] = []
    end_of = ends.tolist()
    for i, (s, e) in enumerate(zip(starts.tolist(), end_of)):
        while stack and end_of[stack[-1]] < s:
            stack.pop()
        if stack and e <= end_of[stack[-1]]:
            parent[i] = stack[-1]
        stack.append(i)
    return np.array(parent, dtype=np.int64)


def thread_codes(events: list) -> Any:
    """One int64 per event naming its (pid, tid) (equal pairs, equal codes; pairs of odd
    values, as a mutated file may hold, share -1)."""
    import numpy as np
    import pandas as pd

    pids, tids = list(map(attrgetter("pid"), events)), list(map(attrgetter("tid"), events))
    if not set(map(type, pids)) | set(map(type, tids)) <= {int, str, float, type(None)}:
        plain = [chrome_values.plain(p) and chrome_values.plain(t) for p, t in zip(pids, tids)]
        pids = [p if ok else None for p, ok in zip(pids, plain)]
        tids = [t if ok else None for t, ok in zip(tids, plain)]
    p_codes, p_uniques = pd.factorize(np.array(pids, dtype=object), use_na_sentinel=False)
    t_codes, t_uniques = pd.factorize(np.array(tids, dtype=object), use_na_sentinel=False)
    return p_codes.astype(np.int64) * (len(t_uniques) + 1) + t_codes
