"""Processes as Linux's /proc shows them, for tests of what a command leaves running (and for
tests/conftest.py, which ends a test run's descendants on SIGTERM)."""
from __future__ import annotations

from pathlib import Path


def _stat_fields(pid: int | str) -> list[str] | None:
    """The fields of /proc/PID/stat after '(comm)': state, parent, ...; None when it has ended."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def parents() -> dict[int, list[int]]:
    """Each process's children, by parent pid."""
    out: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = _stat_fields(stat.parent.name)
        if fields is not None:
            out.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    return out


def children(pid: int) -> list[int]:
    """Processes whose parent is pid."""
    return parents().get(pid, [])


def descendants(pid: int) -> list[int]:
    """The processes below pid, children before their own children."""
    tree = parents()
    out, todo = [], list(tree.get(pid, []))
    while todo:
        child = todo.pop(0)
        out.append(child)
        todo.extend(tree.get(child, []))
    return out


def alive(pid: int) -> bool:
    """Running: a zombie has ended (its parent has not reaped it yet)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""
