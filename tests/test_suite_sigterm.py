"""SIGTERM to a test run ends it and the processes its tests started (tests/conftest.py)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.procs import alive, descendants

ROOT = Path(__file__).resolve().parents[1]

SLEEPER = '''
import subprocess, sys, time
from pathlib import Path

def test_starts_a_grandchild_and_waits():
    child = subprocess.Popen([sys.executable, "-c", "import subprocess; subprocess.run(['sleep', '300'])"])
    Path(PIDS).write_text(str(child.pid))
    time.sleep(300)
'''


def test_sigterm_ends_the_run_and_its_children(tmp_path):
    pids = tmp_path / "pids"
    (tmp_path / "test_sleeper.py").write_text(f"PIDS = {str(pids)!r}\n" + SLEEPER)
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                            str(tmp_path / "test_sleeper.py")], cwd=ROOT, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while not pids.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    child = int(pids.read_text())
    deadline = time.monotonic() + 30
    while len(descendants(child)) < 1 and time.monotonic() < deadline:  # the grandchild has started
        time.sleep(0.1)
    started = [child, *descendants(child)]
    assert len(started) >= 2
    os.kill(run.pid, signal.SIGTERM)
    out, _ = run.communicate(timeout=30)
    assert "SIGTERM: the run stops" in out, out
    deadline = time.monotonic() + 10
    while any(alive(p) for p in started) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in started if alive(p)]
