"""Plain text, like the opening of a triage comment: what `compare` and `analyze` print."""
from __future__ import annotations

from typing import Any

from rootcause.names import cut
from rootcause.report import kernels, view
from rootcause.terminal import printable


def _us(ns: float) -> str:
    return f"{round(ns / 1e3, 1) + 0.0:.1f} us"  # + 0.0: a value that rounds to zero has no sign


def _signed(ns: float) -> str:
    """'+38.9' (us, one decimal); a value that rounds to zero prints as +0.0, never -0.0."""
    return f"{round(ns / 1e3, 1) + 0.0:+.1f}"


def _ci(x: dict[str, float]) -> str:
    return f"[{_signed(x['low'])}, {_signed(x['high'])}]"


def _side(kernels: list[str]) -> str:
    if not kernels:
        return "(nothing)"
    shown = [f"`{view.short(k, 64)}`" for k in kernels[:3]]
    return " + ".join(shown) + (f" + {len(kernels) - 3} more" if len(kernels) > 3 else "")


def _untested(row: dict[str, Any], A: str, B: str) -> str:
    """Where the time went when no unit is tested: one row as the tables list it, a unit or the
    units of one repeated module together (view.group_repeats: a layer's units read alike)."""
    members = row.get("members")
    how = f"{len(members)} units of one module, aligned by {members[0]['method']}" if members else \
        f"aligned by {row['method']}"
    ka, kb = (list(dict.fromkeys(row[k])) for k in ("kernels_a", "kernels_b"))
    return (f"  Largest delta, untested: {view.unit_module(row)}{_side(kb)} in {B} against {_side(ka)} in {A}: "
            f"{_us(row['time_b_ns']['median'])} vs {_us(row['time_a_ns']['median'])}, "
            f"{_signed(row['delta_ns']['median'])} us per call ({how}).")


def render_text(doc: dict[str, Any]) -> str:
    """The verdict, the significant units with their findings, the residual, closure, and what
    could not be concluded; for analyze, the hybrids' sentences."""
    A, B = view.label(doc, "a"), view.label(doc, "b")
    w = doc["whole_graph"]
    lines = [view.verdict_sentence(view.verdict(doc))]
    tc = kernels.toolchains(doc, kernels.catalogs(doc))
    if tc["a"] or tc["b"]:
        lines.append(f"Built by: {A}: {tc['a'] or 'not recorded'}; {B}: {tc['b'] or 'not recorded'}.")
        lines.extend(f"  - {c}" for c in tc["changes"])
    sig = [u for u in doc["units"] if u["significant"]]
    if not sig:
        lines.append("No unit's delta is significant; nothing is blamed.")
    if not sig and w.get("undetermined"):  # still say where the time went, as the tables do
        lines.extend(_untested(row, A, B) for row in view.group_repeats(doc["units"])[:3])
    for rank, u in enumerate(sig[:3]):
        share = f", {u['share']:+.0%} of the whole delta" if u["share"] is not None and w["significant"] else ""
        lead = "The top unit is" if rank == 0 else "Next,"
        lines.append(f"{lead} {view.unit_module(u)}{_side(u['kernels_b'])} in {B} against {_side(u['kernels_a'])} in {A}: "
                     f"{_us(u['time_b_ns']['median'])} vs {_us(u['time_a_ns']['median'])}, "
                     f"{_signed(u['delta_ns']['median'])} us {_ci(u['delta_ns'])} per call{share} "
                     f"(aligned by {u['method']}).")
        lines.extend(f"  - {f['sentence']}" for f in u["findings"])
    r = doc["residual"]
    lines.append(f"Residual (launch overhead, gaps, host): {_us(r['b']['median'])} in {B} vs "
                 f"{_us(r['a']['median'])} in {A}, {_signed(r['delta_ns']['median'])} us "
                 f"{_ci(r['delta_ns'])}; {r['launches_per_call']['b']:g} vs "
                 f"{r['launches_per_call']['a']:g} launches per call.")
    lines.extend(_host_lines(doc, A, B))
    c = doc.get("concurrency")
    if c and c.get("significant"):
        lines.append(f"Concurrency (kernels overlapping on several streams): {_us(c['b']['median'])} hidden in {B} "
                     f"vs {_us(c['a']['median'])} in {A}, {_signed(c['delta_ns']['median'])} us {_ci(c['delta_ns'])} "
                     "of kernel time the whole graph does not pay.")
    lines.extend(f"  - {f['sentence']}" for f in doc["findings"] if f["unit"] is None)
    if doc.get("closure") is not None:
        lines.append(f"Closure: units - overlap + residual explain {doc['closure']:.0%} of the whole-graph delta "
                     f"({_signed(w['unit_delta_sum_ns'])} us from units, "
                     f"{_signed(r['delta_ns']['median'])} us residual).")
    for note in doc["cannot_conclude"]:
        lines.append(f"Cannot conclude: {note}.")
    conf = doc.get("confirmation")
    if conf is not None:
        lines += ["", "Counterfactual hybrids:"]
        lines += [f"  - {r['sentence']}" for r in conf["hybrids"]] or ["  (none built)"]
        lines += [f"  note: {n}" for n in conf.get("notes", [])]
    return "\n".join(printable(line) for line in lines)  # names from captures: no escape codes, no line breaks


def _host_lines(doc: dict[str, Any], A: str, B: str) -> list[str]:
    """The host thread's significant units (analysis.host), the largest three."""
    host = doc.get("host") or {}
    sig = [u for u in host.get("units") or [] if u["significant"]]
    if not sig:
        return []
    out = [f"Host (the thread that runs the steps, per step; {host['steps']['a']} vs {host['steps']['b']} steps):"]
    for u in sig[:3]:
        out.append(f"  - `{cut(u['name'], 64)}`: {_us(u['b']['median'])} in {B} vs {_us(u['a']['median'])} in "
                   f"{A}, {_signed(u['delta_ns']['median'])} us {_ci(u['delta_ns'])} per step.")
    return out

