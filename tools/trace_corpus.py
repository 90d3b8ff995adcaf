"""The trace corpus table (docs/TRACE_CORPUS.md): `rootcause compare` on every committed trace pair,
beside the pair's own truth.

    python tools/trace_corpus.py > /tmp/table.md
    python tools/trace_corpus.py hta- tracelens-     # only the pairs whose names start so

Pairs: the published traces (fixtures/captures/published-traces/pairs.json; truth: the median of
each trace's ProfilerStep spans, read here with json) and the H200 Kineto captures (each
capture's truth.json `pairs`: the step or call times its capture script measured). Each pair runs
through the installed command in its own process, as a user runs it; the row says what the
headline said, whether its ratio is within 5% of the truth's, whether a significant headline
goes the truth's way, and the top kernel unit and host row.
"""
from __future__ import annotations

import gzip
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CAPTURES = ROOT / "fixtures" / "captures"
KINETO = ("h200-2026-12-03-kineto", "h200-2026-12-03-kineto2", "h200-2026-12-04-kineto3", "h200-2026-12-05-kineto4",
          "h100-2026-12-06-kineto5")


GPU_CATS = ("kernel", "gpu_memcpy", "memcpy", "gpu_memset", "memset")


def profiler_steps(events: list[dict]) -> list[tuple[float, float]]:
    """(start, end) in us of each host ProfilerStep#N span of a trace's events, in order, up to the
    last one in which GPU work starts (a step the trace ends inside, with no GPU work, is no
    step's time). Plain json rows, no rootcause reader: the corpus's truth."""
    spans = sorted({(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("ph") == "X"
                    and str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") != "gpu_user_annotation"})
    gpu = [e["ts"] for e in events if e.get("ph") == "X" and str(e.get("cat", "")).lower() in GPU_CATS]
    while len(spans) > 1 and not any(t >= spans[-1][0] for t in gpu):
        spans.pop()
    return spans


def step_median_ms(path: Path) -> float | None:
    """Median profiler_steps span of a .json.gz trace (ms), None without steps."""
    spans = profiler_steps(json.loads(gzip.open(path).read())["traceEvents"])
    return statistics.median(end - start for start, end in spans) / 1e3 if spans else None


def pairs() -> list[tuple[str, Path, Path, float | None, str]]:
    """(name, A, B, truth B/A, what the truth is) of every pair: the traces' own steps where they
    have ProfilerSteps, else the capture script's own timing of each iteration (truth.json: a
    call timed per call, with the host gap the script put after it)."""
    out = []
    published = json.loads((CAPTURES / "published-traces" / "pairs.json").read_text())
    out += _published(published["pairs"])
    for capture in KINETO:
        truth = json.loads((CAPTURES / capture / "truth.json").read_text())
        for name, p in truth["pairs"].items():
            a, b = CAPTURES / capture / f"{p['a']}.json.gz", CAPTURES / capture / f"{p['b']}.json.gz"
            ratio, what = _steps_truth(a, b)
            if ratio is None and p.get("unit") == "call":
                ratio, what = _iteration_truth(truth["traces"][p["a"]], truth["traces"][p["b"]])
            elif ratio is None:
                ratio, what = p.get("ratio_b_over_a"), f"script's {p.get('unit', 'call')} timing"
            out.append((f"{capture.removeprefix('h200-')}/{name}", a, b, ratio, what))
    return out + _published(published["round6"])


def _published(listed: dict[str, list[str]]) -> list[tuple[str, Path, Path, float | None, str]]:
    """A pairs.json section's pairs with their steps' truth."""
    return [(name, CAPTURES / a, CAPTURES / b, *_steps_truth(CAPTURES / a, CAPTURES / b))
            for name, (a, b) in listed.items()]


def _iteration_truth(a: dict, b: dict) -> tuple[float, str]:
    """A loop timed per call by its capture script (no marks in the trace): each iteration is the
    call the script timed (call_wall_ms) and the host gap it then waited (the config's
    host_gap_us_busy_wait), as the trace shows it from one call's start to the next's."""
    def per_iteration_ms(side: dict) -> float:
        gap_ms = side["config"].get("host_gap_us_busy_wait", 0.0) / 1e3
        return statistics.median(w + gap_ms for w in side["call_wall_ms"])

    return per_iteration_ms(b) / per_iteration_ms(a), "script's call timing + its host gap"


def _steps_truth(a: Path, b: Path) -> tuple[float | None, str]:
    ma, mb = step_median_ms(a), step_median_ms(b)
    return (mb / ma, "steps") if ma and mb else (None, "no steps both sides")


def row(name: str, a: Path, b: Path, truth: float | None, what: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        # paths from the checkout's root, so that the table's exit lines read the same on any machine
        proc = subprocess.run([sys.executable, "-m", "rootcause", "compare", str(a.relative_to(ROOT)),
                               str(b.relative_to(ROOT)), "--out", tmp],
                              capture_output=True, text=True, cwd=ROOT)
        if proc.returncode != 0:
            line = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            return f"| {name} | {_fmt(truth)} ({what}) | exit {proc.returncode}: {line[:160]} | - | - | - | - |"
        doc = json.loads((Path(tmp) / "attribution.json").read_text())
    w = doc["whole_graph"]
    ratio = w["b"]["median"] / w["a"]["median"] if w.get("a") and w.get("b") and w["a"]["median"] else None
    verdict = ("undetermined" if w.get("undetermined") else
               ("significant" if w.get("significant") else "not significant"))
    within = ("no headline" if w.get("undetermined") else
              "yes" if ratio and truth and abs(ratio / truth - 1) <= 0.05 else "no")
    direction = ("-" if not w.get("significant") or truth is None else
                 "yes" if (w["delta_ns"]["median"] > 0) == (truth > 1) else "**no**")
    top = max(doc["units"], key=lambda u: abs(u["delta_ns"]["median"]), default=None)
    unit = (f"{_short((top['kernels_b'] or top['kernels_a'])[0])} {top['delta_ns']['median'] / 1e3:+.1f} us"
            f"{'' if top.get('significant') else ' (n.s.)'}" if top else "-")
    host = (doc.get("host") or {}).get("units") or []
    moved = max(host, key=lambda r: abs(r["delta_ns"]["median"]), default=None)
    host_cell = (f"{_short(moved['name'])} {moved['delta_ns']['median'] / 1e6:+.1f} ms"
                 f"{'' if moved.get('significant') else ' (n.s.)'}" if moved else "-")
    devices = " / ".join(dict.fromkeys(str(d) for d in (doc.get("device"), doc.get("device_b")) if d)) or "-"
    return (f"| {name} | {_fmt(truth)} ({what}) | {_fmt(ratio)} {verdict} ({devices}) | {within} | {direction} | "
            f"{unit} | {host_cell} |")


def _fmt(x: float | None) -> str:
    return f"{x:.3f}" if isinstance(x, (int, float)) else "n/a"


def _short(name: str, limit: int = 48) -> str:
    name = name.replace("|", "/")
    return f"`{name[:limit]}{'...' if len(name) > limit else ''}`"


def main(names: list[str]) -> int:
    """The table; with names, only the pairs whose names start with one of them."""
    print("| pair | truth B/A (from) | rootcause B/A, headline (GPUs) | ratio within 5% | direction | top kernel unit | host row that moved most |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for p in pairs():
        if not names or p[0].startswith(tuple(names)):
            print(row(*p), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
