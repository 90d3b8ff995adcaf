"""Command-line conventions a new user expects: `report` does not print a page of HTML into a
terminal (it does into a pipe or a file)."""
from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ATTRIBUTION = ROOT / "gallery" / "pool_fusion_h200_cupti" / "attribution.json"


def test_report_refuses_html_to_a_terminal():
    leader, follower = pty.openpty()
    try:
        done = subprocess.run([sys.executable, "-m", "rootcause", "report", str(ATTRIBUTION)], stdout=follower,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(follower)
        os.close(leader)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--out" in lines[0], done.stderr


def test_report_writes_html_into_a_pipe():
    done = subprocess.run([sys.executable, "-m", "rootcause", "report", str(ATTRIBUTION)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.lstrip().lower().startswith("<!doctype html")


def test_help_imports_no_analysis_or_runtime():
    """`rootcause COMMAND --help` builds one parser: it must not import pandas, a compiler or a
    runtime (they made `analyze --help` take 0.6 s; benchmarks/README.md has the times). Read
    from the interpreter's own import log, so the test does not depend on the machine's load."""
    from rootcause.cli import COMMANDS

    heavy = ("pandas", "tvm", "iree", "torch", "jax", "ray", "plotly")
    for command in ["", *COMMANDS]:
        argv = [sys.executable, "-X", "importtime", "-m", "rootcause", *([command] if command else []), "--help"]
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr[-500:]
        imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in proc.stderr.splitlines()
                    if line.startswith("import time:")}
        assert not imported & set(heavy), (command, sorted(imported & set(heavy)))
