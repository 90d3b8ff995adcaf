"""A GitHub-flavoured Markdown triage comment from attribution.json.

Layout: a one-line verdict with its interval, a table of the top units, the per-kernel
resource table of the top units, findings, then the full tables inside <details>, and an
environment footer. Names are escaped for table cells ('|' and every other ASCII punctuation
a Markdown parser could act on), and the whole comment stays under GitHub's 65,536
characters: the folded tables are cut, with a note, when they would not fit.
"""
from __future__ import annotations

import re
from typing import AbstractSet, Any

from rootcause.artifacts.attribution import check
from rootcause.report import kernels, view
from rootcause.terminal import printable

GITHUB_LIMIT = 65536
BUDGET = 64000      # leave room for the truncation note and GitHub's own counting
TOP_UNITS = 8
RESOURCE_UNITS = 5
RESOURCE_ROWS = 40   # kernel rows of the open resource table

_PUNCT = re.compile(r"([\\`*_\[\]|<>~&])")
# Every character a Markdown renderer or str.splitlines() may end a line at: one would break the row.
_LINE_BREAKS = re.compile("[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]")


def text(x: Any) -> str:
    """Plain text safe in a GFM table cell: ASCII punctuation backslash-escaped, no newlines."""
    return _PUNCT.sub(r"\\\1", printable(_LINE_BREAKS.sub(" ", str(x))))


def code(x: Any) -> str:
    """A code span safe in a table cell ('|' escaped as GFM requires); names with a backtick
    fall back to escaped text, since a code span cannot hold its own delimiter simply."""
    s = printable(_LINE_BREAKS.sub(" ", str(x)))  # escape codes from a capture's names stay inert text
    if "`" in s:
        return text(s)
    return "`" + s.replace("|", "\\|") + "`"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _table(head: list[str], rows: list[list[str]], right: AbstractSet[int] = frozenset()) -> list[str]:
    return _head(head, right) + [_row(r) for r in rows]


def _head(head: list[str], right: AbstractSet[int] = frozenset()) -> list[str]:
    sep = ["---:" if i in right else "---" for i in range(len(head))]
    return [_row([text(h) for h in head]), _row(sep)]


def _side(names: list[str], limit: int = 2, width: int = 60) -> str:
    if not names:
        return "(none)"
    shown = " + ".join(code(view.short(n, width)) for n in names[:limit])
    return shown + (f" + {len(names) - limit} more" if len(names) > limit else "")


def _unit_cells(u: dict[str, Any], full: bool = False) -> list[str]:
    limit, width = (len(u["kernels_a"]) + len(u["kernels_b"]), 10**6) if full else (2, 60)
    return [text(view.unit_cell(u)), _side(u["kernels_a"], limit, width), _side(u["kernels_b"], limit, width),
            text(view.fmt_interval(u["time_a_ns"], False)), text(view.fmt_interval(u["time_b_ns"], False)),
            text(view.fmt_interval(u["delta_ns"])), text(view.fmt_share(u.get("share"))),
            "yes" if u.get("significant") else ("no" if "significant" in u else "n/a"),
            text(u.get("method", "n/a")) + (" (flagged)" if u.get("flagged") else "")]


def _unit_head(doc) -> list[str]:
    A, B = view.label(doc, "a"), view.label(doc, "b")
    return ["unit", f"kernels {A}", f"kernels {B}", f"{A} per call", f"{B} per call", "delta (B - A)",
            "share", "significant", "aligned by"]


def _resource_rows(doc, per_unit, columns):
    """Table rows of (unit, its kernels.resource_rows) pairs, lazily: the full table is cut once
    the comment is full."""
    for u, rows in per_unit:
        for r in rows:
            cells = [text(r["cells"][c]) if r["cells"][c] != "n/a" else "n/a" for c in columns]
            cells = [f"**{c}**" if col in r["changed"] else c for c, col in zip(cells, columns)]
            star = " (dominant)" if r["dominant"] else ""
            yield _row([str(u["unit"]), text(view.label(doc, r["variant"])), code(r["kernel"]) + star, *cells])


def _fit(head_lines: list[str], rows, used: int, what: str, total: int | None = None) -> list[str]:
    """As many rows (lines) as fit the comment budget; a note says how many were cut.
    rows may be lazy; total is then their count."""
    total = len(rows) if total is None else total
    out, size = list(head_lines), used + sum(len(x) + 1 for x in head_lines)
    for i, row in enumerate(rows):
        if size + len(row) + 1 > BUDGET:
            out.append("")
            out.append(f"*{total - i} more {what} not shown: the comment would pass GitHub's "
                       f"{GITHUB_LIMIT:,}-character limit; see attribution.json.*")
            return out
        out.append(row)
        size += len(row) + 1
    return out


def _footer(doc, env, dev) -> list[str]:
    bits = [f"rootcause {env['rootcause_version'] or 'n/a'}", f"schema {doc['schema_version']}"]
    profilers = sorted({p for v in "ab" for p in (doc["variants"][v].get("source") or [])})
    bits.append("profiler " + (", ".join(profilers) or "n/a"))
    bits.append(f"whole graph: {doc['whole_graph'].get('source', 'n/a')}")
    if env["versions"]:
        bits.append(", ".join(f"{k} {v}" for k, v in env["versions"].items()))
    host = view.host_line(env["env"]) if env["env"] else None
    snaps = list(env["snapshots"].items())
    if snaps:
        gpu = [g for g in snaps[0][1].get("gpus") or [] if isinstance(g, dict)]
        if gpu:
            bits.append(str(gpu[0].get("name", "GPU")))
        else:  # a CPU run: the machine and its load during the measurement (as it started)
            during = env["snapshots"].get("measure_start", snaps[0][1])
            bits.append(view.snapshot_line("load", dict(during, time_utc=None)).removeprefix("load: "))
        if host:
            bits.append(host)
        clocks = [f"{k} {g.get('sm_clock_mhz')} MHz" for k, s in snaps
                  for g in (s.get("gpus") or [])[:1] if isinstance(g, dict) and g.get("sm_clock_mhz") is not None]
        if clocks:
            bits.append("SM clock " + ", ".join(clocks))
    else:
        bits.append(f"GPU {dev or 'n/a'} (environment not recorded)")
    return ["---", "<sub>" + text(" · ".join(bits)) + "</sub>", "",
            "<sub>reproduce: " + code(view.reproduce_command(doc)) + "</sub>"]


def render_markdown(attribution: dict[str, Any], device: str | None = None, title: str | None = None) -> str:
    """The triage comment (module doc); the same optional arguments as render_html."""
    doc = attribution
    check(doc)
    units = view.units_sorted(doc)
    prof, cats = kernels.profiles(doc), kernels.catalogs(doc)
    env = view.environment(doc, cats)
    devs = kernels.devices(doc, device)
    dev = kernels.devices_text(devs)
    v = view.verdict(doc)
    top, other = view.fold(view.group_repeats(units), TOP_UNITS)
    top_units = view.members(top)

    lines = []
    if title:
        lines += [f"### {text(title)}", ""]
    lines += [f"**rootcause:** {text(view.verdict_sentence(v))}", ""]
    lines += _toolchains(doc, kernels.toolchains(doc, cats))
    lines += [f"**Top units** ({len(units)} in all; delta is B - A per graph call, 95% interval)", ""]
    rows = [_unit_cells(u) for u in top]
    if other:
        rows.append(["other", f"{other['count']} units", "", text(view.fmt_time(other["time_a_ns"]["median"])),
                     text(view.fmt_time(other["time_b_ns"]["median"])),
                     text(view.fmt_time(other["delta_ns"]["median"], True)), "", "", ""])
    r = doc["residual"]
    rows.append(["residual", "launch overhead, gaps, host", "",
                 text(view.fmt_interval(r.get("a"), False)), text(view.fmt_interval(r.get("b"), False)),
                 text(view.fmt_interval(r["delta_ns"])), text(view.fmt_share(r.get("share"))),
                 "yes" if r.get("significant") else ("no" if "significant" in r else "n/a"), ""])
    lines += _table(_unit_head(doc), rows, right={3, 4, 5, 6}) + [""]
    host = view.host_rows(doc)
    if host:
        lines += ["**Host**: the thread that runs the steps, its top-level ops per step (inclusive)", ""]
        lines += _table(list(view.HOST_COLUMNS), [[code(r[0]), *map(text, r[1:])] for r in host], right={1, 2, 3})
        lines += [""]

    index = kernels.kernel_index(prof)
    per_unit = [(u, kernels.resource_rows(u, index, cats, devs)) for u in units]
    columns = kernels.resource_columns([r for _, rows in per_unit for r in rows])
    res_head = ["unit", "variant", "kernel", *columns]
    right = {i + 3 for i, c in enumerate(columns) if c != "schedule"}  # the numeric columns
    lines += ["**Resources of the top units**, A against B (bold: differs from the other variant's "
              "dominant kernel" + (f"; occupancy for the {dev}" if dev else "; occupancy n/a, no device named")
              + ")", ""]
    res_rows = list(_resource_rows(doc, per_unit[:RESOURCE_UNITS], columns))
    lines += _head(res_head, right) + res_rows[:RESOURCE_ROWS] + [""]
    if len(res_rows) > RESOURCE_ROWS:
        lines += [f"*{len(res_rows) - RESOURCE_ROWS} more kernels of these units in the full table below.*", ""]
    for vv in "ab":
        for what, err in (("launch facts", prof[vv]["error"]), ("schedule facts", cats[vv]["error"])):
            if err:
                lines.append(f"- {text(view.label(doc, vv))}: {what} not available: {text(err)}")
    lines.append("")

    findings = [(u["unit"], f) for u in top_units for f in (u.get("findings") or [])]
    findings += [(None, f) for f in doc.get("findings") or [] if isinstance(f, dict) and f.get("unit") is None]
    later = [(u["unit"], f) for u in units if u not in top_units for f in (u.get("findings") or [])]
    lines += ["**Findings**" + (f" (of the top {len(top)} units; the rest below)" if later else ""), ""]
    if findings:
        lines += [_finding_line(unit, f) for unit, f in findings]
    else:
        lines.append("- none (no significant unit delta, or diagnose did not run)")
    for head, key in (("Cannot conclude", "cannot_conclude"), ("Notes", "notes")):
        if doc.get(key):
            lines += ["", f"**{head}**", ""] + [f"- {text(x)}" for x in doc[key]]
    lines.append("")
    conf = view.confirmation(doc)
    if conf is not None:
        lines += _confirmation(conf)

    footer = _footer(doc, env, dev)
    used = sum(len(x) + 1 for x in lines + footer) + 200
    full_units = _table(_unit_head(doc), [_unit_cells(u, full=True) for u in units], right={3, 4, 5, 6})
    lines += _fit(["<details><summary>All units</summary>", "", *full_units[:2]], full_units[2:], used, "units")
    lines += ["", "</details>", ""]
    used = sum(len(x) + 1 for x in lines + footer) + 200
    n_rows = sum(len(u["kernels_a"]) + len(u["kernels_b"]) for u in units)
    lines += _fit(["<details><summary>Resources of every unit's kernels</summary>", "", *_head(res_head, right)],
                  _resource_rows(doc, per_unit, columns), used, "kernel rows", n_rows)
    lines += ["", "</details>", ""]
    if later:
        used = sum(len(x) + 1 for x in lines + footer) + 200
        lines += _fit(["<details><summary>Findings of the other units</summary>", ""],
                      [_finding_line(unit, f) for unit, f in later], used, "findings")
        lines += ["", "</details>", ""]
    lines += ["<details><summary>How to read this</summary>", ""]
    lines += [f"- **{term}**: {text(what)}" for term, what in view.READING_GUIDE] + ["", "</details>", ""]
    lines += footer
    return "\n".join(lines) + "\n"


def _toolchains(doc: dict[str, Any], tc: dict[str, Any]) -> list[str]:
    """'Built by' lines when the catalogs record toolchains, and the catalog changes when they differ."""
    if not (tc["a"] or tc["b"]):
        return []
    out = [f"**Built by:** A {text(view.label(doc, 'a'))}: {text(tc['a'] or 'not recorded')}; "
           f"B {text(view.label(doc, 'b'))}: {text(tc['b'] or 'not recorded')}", ""]
    if tc["differ"]:
        out += ["**What the catalogs show changed between the compilers**", ""]
        out += [f"- {text(c)}" for c in tc["changes"]] + [""]
    return out


def _confirmation(conf: dict[str, Any]) -> list[str]:
    """Counterfactual hybrids: one row per hybrid with its recovered share and verdict."""
    lines = [f"**Counterfactual hybrids** ({text(conf['rule'])})", ""]
    if conf["rows"]:
        rows = [[code(r["hybrid"]), *(text(r[c]) for c in view.CONFIRMATION_COLUMNS[1:-1]), f"**{text(r['verdict'])}**"]
                for r in conf["rows"]]
        lines += _table(list(view.CONFIRMATION_COLUMNS), rows, right={3, 4, 5, 7})
        lines += [""] + [f"- {text(r['sentence'])}" for r in conf["rows"] if r["sentence"]]
    else:
        lines.append("- no hybrid was built")
    if conf["notes"]:
        lines += [""] + [f"- note: {text(n)}" for n in conf["notes"]]
    return lines + [""]


def _finding_line(unit: int | None, f: dict[str, Any]) -> str:
    where = f"unit {unit}" if unit is not None else "whole graph"
    return f"- {where}, {text(f.get('rule', 'finding'))}: {_sentence(f.get('sentence', ''))}"


def _sentence(s: str) -> str:
    """A finding's sentence keeps its `code` spans (their control characters escaped, as every
    name's are); the text between them is escaped."""
    parts = re.split(r"(`[^`]*`)", str(s))
    return "".join(code(p[1:-1]) if p.startswith("`") and p.endswith("`") and len(p) > 1 else text(p) for p in parts)
