"""The suite's own process handling: SIGTERM ends the run and every process it started.

Many tests start compilers, runtimes and rootcause commands as child processes; killing pytest
alone would leave them running (and a registry install or a build going on for minutes). On
SIGTERM the run signals its descendants, then stops as on ^C (pytest prints its summary)."""
from __future__ import annotations

import os
import signal

from tests.procs import descendants


def _end_run(signum: int, frame) -> None:
    started = descendants(os.getpid())
    for pid in started:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:  # ended meanwhile
            pass
    raise KeyboardInterrupt(f"SIGTERM: the run stops; the {len(started)} processes it started were asked to end")


def pytest_configure(config) -> None:
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: its controller handles the signal
        return
    signal.signal(signal.SIGTERM, _end_run)
