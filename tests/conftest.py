"""The suite's own process handling: SIGTERM ends the run and every process it started.

Many tests start compilers, runtimes and rootcause commands as child processes; killing pytest
alone would leave them running (and a registry install or a build going on for minutes). On
SIGTERM the run signals its descendants, then stops as on ^C (pytest prints its summary)."""
from __future__ import annotations

import os
import signal
from pathlib import Path


def descendants(pid: int) -> list[int]:
    """The processes below pid, children before their own children (Linux /proc; none elsewhere)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended while being read
            continue
        ppid = int(text[text.rindex(")") + 2:].split()[1])  # after "(comm) state": the parent
        parents.setdefault(ppid, []).append(int(stat.parent.name))
    out, todo = [], list(parents.get(pid, []))
    while todo:
        child = todo.pop(0)
        out.append(child)
        todo.extend(parents.get(child, []))
    return out


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
