"""Edited artifacts: every field of real files rootcause reads back, replaced by values of other
types, each read by the command a user would run on it.

- attribution.json (committed reports under gallery/): `rootcause report FILE --format F`;
- manifest.json given as a catalog: `rootcause compare` of the pool_fusion H200 captures with
  `--catalog-a FILE`.

The contract: exit 0 (the edit did not matter) or exit 2 with one line; exit 4 (an internal
error) or more than one line is a break, counted and grouped by its message. Each edit runs
through rootcause.cli.main in this process (fast; the CLI's own handlers decide the status).

    .venv/bin/python benchmarks/campaign_edits.py [--format markdown|html] [--values 7]

Exit status 1 when anything broke.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from mutation import edited, leaves  # noqa: E402  (tests/mutation.py, as fuzz_cli.py uses it)
from rootcause import cli  # noqa: E402

VALUES = (None, "x", -1, [], {}, True, 1e308)
RUN = ROOT / "fixtures" / "captures" / "h200-2026-12-02-run"
ATTRIBUTIONS = ["pool_fusion_h200_cupti", "pool_fusion_h200_analyze", "prefill_dedup_h200_analyze",
                "einsum_cpu_local_task"]
MANIFESTS = [ROOT / "gallery" / "inputs" / "pool_fusion_off.manifest.json"]


def campaign(source: Path, argv, values) -> tuple[int, Counter]:
    doc = json.loads(source.read_text())
    tries, breaks = 0, Counter()
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / source.name
        for path in leaves(doc):
            for value in values:
                file.write_text(json.dumps(edited(doc, path, value)))
                err = io.StringIO()
                with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                    status = cli.main(argv(file, Path(tmp)))
                tries += 1
                if status not in (0, 2) or err.getvalue().count("\n") > 1:
                    breaks[err.getvalue().split(": ", 2)[-1][:100]] += 1
    return tries, breaks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--format", choices=("markdown", "html"), default="markdown")
    parser.add_argument("--values", type=int, default=len(VALUES), help="how many of the replacement values")
    args = parser.parse_args()
    values = VALUES[:args.values]
    total_tries, total_breaks = 0, 0
    jobs = [(ROOT / "gallery" / name / "attribution.json",
             lambda f, tmp: ["report", str(f), "--format", args.format, "--out", str(tmp / "r.out")])
            for name in ATTRIBUTIONS]
    jobs += [(m, lambda f, tmp: ["compare", str(RUN / "pool_fusion_off.cupti.json"), str(RUN / "pool_fusion_on.cupti.json"),
                                 "--catalog-a", str(f), "--out", str(tmp / "o")]) for m in MANIFESTS]
    for source, argv in jobs:
        tries, breaks = campaign(source, argv, values)
        total_tries, total_breaks = total_tries + tries, total_breaks + sum(breaks.values())
        print(f"{source.relative_to(ROOT)}: {tries} edits, {sum(breaks.values())} breaks")
        for message, n in breaks.most_common(5):
            print(f"    {n} x {message}")
    print(f"total: {total_tries} edits, {total_breaks} breaks")
    return 1 if total_breaks else 0


if __name__ == "__main__":
    sys.exit(main())
