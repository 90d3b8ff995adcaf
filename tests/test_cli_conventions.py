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
