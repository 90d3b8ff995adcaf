"""The sweep report: one row per pair (rootcause.sweep), as HTML with a sortable table and as Markdown.

Pure: an attribution document in, a row out (pair_row); rows in, text out (the renderers).
No file is read here. A row: verdict ('B slower' | 'B faster' | 'no significant difference'),
ratio (slower / faster) with its interval, delta, top unit, cause (the rules of the top unit's
findings, then the whole graph's), confirmation (the hybrids' verdicts), closure; failed pairs
carry their stage and one-line error instead.
"""
from __future__ import annotations

import html
from typing import Any

from rootcause.report import view

COLUMNS = ("pair", "target", "status", "verdict", "ratio [95%]", "delta (B - A)", "top unit", "cause",
           "confirmation", "closure")


def pair_row(doc: dict[str, Any]) -> dict[str, Any]:
    """The sweep's summary of one attribution document."""
    v = view.verdict(doc)
    if v["significant"] is False or v["ratio"] is None:
        verdict = "no significant difference"
    else:
        verdict = "B slower" if v["slower"] == v["b"] else "B faster"
    units = view.units_sorted(doc)
    top = units[0] if units else None
    rules = [f.get("rule") for f in (top or {}).get("findings") or [] if isinstance(f, dict)]
    rules += [f.get("rule") for f in doc.get("findings") or [] if isinstance(f, dict) and f.get("unit") is None]
    hybrids = [h for h in (doc.get("confirmation") or {}).get("hybrids") or [] if isinstance(h, dict)]
    return {"verdict": verdict, "significant": v["significant"], "ratio": v["ratio"], "ratio_low": v["ratio_low"],
            "ratio_high": v["ratio_high"], "delta_ns": v["delta"].get("median"),
            "delta_low_ns": v["delta"].get("low"), "delta_high_ns": v["delta"].get("high"),
            "top_unit": view.unit_label(top) if top else None,
            "top_unit_kernels": {"a": list(top["kernels_a"]), "b": list(top["kernels_b"])} if top else None,
            "units": [{"unit": u["unit"], "a": list(u["kernels_a"]), "b": list(u["kernels_b"])}
                      for u in sorted(doc["units"], key=lambda u: u["unit"])],
            "cause": [r for r in dict.fromkeys(rules) if r],
            "confirmation": [{"name": h.get("name"), "kind": h.get("kind"), "verdict": h.get("verdict")}
                             for h in hybrids] if "confirmation" in doc else None,
            "closure": doc.get("closure")}


def cells(row: dict[str, Any]) -> dict[str, tuple[str, Any]]:
    """column -> (text shown, sort key) of one row."""
    ok = row.get("status") == "ok"
    ratio = row.get("ratio")
    rtext = "n/a"
    if ok and isinstance(ratio, (int, float)):
        rtext = f"{ratio:.2f}x"
        if isinstance(row.get("ratio_low"), (int, float)) and isinstance(row.get("ratio_high"), (int, float)):
            rtext += f" [{row['ratio_low']:.2f}, {row['ratio_high']:.2f}]"
    delta = {"median": row.get("delta_ns"), "low": row.get("delta_low_ns"), "high": row.get("delta_high_ns")}
    signed = (ratio if row.get("verdict") == "B slower" else 1 / ratio) if ok and ratio else None
    return {
        "pair": (row["id"], row["id"]),
        "target": (row.get("target") or "n/a", row.get("target") or ""),
        "status": (row.get("status", "n/a"), row.get("status", "")),
        "verdict": (row.get("verdict") if ok else f"failed: {row.get('error')}"
                    if row.get("status") == "failed" else "not run", row.get("verdict") or "~"),
        "ratio [95%]": (rtext, signed if signed is not None else -1e308),
        "delta (B - A)": (view.fmt_interval(delta) if ok else "n/a", row.get("delta_ns") if ok else -1e308),
        "top unit": (row.get("top_unit") or "n/a", row.get("top_unit") or "~"),
        "cause": (", ".join(row.get("cause") or []) or ("none" if ok else "n/a"), ", ".join(row.get("cause") or [])),
        "confirmation": (confirmation_text(row.get("confirmation")) if ok else "n/a",
                         confirmation_text(row.get("confirmation")) if ok else "~"),
        "closure": (f"{row['closure']:.0%}" if isinstance(row.get("closure"), (int, float)) else "n/a",
                    row.get("closure") if isinstance(row.get("closure"), (int, float)) else -1e308),
    }


def confirmation_text(conf: list[dict[str, Any]] | None) -> str:
    """'1 confirmed, 1 inconclusive of 2 hybrids' | 'no hybrid built' | 'not run'."""
    if conf is None:
        return "not run"
    if not conf:
        return "no hybrid built"
    counts: dict[str, int] = {}
    for h in conf:
        counts[str(h.get("verdict"))] = counts.get(str(h.get("verdict")), 0) + 1
    return ", ".join(f"{n} {v}" for v, n in counts.items()) + f" of {len(conf)} hybrid{'s' if len(conf) > 1 else ''}"


def _summary(rows: list[dict[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for r in rows:
        key = r.get("verdict") if r.get("status") == "ok" else r.get("status", "n/a")
        counts[str(key)] = counts.get(str(key), 0) + 1
    return f"{len(rows)} pairs: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))


def render_sweep_markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    from rootcause.report.markdown import code, text

    lines = [f"### rootcause sweep: {text(meta.get('name', 'sweep'))}", "",
             f"{text(_summary(rows))} (executor {text(meta.get('executor', 'n/a'))}, "
             f"updated {text(meta.get('updated_utc', 'n/a'))}).", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        c = cells(r)
        md = r["report"].removesuffix(".html") + ".md"  # a Markdown page links the Markdown report
        first = f"[{code(r['id'])}]({md})" if r.get("status") == "ok" else code(r["id"])
        lines.append("| " + " | ".join([first] + [text(c[k][0]) for k in COLUMNS[1:]]) + " |")
    return "\n".join(lines) + "\n"


_SORT_JS = """
document.querySelectorAll('th[data-col]').forEach(function (th) {
  th.addEventListener('click', function () {
    var table = th.closest('table'), body = table.tBodies[0], col = +th.dataset.col;
    var up = th.dataset.dir !== 'up'; th.dataset.dir = up ? 'up' : 'down';
    table.querySelectorAll('th').forEach(function (h) { h.classList.remove('up', 'down'); });
    th.classList.add(up ? 'up' : 'down');
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = a.cells[col].dataset.key, y = b.cells[col].dataset.key;
      var nx = parseFloat(x), ny = parseFloat(y);
      var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
      return up ? c : -c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  });
});
"""

_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; }
table { border-collapse: collapse; max-width: 100%; }
th, td { border: 1px solid #ccc; padding: 4px 8px; vertical-align: top; } td:not(.num), th { overflow-wrap: break-word; word-break: normal; } .brk { word-break: break-all; }
th { background: #f4f4f4; cursor: pointer; user-select: none; } th.up::after { content: ' \\25B2'; }
th.down::after { content: ' \\25BC'; } tr.failed td { background: #fff0f0; } td.num { text-align: right; }
"""


def render_sweep_html(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """A self-contained page: the table sorts by any column on a click on its head."""
    from rootcause.report.html import breakable
    esc = html.escape
    head = "".join(f'<th data-col="{i}">{esc(c)}</th>' for i, c in enumerate(COLUMNS))
    body = []
    for r in rows:
        c = cells(r)
        tds = []
        for k in COLUMNS:
            shown, key = c[k]
            key = "" if key is None else key
            inner = esc(str(shown))
            if k == "pair" and r.get("status") == "ok":
                md = r["report"].removesuffix(".html") + ".md"
                inner = (f'<a href="{esc(r["report"], quote=True)}">{inner}</a> '
                         f'<a href="{esc(md, quote=True)}">(md)</a>')
            cls = ' class="num"' if k in ("ratio [95%]", "delta (B - A)", "closure") else ""
            tds.append(f'<td{cls} data-key="{esc(str(key), quote=True)}">{breakable(inner)}</td>')
        body.append(f'<tr class="{esc(str(r.get("status", "")), quote=True)}">' + "".join(tds) + "</tr>")
    title = f"rootcause sweep: {meta.get('name', 'sweep')}"
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\">"
            f"<title>{esc(title)}</title><style>{_STYLE}</style></head><body>"
            f"<h1>{esc(title)}</h1><p>{esc(_summary(rows))}; executor {esc(str(meta.get('executor', 'n/a')))}; "
            f"updated {esc(str(meta.get('updated_utc', 'n/a')))}. Click a column's head to sort by it; "
            "ratio is the slower variant's time over the faster's, signed rows sort B-slower above B-faster.</p>"
            f'<table id="pairs"><thead><tr>{head}</tr></thead><tbody>' + "\n".join(body)
            + f"</tbody></table><script>{_SORT_JS}</script></body></html>\n")
