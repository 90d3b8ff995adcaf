"""One self-contained HTML page from attribution.json: verdict, plots, tables, findings, environment.

plotly.js is embedded inline from plotly's offline bundle, so the file opens without a network.
Every string from the input goes through html.escape; figure JSON embedded in <script> has
'<', '>', '&' and U+2028/9 written as \\u escapes, so no kernel name can close the script.
Large graphs stay readable: the plots show the top units and fold the rest into one 'other'
bar; the tables show the top units and put the rest in a collapsed <details>.
"""
from __future__ import annotations

import codecs
import html
import importlib.util
import itertools
import re
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import AbstractSet, Any

from rootcause.artifacts.attribution import check
from rootcause.errors import InternalError
from rootcause.report import kernels, view

TOP_UNITS = 12       # bars in the plots and rows in the open units table
RESOURCE_UNITS = 8   # units with an open resource table
FOLDED_ROWS = 2000   # rows of a folded table or list; the rest are counted, not listed

_A_COLOR, _B_COLOR = "#4C78A8", "#F58518"

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1200px;color:#222;padding:0 16px}
h1{font-size:22px;margin:0 0 8px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}
.verdict{background:#f4f7fb;border-left:5px solid #4C78A8;padding:12px 16px;font-size:16px}
.verdict.slower{border-color:#d62728}.verdict.faster{border-color:#2ca02c}
table{border-collapse:collapse;margin:8px 0;font-size:13px;max-width:100%}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
td:not(.num),th{overflow-wrap:break-word;word-break:normal;hyphens:none}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}
td.changed{background:#fff1b8;font-weight:600}tr.verdict-confirmed td:last-child{color:#2ca02c;font-weight:600}
tr.verdict-refuted td:last-child{color:#d62728;font-weight:600}tr.dominant td:first-child::after{content:" \\2605";color:#b8860b}
code,.k{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px;word-break:break-all}
.brk{word-break:break-all}
.muted{color:#777}.na{color:#999;font-style:italic}.plot{width:100%;min-height:380px}
details{margin:8px 0}summary{cursor:pointer;color:#235}
pre{background:#f7f7f7;padding:8px;overflow:auto;font-size:12px;max-height:320px}
"""


def esc(x: Any) -> str:
    """Text as HTML, non-ASCII characters as character references: a page of ASCII alone is held
    at a byte a character (one ellipsis in a name would make Python hold all 5 MB at two)."""
    return html.escape(str(x), quote=True).encode("ascii", "xmlcharrefreplace").decode("ascii")


def script_json(obj: Any) -> str:
    """JSON safe inside <script>: no '</script>', '<!--' or line separators can appear."""
    text = json.dumps(_finite(obj), separators=(",", ":"), allow_nan=False, default=_plain)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _finite(o: Any) -> Any:
    """NaN and infinities (an interval attribution.json could not bound) become null."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    return o


def _plain(o: Any) -> Any:
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, (set, tuple)):
        return list(o)
    return str(o)


LONG_TOKEN = 24  # characters without a space: a symbol, a path or a flag, not a word of prose
_TAG = re.compile(r"(<[^>]+>)")
_LONG = re.compile(r"[^\s<>]{%d,}" % LONG_TOKEN)


def breakable(cell: str) -> str:
    """Already-escaped cell HTML whose long tokens (kernel names, paths, flags) may break: at
    their separators, else anywhere; words of prose keep whole (the table's CSS breaks none).
    Text already set as code (<code>, class "k") is left as it is: its own CSS breaks it."""
    def token(m: re.Match) -> str:
        return '<span class="brk">' + re.sub(r"([_/.,:()-])", r"\1<wbr>", m.group(0)) + "</span>"

    out, code = [], 0
    for part in _TAG.split(cell):
        if part.startswith("<"):
            if part.startswith("<code") or part.startswith('<span class="k"'):
                code += 1
            elif code and part in ("</code>", "</span>"):
                code -= 1
            out.append(part)
        else:
            out.append(part if code else _LONG.sub(token, part))
    return "".join(out)


def _table(head: list[str], rows: list[list[str]], num: AbstractSet[int] = frozenset(), cls: list[str] | None = None,
           changed: list[set[int]] | None = None) -> str:
    """Cells are already-escaped HTML (their long tokens made breakable here)."""
    out = ["<table><thead><tr>", *(f"<th>{esc(h)}</th>" for h in head), "</tr></thead><tbody>"]
    for i, row in enumerate(rows):
        attr = f' class="{cls[i]}"' if cls and cls[i] else ""
        out.append(f"<tr{attr}>")
        for j, cell in enumerate(row):
            classes = " ".join(c for c, on in (("num", j in num), ("changed", changed and j in changed[i])) if on)
            cell = breakable(cell)
            out.append(f'<td class="{classes}">{cell}</td>' if classes else f"<td>{cell}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _na(text: str = "not available") -> str:
    return f'<span class="na">{esc(text)}</span>'


def _kernels(names: list[str], limit: int = 4) -> str:
    if not names:
        return _na("none")
    shown = "<br>".join(_kernel(n) for n in names[:limit])
    return shown + (f'<br><span class="muted">+{len(names) - limit} more</span>' if len(names) > limit else "")


# --- figures ----------------------------------------------------------------------------------

def _figure(traces: list[dict], title: str, **layout) -> dict:
    """A figure as plotly.js takes it (plotly's JSON schema as plain data: no graph objects to build
    and validate); layout keys as in plotly's schema, axis titles given as xaxis_title/yaxis_title."""
    for axis in ("xaxis", "yaxis"):
        if f"{axis}_title" in layout:
            layout[axis] = {**layout.get(axis, {}), "title": {"text": layout.pop(f"{axis}_title")}}
    return {"data": traces, "layout": {"title": {"text": title}, **layout}}


def _fig_waterfall(doc, top, other) -> dict:
    x = [view.unit_label(u) for u in top] + ([f"other ({other['count']} units)"] if other else [])
    y = [u["delta_ns"]["median"] / 1e3 for u in top] + ([other["delta_ns"]["median"] / 1e3] if other else [])
    x.append("residual (launch, gaps, host)")
    y.append(doc["residual"]["delta_ns"]["median"] / 1e3)
    whole = doc["whole_graph"]["delta_ns"]["median"] / 1e3
    unexplained = whole - sum(y)
    measure = ["relative"] * len(y)
    if abs(unexplained) >= 0.005:  # a bar a label can show (+0.01 us); less is rounding
        x.append("not explained")
        y.append(unexplained)
        measure.append("relative")
    x.append("whole-graph delta")
    y.append(whole)
    measure.append("total")
    scale, unit = (1e3, "ms") if max(abs(v) for v in y) >= 1e3 else (1.0, "us")  # no "+120047.1 us"
    y = [v / scale for v in y]
    colors = {"B slower (up)": "#d62728", "B faster (down)": "#2ca02c", "whole-graph delta": "#555"}
    traces = [{"type": "waterfall", "x": x, "y": y, "measure": measure, "textposition": "outside", "showlegend": False,
               "text": [f"{v:+.2f}" if abs(v) < 1 else f"{v:+.1f}" for v in y], "connector": {"line": {"color": "#999"}},
               "increasing": {"marker": {"color": colors["B slower (up)"]}},
               "decreasing": {"marker": {"color": colors["B faster (down)"]}},
               "totals": {"marker": {"color": colors["whole-graph delta"]}}}]
    # a waterfall has no legend of its own colours: empty traces give one
    traces += [{"type": "scatter", "x": [None], "y": [None], "mode": "markers", "name": name,
                "marker": {"color": color, "symbol": "square", "size": 12}} for name, color in colors.items()]
    return _figure(traces, f"Where the whole-graph delta goes (B - A, {unit} per call; up = B slower)",
                   yaxis_title=f"{unit} per graph call", margin={"t": 50, "b": 140}, showlegend=True)


def _fig_pairs(doc, top, other) -> dict:
    rows = top + ([other] if other else [])
    x = [view.unit_label(u) if u["unit"] is not None else f"other ({u['count']} units)" for u in rows]
    traces = []
    for v, color in (("a", _A_COLOR), ("b", _B_COLOR)):
        t = [u[f"time_{v}_ns"] for u in rows]
        med = [i["median"] / 1e3 for i in t]
        err = {"type": "data", "symmetric": False,
               "array": [(i["high"] - i["median"]) / 1e3 if "high" in i else 0 for i in t],
               "arrayminus": [(i["median"] - i["low"]) / 1e3 if "low" in i else 0 for i in t]}
        traces.append({"type": "bar", "name": view.label(doc, v), "x": x, "y": med, "error_y": err,
                       "marker": {"color": color}})
    return _figure(traces, "Time per graph call of each unit (median, 95% interval)", barmode="group",
                   yaxis_title="us per graph call", margin={"t": 50, "b": 140})


def _launch_ranks(doc, top) -> dict[tuple[str, str], list[int]]:
    """(variant, kernel) -> the colour (rank among the top units, -1 for the rest) of each of its
    launches in a call, in launch order. A kernel in several units (the alignment split one launched
    once per source op) gives its i-th launch to the unit that lists the i-th op of its catalog entry;
    without a catalog that says, its launches take the units in turn."""
    rank = {m["unit"]: r for r, u in enumerate(top) for m in view.members([u])}
    cats = kernels.catalogs(doc)
    listed: dict[tuple[str, str], list[dict]] = {}
    for u in doc.get("units") or []:
        for v in "ab":
            for k in u.get(f"kernels_{v}") or []:
                listed.setdefault((v, k), []).append(u)
    out = {}
    for (v, k), us in listed.items():
        ops = (cats[v]["kernels"].get(k) or {}).get("source_ops") or []
        by_op = [[u for u in us if op in (u.get("source_ops") or [])] for op in ops]
        if len(us) > 1 and ops and all(len(hit) == 1 for hit in by_op):
            us = [hit[0] for hit in by_op]
        out[(v, k)] = [rank.get(u["unit"], -1) for u in us]
    return out


def _fig_timeline(doc, prof, top) -> dict | None:
    ranks = _launch_ranks(doc, top)
    palette = ["#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#EECA3B", "#B279A2",
               "#FF9DA6", "#9D755D", "#BAB0AC", "#1F77B4", "#8C564B"]
    import numpy as np

    traces: list[dict] = []
    named: set[int] = set()  # legend: one entry per unit colour
    units = {r: view.unit_label(u) for r, u in enumerate(top)}
    for v in ("b", "a"):
        tl = prof[v]["timeline"]
        if not tl or not tl.get("kernels"):
            continue
        ks = tl["kernels"]
        streams = {k.get("stream") for k in ks}
        name = view.label(doc, v)
        # One trace per colour (unit rank, grey for the rest), not a colour per bar.
        groups: dict[int, list[dict]] = {}
        seen: dict[str, int] = {}
        for k in ks:
            mine = ranks.get((v, k["kernel"])) or [-1]
            i = seen[k["kernel"]] = seen.get(k["kernel"], -1) + 1
            groups.setdefault(mine[i % len(mine)], []).append(k)
        for rank, members in sorted(groups.items()):
            start = np.array([k["start_ns"] for k in members], dtype="float64")
            end = np.array([k["end_ns"] for k in members], dtype="float64")
            traces.append({
                "type": "bar", "orientation": "h", "base": np.round(start / 1e3, 4).tolist(),
                "x": np.round(np.maximum(end - start, 1) / 1e3, 4).tolist(),
                "y": [f"{name} s{k.get('stream')}" if len(streams) > 1 else name for k in members],
                "marker": {"color": palette[rank % len(palette)] if rank >= 0 else "#bbb",
                           "line": {"width": 0.5 if len(ks) <= 400 else 0, "color": "#333"}},
                "name": units.get(rank, "other units"), "legendgroup": str(rank), "showlegend": rank not in named,
                "hovertext": [k["kernel"] for k in members],
                "hovertemplate": "%{hovertext}<br>%{x:.2f} us at %{base:.2f} us<extra></extra>"})
            named.add(rank)
    if not traces:
        return None
    ncu = any("ncu" in (doc["variants"][v].get("source") or []) for v in "ab")
    title = "One graph call per variant (the call with the median span; colour = unit)"
    if ncu:
        title += "<br><sub>ncu records no timeline: its launches are laid back to back, gaps are not real</sub>"
    rows = {y for t in traces for y in t["y"]}
    return _figure(traces, title, xaxis_title="us since the call's first launch", barmode="overlay",
                   showlegend=True, legend={"title": {"text": "unit (A → B)"}}, margin={"t": 50},
                   height=220 + 60 * len(rows))


def _kernel(name: str) -> str:
    """A kernel's readable name, the whole signature on hover."""
    return f'<span class="k" title="{esc(name)}">{esc(view.short(name, 72))}</span>'


def _host(doc) -> str:
    """The thread that runs the steps: its top-level ops per step (analysis.host)."""
    rows = [[f'<span class="k" title="{esc(full)}">{esc(r[0])}</span>', *map(esc, r[1:])]
            for r, full in zip(view.host_rows(doc), (u["name"] for u in doc["host"]["units"]))]
    return ('<p class="muted">The thread that runs the steps: its top-level ops per step, inclusive of what they '
            "enclose; the rest of each step is '(outside host ops)'.</p>" + _table(list(view.HOST_COLUMNS), rows, {1, 2, 3}))


# --- sections ---------------------------------------------------------------------------------

def _verdict(doc, v) -> str:
    state = "" if v["significant"] is False else ("slower" if v["slower"] == v["b"] else "faster")
    notes = []
    if v["source_note"]:
        notes.append(esc(v["source_note"]))
    if isinstance(v["closure"], (int, float)):
        notes.append(f"Closure {v['closure']:.0%}: units {esc(view.fmt_time(v['unit_sum_ns'], True))} "
                     f"+ residual {esc(view.fmt_interval(v['residual']))} against the whole-graph "
                     f"delta {esc(view.fmt_interval(v['delta']))}.")
    return (f'<div class="verdict {state}"><strong>{esc(view.verdict_sentence(v))}</strong>'
            + "".join(f'<div class="muted">{n}</div>' for n in notes) + "</div>")


def _unit_row(u) -> list[str]:
    return [esc(view.unit_cell(u)), _kernels(u["kernels_a"]), _kernels(u["kernels_b"]),
            esc(view.fmt_interval(u["time_a_ns"], False)), esc(view.fmt_interval(u["time_b_ns"], False)),
            esc(view.fmt_interval(u["delta_ns"])), esc(view.fmt_share(u.get("share"))),
            esc("yes" if u.get("significant") else "no" if "significant" in u else "n/a"),
            esc(u.get("method", "n/a")) + (" (flagged)" if u.get("flagged") else ""),
            esc(len([f for m in view.members([u]) for f in m.get("findings") or []]))]


_UNIT_HEAD = ["unit", "kernels A", "kernels B", "A per call", "B per call", "delta (B - A)", "share",
              "significant", "aligned by", "findings"]


def _units(doc, units, top, other) -> str:
    head = [h.replace(" A", f" ({view.label(doc, 'a')})").replace(" B", f" ({view.label(doc, 'b')})")
            if h.startswith("kernels") else h for h in _UNIT_HEAD]
    out = [_table(head, [_unit_row(u) for u in top], num={3, 4, 5, 6, 9})]
    if other:
        rest = units[len(top):]
        rows = [_unit_row(u) for u in rest[:FOLDED_ROWS]]
        more = (f'<p class="muted">{len(rest) - FOLDED_ROWS} more rows are not listed here; '
                f"attribution.json holds all of them.</p>" if len(rest) > FOLDED_ROWS else "")
        together = esc(view.fmt_time(other["delta_ns"]["median"], True))
        out.append(f"<details><summary>{other['count']} more units (together {together}"
                   f" of the delta)</summary>{_table(head, rows, num={3, 4, 5, 6, 9})}{more}</details>")
    return "".join(out)


def _resources(doc, units, prof, cats, devs) -> str:
    dev = kernels.devices_text(devs)
    out = []
    if dev is None and not view.on_cpu(doc):
        out.append(f"<p>{_na('Occupancy not available: no device named (attribution.json has no device; give --gpu).')}</p>")
    elif dev is None:
        pass  # a CPU run has no occupancy to speak of
    else:
        out.append(f'<p class="muted">Occupancy: theoretical, rootcause.gpus for the {esc(dev)}. '
                   "Highlighted: differs from the other variant's dominant kernel (marked with a star).</p>")
    for v in "ab":
        for what, err in (("launch facts", prof[v]["error"]), ("schedule facts", cats[v]["error"])):
            if err:
                out.append(f"<p>{_na(f'{view.label(doc, v)}: {what} not available: {err}')}</p>")
    index = kernels.kernel_index(prof)
    per_unit = [(u, kernels.resource_rows(u, index, cats, devs)) for u in units[:RESOURCE_UNITS]]
    columns = kernels.resource_columns([r for _, rows in per_unit for r in rows])
    head = ["variant", "kernel", *columns]
    numeric = {i + 2 for i, c in enumerate(columns) if c not in ("schedule",)}
    for u, rows in per_unit:
        body = [[esc(view.label(doc, r["variant"])), _kernel(r["kernel"]),
                 *(esc(r["cells"][c]) for c in columns)] for r in rows]
        changed = [{i + 2 for i, c in enumerate(columns) if c in r["changed"]} for r in rows]
        out.append(f"<h3>Unit {esc(u['unit'])}: {esc(view.fmt_interval(u['delta_ns']))}</h3>")
        out.append(_table(head, body, num=numeric, changed=changed,
                          cls=["dominant" if r["dominant"] else "" for r in rows]))
    return "".join(out)


def _findings(doc, units, top) -> str:
    """Findings of the top units with their evidence; the others' sentences folded."""
    out = []
    for u in top:
        fs = u.get("findings") or []
        if not fs:
            continue
        out.append(f"<h3>Unit {esc(u['unit'])} ({esc(view.fmt_interval(u['delta_ns']))})</h3><ul>")
        out.extend(_finding(f) for f in fs)
        out.append("</ul>")
    later = [(u["unit"], f) for u in units if u not in top for f in (u.get("findings") or []) if isinstance(f, dict)]
    if later:
        items = "".join(f"<li>unit {esc(unit)}, <strong>{esc(f.get('rule', 'finding'))}</strong>: "
                        f"{esc(f.get('sentence', ''))}</li>" for unit, f in later[:FOLDED_ROWS])
        more = (f'<p class="muted">{len(later) - FOLDED_ROWS} more findings are in attribution.json.</p>'
                if len(later) > FOLDED_ROWS else "")
        out.append(f"<details><summary>{len(later)} findings of the other units (evidence in "
                   f"attribution.json)</summary><ul>{items}</ul>{more}</details>")
    general = [f for f in doc.get("findings") or [] if isinstance(f, dict) and f.get("unit") is None]
    if general:
        out.append("<h3>Whole graph</h3><ul>" + "".join(_finding(f) for f in general) + "</ul>")
    if not out:
        out.append(f"<p>{_na('No findings: no unit delta is significant, or diagnose did not run.')}</p>")
    for title, key in (("Cannot conclude", "cannot_conclude"), ("Notes", "notes")):
        listed = doc.get(key) or []
        if listed:
            out.append(f"<h3>{title}</h3><ul>" + "".join(f"<li>{esc(x)}</li>" for x in listed) + "</ul>")
    return "".join(out)


def _finding(f: dict) -> str:
    ev = f.get("evidence")
    evidence = (f"<details><summary>evidence ({esc(ev.get('source', 'source not given'))})</summary>"
                f"<pre>{esc(json.dumps(ev, indent=1, default=str))}</pre></details>") if isinstance(ev, dict) else ""
    return f"<li><strong>{esc(f.get('rule', 'finding'))}</strong>: {esc(f.get('sentence', ''))}{evidence}</li>"


def _confirmation(conf) -> str:
    """Counterfactual hybrids: per hybrid the change, its time, recovered share and verdict."""
    out = [f"<p>{esc(conf['rule'])}" + (f"; {esc(conf['formula'])}" if conf["formula"] else "") + ".</p>"]
    if conf["rows"]:
        rows = [[esc(r[c]) if c != "hybrid" else f"<code>{esc(r[c])}</code>" for c in view.CONFIRMATION_COLUMNS]
                for r in conf["rows"]]
        out.append(_table(list(view.CONFIRMATION_COLUMNS), rows, num={3, 4, 5, 7},
                          cls=[f"verdict-{r['state'].replace(' ', '-')}" for r in conf["rows"]]))
        out.append("<ul>" + "".join(f"<li>{esc(r['sentence'])}</li>" for r in conf["rows"] if r["sentence"])
                   + "</ul>")
    else:
        out.append(f"<p>{_na('No hybrid was built.')}</p>")
    if conf["notes"]:
        out.append("<ul>" + "".join(f"<li>{esc(n)}</li>" for n in conf["notes"]) + "</ul>")
    return '<section id="confirmation">' + "".join(out) + "</section>"


def _toolchains(doc, tc) -> str:
    """Which compiler and runtime built each side; what the catalogs show changed when they differ."""
    if not (tc["a"] or tc["b"]):
        return ""
    out = ['<section id="toolchains"><p>Built by: ']
    out.append("; ".join(f"{'AB'[i]} {esc(view.label(doc, v))}: {esc(tc[v] or 'not recorded')}"
                         for i, v in enumerate("ab")) + "</p>")
    if tc["differ"]:
        out.append("<p>What the catalogs show changed between the compilers:</p><ul>"
                   + "".join(f"<li>{esc(c)}</li>" for c in tc["changes"]) + "</ul>")
    return "".join(out) + "</section>"


def _environment(doc, env) -> str:
    out = ["<ul>"]
    out.append(f"<li>rootcause {esc(env['rootcause_version'] or 'version not recorded')}, "
               f"attribution schema {esc(doc['schema_version'])}</li>")
    for v in "ab":
        var = doc["variants"][v]
        src = var.get("source")
        out.append(f"<li>{esc(view.label(doc, v))}: profile <code>{esc(var.get('profile', 'n/a'))}</code>"
                   f" ({esc(', '.join(src) if isinstance(src, list) else src or 'profiler n/a')}), "
                   f"{esc(var.get('calls', 'n/a'))} calls, catalog "
                   f"<code>{esc(var.get('catalog') or 'none')}</code></li>")
    if env["versions"]:
        out.append("<li>Built with " + esc(", ".join(f"{k} {v}" for k, v in env["versions"].items())) + "</li>")
    else:
        out.append(f"<li>Compiler versions: {_na()} (no catalogs)</li>")
    host = view.host_line(env["env"]) if env["env"] else None
    if env["snapshots"]:
        out.append(f"<li>Host: {esc(host or 'n/a')} (from <code>{esc(env['source'])}</code>)</li>")
        out.extend(f"<li>{esc(view.snapshot_line(k, s))}</li>" for k, s in env["snapshots"].items())
    else:
        out.append(f"<li>GPU, driver and clocks: {_na()} (attribution.json has no environment and "
                   "no env.json lies beside the profiles)</li>")
    m = env["measurement"]
    if isinstance(m, dict) and (m.get("protocol") or m.get("file")):
        where = f" (<code>{esc(m['file'])}</code>)" if m.get("file") else ""
        out.append(f"<li>Measurement{where}: {esc(view.protocol_text(m.get('protocol')))}, "
                   f"{esc(m.get('rounds') or 'n/a')} rounds, budget {esc(m.get('budget_s') or 'n/a')} s</li>")
    out.append("</ul>")
    out.append(f"<p>Reproduce the attribution:</p><pre>{esc(view.reproduce_command(doc))}</pre>")
    out.append("<p>Then this report: <code>rootcause report attribution.json --format html --out report.html</code></p>")
    if env["env"]:
        out.append(f"<details><summary>environment as recorded</summary><pre>"
                   f"{esc(json.dumps(env['env'], indent=1, default=str))}</pre></details>")
    return "".join(out)


def _plotly_js_file() -> Path:
    """plotly.js as the plotly package ships it (package_data/plotly.min.js), found without
    importing the package (its import and its graph objects are the slow part of a small report)."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        raise InternalError("plotly is not installed: the HTML report embeds its plotly.js")
    return Path(list(spec.submodule_search_locations)[0]) / "package_data" / "plotly.min.js"


_JS_PIECE = 1 << 18  # bytes of plotly.js read and written at a time (each is held several times over meanwhile)


def _plotly_js_pieces(path: Path) -> Iterator[str]:
    """plotly.js a piece at a time (a page is written without holding its 4.8 MB), each piece
    ASCII: its few non-ASCII characters (in regular expressions) as \\uXXXX escapes, which mean
    the same there and in strings, so the page stays a byte a character. Decoded as ASCII in C,
    the handler called at each of them alone (a regular expression over the 4.8 MB took 45 ms).
    A piece ends after an ASCII byte, so no character is cut in two."""
    rest = b""
    try:
        with open(path, "rb") as f:
            while chunk := f.read(_JS_PIECE):
                chunk = rest + chunk
                end = len(chunk)
                while end and chunk[end - 1] >= 0x80:
                    end -= 1
                rest = chunk[end:]
                yield chunk[:end].decode("ascii", errors=_JS_ESCAPE)
    except OSError as err:
        raise InternalError(f"{path}: plotly.js cannot be read: {err.strerror or err}") from None
    if rest:
        yield rest.decode("ascii", errors=_JS_ESCAPE)


def _js_escape(err: UnicodeError) -> tuple[str, int]:
    """A decoding error handler: the UTF-8 character at err.start as JavaScript's \\uXXXX escapes
    (UTF-16 code units), decoding resumed after it."""
    if not isinstance(err, UnicodeDecodeError):  # registered for this decoding alone
        raise err
    lead = err.object[err.start]
    size = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
    units = err.object[err.start:err.start + size].decode("utf-8").encode("utf-16-be")
    return "".join(f"\\u{units[i]:02x}{units[i + 1]:02x}" for i in range(0, len(units), 2)), err.start + size


_JS_ESCAPE = "rootcause-js-escape"
codecs.register_error(_JS_ESCAPE, _js_escape)


def render_html(attribution: dict[str, Any], device: str | None = None, title: str | None = None) -> str:
    """The whole report page, from the document alone; device: a rootcause.gpus.DEVICES name for
    occupancy when the attribution names none."""
    return "".join(html_pieces(attribution, device, title))


def html_pieces(attribution: dict[str, Any], device: str | None = None, title: str | None = None) -> Iterator[str]:
    """render_html's page as pieces of text to write in turn: plotly.js is read from its file
    while the page is written, never held whole (fileio.write_set takes the pieces). Everything
    else is rendered, and the document checked, before this returns."""
    doc = attribution
    check(doc)
    units = view.units_sorted(doc)
    rows = view.group_repeats(units)
    top, other = view.fold(rows, TOP_UNITS)
    prof = kernels.profiles(doc)
    cats = kernels.catalogs(doc)
    env = view.environment(doc, cats)
    devs = kernels.devices(doc, device)
    v = view.verdict(doc)
    conf = view.confirmation(doc)
    figs = {"waterfall": _fig_waterfall(doc, top, other), "pairs": _fig_pairs(doc, top, other)}
    timeline = _fig_timeline(doc, prof, top)
    if timeline is not None:
        figs["timeline"] = timeline
    title = title or f"rootcause: {view.label(doc, 'b')} against {view.label(doc, 'a')}"
    missing = "; ".join(f"{view.label(doc, k)}: {prof[k]['error']}" for k in "ab" if prof[k]["error"])
    plots = ['<div id="waterfall" class="plot"></div>', '<div id="pairs" class="plot"></div>',
             '<div id="timeline" class="plot"></div>' if timeline is not None else
             f"<p>{_na('Timeline not available: ' + (missing or 'no per-kernel start/end in the profiles'))}</p>"]
    body = [
        f"<h1>{esc(title)}</h1>",
        f'<p class="muted">A = {esc(view.label(doc, "a"))} (baseline), B = {esc(view.label(doc, "b"))} '
        "(candidate); deltas are B - A per graph call (positive: B is slower), in the unit each number "
        "carries.</p>",
        _verdict(doc, v), _toolchains(doc, kernels.toolchains(doc, cats)),
        "<h2>Where the time goes</h2>", *plots,
        f"<h2>Units ({len(units)})</h2>", _units(doc, rows, top, other),
        *(["<h2>Host, per step</h2>", _host(doc)] if view.host_rows(doc) else []),
        "<h2>Resources per unit, A against B</h2>", _resources(doc, units, prof, cats, devs),
        "<h2>Findings and evidence</h2>", _findings(doc, units, view.members(top)),
        *(["<h2>Counterfactual hybrids</h2>", _confirmation(conf)] if conf is not None else []),
        "<h2>Environment and how to reproduce</h2>", _environment(doc, env),
        "<h2>How to read this</h2>", "<dl>" + "".join(f"<dt>{esc(t)}</dt><dd>{esc(w)}</dd>"
                                                     for t, w in view.READING_GUIDE) + "</dl>",
    ]
    plot_script = ("const FIGS=" + script_json(figs) + ";for(const [id,f] of Object.entries(FIGS)){"
                   "Plotly.newPlot(id,f.data,f.layout,{responsive:true,displaylogo:false});}")
    js = _plotly_js_file()
    head = (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{esc(title)}</title>"
            f"<style>{_CSS}</style><script>")
    rest = "".join(["</script></head><body>", "\n".join(body), "<script>", plot_script, "</script></body></html>\n"])
    return itertools.chain([head], _plotly_js_pieces(js), [rest])
