"""Scoreboard of the diagnosis on the zoo (fixtures/zoo/): every case's committed H200 capture
attributed again through the CLI, scored against the case's expected.toml.

    python tools/bench_zoo.py [--case NAME ...] [--json FILE]

For each case: `rootcause analyze SPEC#A SPEC#B --out TMP --from-run CASE/capture/run`, TMP
holding a copy of the capture's plan.json and bundle manifests (CASE/capture/analyze/), then
attribution.json is read (the layout rootcause/report/view.py reads). Columns:

- slower: the measured whole-graph delta names the expected slower variant (a null case: the
  delta is not significant)
- top unit: the unit with the largest |delta| has exactly the expected kernels (every kernel of
  its two sides matches a pattern of expected.top_unit_kernels and every pattern a kernel); an
  empty top_unit_kernels on a case that is not null (a regression outside the kernels): no unit is
  significant; expected.also_significant (lists of patterns): each names a significant unit too
- cause: expected.cause_rule is among the top unit's findings (a whole-graph rule such as
  launch-overhead: among the findings that belong to no unit); cause_rule = "none" (a cause no
  rule reads, such as uncoalesced access): the top unit is marked unexplained, which the
  analyzer does when only descriptive findings (bandwidth, schedule) fired and it says so in
  cannot_conclude: declining to blame is the right answer there
- false: findings of a must_not_fire rule anywhere; on a null case, every finding
- closure: attribution.json's closure (units + residual over the whole-graph delta)
- hybrids: confirmed / built counterfactual hybrids (a refuted one can be right: a configuration
  hybrid that recovers a third of a unit whose rest lies in the executable's body); the totals
  also count the cases with hybrids where at least one confirms
- B/A: the capture's measured whole-graph medians (measurement.json), read without analyze, and
  whether the expected slower side is the measured one (a check of the zoo, not of the tool)

The totals are printed for all cases and again for the held-out ones (expected.toml's
`held_out = true`: built after the rules, their expectations written before any verdict).

Only the CLI is used (no rootcause imports): the modules are moving, the commands are not.
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ZOO = Path(__file__).resolve().parent.parent / "fixtures" / "zoo"


def cases(names: list[str] | None = None) -> list[Path]:
    """Case folders that have an expected.toml and a committed capture."""
    found = sorted(p.parent for p in ZOO.glob("*/expected.toml") if (p.parent / "capture" / "run").is_dir())
    return [c for c in found if not names or c.name in names]


def expected(case: Path) -> dict:
    doc = tomllib.loads((case / "expected.toml").read_text())
    exp = {**doc["expected"], **doc["case"]}
    also = exp.get("also_significant", [])
    if not all(isinstance(u, list) and all(isinstance(p, str) for p in u) for u in also):
        # a list of names would be read one character at a time, and score a right unit wrong
        raise ValueError(f"{case.name}/expected.toml: also_significant is a list of units, each a list of kernel "
                         f"patterns ([[\"a_kernel\"], [\"b*\"]]), got {also!r}")
    return exp


def analyze(case: Path, out: Path) -> tuple[dict | None, str]:
    """Run analyze --from-run on the committed capture; (attribution.json, stderr tail)."""
    exp = expected(case)
    capture = case / "capture"
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(capture / "analyze" / "plan.json", out / "plan.json")
    shutil.copytree(capture / "analyze" / "bundles", out / "bundles", dirs_exist_ok=True)
    spec = case / "variants.toml"
    cmd = [sys.executable, "-m", "rootcause", "analyze", f"{spec}#{exp['a']}", f"{spec}#{exp['b']}",
           "--out", str(out), "--from-run", str(capture / "run")]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ZOO.parent.parent)
    path = out / "attribution.json"
    if proc.returncode != 0 or not path.is_file():
        return None, (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return json.loads(path.read_text()), ""


def measured(case: Path) -> dict:
    """The capture's own whole-graph medians (measurement.json): B/A, independent of analyze."""
    exp = expected(case)
    plan = json.loads((case / "capture" / "analyze" / "plan.json").read_text())
    doc = json.loads((case / "capture" / "run" / "measurement.json").read_text())
    med = {k: doc["measurement"]["variants"][plan[k]]["median_s"] for k in ("a", "b")}
    ratio = med["b"] / med["a"]
    side = "B" if ratio > 1 else "A"
    return {"a_us": med["a"] * 1e6, "b_us": med["b"] * 1e6, "ratio": ratio,
            "as_expected": side == exp["slower"] if exp["slower"] != "none" else None}


def top_unit(att: dict) -> dict | None:
    units = att.get("units") or []
    return max(units, key=lambda u: abs(u["delta_ns"]["median"])) if units else None


def kernels_match(unit: dict | None, patterns: list[str]) -> bool:
    if unit is None:
        return not patterns
    names = list(unit.get("kernels_a") or []) + list(unit.get("kernels_b") or [])
    return (all(any(fnmatch.fnmatchcase(n, p) for p in patterns) for n in names)
            and all(any(fnmatch.fnmatchcase(n, p) for n in names) for p in patterns))


def _units_match(units: list[dict], top: dict | None, exp: dict) -> bool:
    """The top unit is the expected one (none significant, where none is expected), and every
    also_significant pattern list names a significant unit."""
    significant = [u for u in units if u.get("significant")]
    if not exp["top_unit_kernels"]:
        ok = not significant
    else:
        ok = kernels_match(top, exp["top_unit_kernels"])
    return ok and all(any(kernels_match(u, patterns) for u in significant)
                      for patterns in exp.get("also_significant", []))


def score(att: dict, exp: dict) -> dict:
    """One scoreboard row from an attribution document and the case's expectations."""
    whole = att["whole_graph"]
    delta = whole["delta_ns"]["median"]
    significant = bool(whole.get("significant"))
    null = exp["class"] == "null"
    if null:
        slower_ok = not significant
    else:
        slower_ok = significant and (delta > 0) == (exp["slower"] == "B")
    unit = top_unit(att)
    findings = att.get("findings") or []
    if null:
        false = len(findings)
        top_ok = True
        cause_ok = None
    else:
        mnf = set(exp["must_not_fire"])
        false = sum(1 for f in findings if f["rule"] in mnf or "*" in mnf)
        top_ok = _units_match(att.get("units") or [], unit, exp)
        unit_rules = {f["rule"] for f in (unit or {}).get("findings") or []}
        graph_rules = {f["rule"] for f in findings if f.get("unit") is None}
        if exp["cause_rule"] == "none":
            cause_ok = bool((unit or {}).get("unexplained"))
        else:
            cause_ok = exp["cause_rule"] in unit_rules | graph_rules
    hybrids = (att.get("confirmation") or {}).get("hybrids") or []
    return {"slower": slower_ok, "top": top_ok, "cause": cause_ok, "false": false,
            "closure": att.get("closure"), "hybrids": len(hybrids),
            "confirmed": sum(1 for h in hybrids if h.get("verdict") == "confirmed"),
            "rules": sorted({f["rule"] for f in findings}),
            "top_kernels": (list(unit.get("kernels_a") or []), list(unit.get("kernels_b") or [])) if unit else None}


def _pct(n: int, d: int) -> str:
    return f"{n}/{d} ({n / d:.0%})" if d else "0/0"


def summary(rows: list[dict]) -> str:
    """The scoreboard's totals over these rows."""
    ok = [r for r in rows if "error" not in r]
    real = [r for r in ok if r["class"] != "null"]
    gpu_closure = [r for r in ok if isinstance(r["closure"], (int, float))]
    within = sum(1 for r in gpu_closure if 0.95 <= r["closure"] <= 1.05)
    built = [r for r in real if r["hybrids"]]
    return (f"cases scored {len(ok)} of {len(rows)}; slower right {_pct(sum(r['slower'] for r in ok), len(ok))}; "
            f"top unit right {_pct(sum(r['top'] for r in real), len(real))}; "
            f"cause right {_pct(sum(bool(r['cause']) for r in real), len(real))}; "
            f"false findings {sum(r['false'] for r in ok)} (in {sum(1 for r in ok if r['false'])} cases); "
            f"closure within 95-105% {_pct(within, len(gpu_closure))}; "
            f"hybrids confirmed {sum(r['confirmed'] for r in ok)}/{sum(r['hybrids'] for r in ok)}; "
            f"cases with a confirming hybrid {_pct(sum(1 for r in built if r['confirmed']), len(built))} "
            "of those with hybrids")


def _mark(x) -> str:
    return "-" if x is None else ("yes" if x else "NO")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", action="append", help="only this case (repeatable)")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases(args.case):
            exp = expected(case)
            t0 = time.perf_counter()
            att, err = analyze(case, Path(tmp) / case.name)
            row = {"case": case.name, "class": exp["class"], "held_out": bool(exp.get("held_out")),
                   "seconds": time.perf_counter() - t0, "measured": measured(case)}
            row.update(score(att, exp) if att else {"error": err})
            rows.append(row)
    head = (f"{'case':26} {'class':21} {'B/A':>14} {'slower':6} {'top':4} {'cause':5} {'false':5} {'closure':8} "
            f"{'hybrids':8} rules")
    print(head)
    print("-" * len(head))
    for r in rows:
        m = r["measured"]
        ba = f"{m['ratio']:.2f}x" + ("" if m["as_expected"] is None else " ok" if m["as_expected"] else " NOT")
        if "error" in r:
            print(f"{r['case']:26} {r['class']:21} {ba:>14} analyze failed: {r['error']}")
            continue
        closure = f"{r['closure']:.0%}" if isinstance(r["closure"], (int, float)) else "n/a"
        print(f"{r['case']:26} {r['class']:21} {ba:>14} {_mark(r['slower']):6} {_mark(r['top']):4} {_mark(r['cause']):5} "
              f"{r['false']:<5} {closure:8} {r['confirmed']}/{r['hybrids']:<6} {', '.join(r['rules'])}")
    print("-" * len(head))
    expect = [r for r in rows if r["measured"]["as_expected"] is not None]
    print(f"measured slower side as expected in {_pct(sum(r['measured']['as_expected'] for r in expect), len(expect))} "
          f"non-null cases (measurement.json, without analyze)")
    print(f"all cases: {summary(rows)}")
    held = [r for r in rows if r["held_out"]]
    if held:
        print(f"held-out cases (built after the rules, README.md's held-out section): {summary(held)}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
