"""The one protocol between rootcause and the Python children it starts (a build in TVM's worker
or in a toolchain's environment, a measuring child, a profiler capture, a CPU profile in another
runtime's environment).

A child is `python -m MODULE ...` started by `start`/`run` with `python_env`: the spec's files and
rootcause's own modules are imported, never a file that happens to lie in the working directory
(PYTHONSAFEPATH keeps `-m` from putting it first on sys.path), and the start-up hooks
(PYTHONSTARTUP, PYTHONBREAKPOINT) do not run. The child ends through `serve`, which writes one result envelope as JSON:

    {"ok": true,  "result": <the function's value>}
    {"ok": false, "error": {"kind": "usage" | "tool" | "internal", "message": "...", "log": "..."}}

and the parent reads it back with `result`, which returns the value or raises the typed error the
child raised (errors.UsageError, errors.ToolFailed, errors.InternalError). A child that died
without an envelope (a crash in the compiler or runtime, a signal, memory) is a ToolFailed that
quotes the first error line of its own output and names the log where the rest is kept.
"""
from __future__ import annotations

import functools
import json
import os
import re
import signal
import subprocess
import sys
import traceback
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rootcause.errors import InternalError, ToolFailed, UsageError
from rootcause.fileio import ROOTS_VAR, held_roots, write_atomic

# Hooks that would make a child run something no spec declared. The user site and PYTHONHOME stay:
# they are where the user's own installation lives, and the child must import what the parent does.
_UNSAFE = ("PYTHONSTARTUP", "PYTHONINSPECT", "PYTHONBREAKPOINT")


def python_env(extra: dict[str, str] | None = None, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a Python child: base (default os.environ) with PYTHONSAFEPATH set (so
    `-m` does not put the working directory first on sys.path), the start-up hooks removed and
    this process's output roots passed on (the child's writes into an output are checked as its
    parent's: no write through a link, no user's file replaced), then extra."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in _UNSAFE}
    env["PYTHONSAFEPATH"] = "1"
    env[ROOTS_VAR] = os.pathsep.join(str(root) for root in held_roots())
    env.update(extra or {})
    return env


PR_SET_PDEATHSIG = 1


def tied() -> dict[str, Any]:
    """The Popen keyword arguments of every long-running child (a build worker, a compiler, a
    measuring child): the kernel sends it SIGKILL when rootcause dies, also by SIGKILL, which no
    handler of ours sees (Linux PR_SET_PDEATHSIG, set between fork and exec; elsewhere nothing).

    prctl is looked up here, in the parent, so all the child runs before exec is that one foreign
    call: no import, no dlopen, nothing that waits on a lock another thread of the parent held at
    the fork (a runtime measured in this process runs threads: IREE's task executor, XLA's). jax
    warns of a deadlock at any fork with such a callback ("os.fork() was called"); this one cannot
    deadlock that way, so its warning is not shown."""
    prctl = _prctl()
    if prctl is None:
        return {}
    warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
    return {"preexec_fn": functools.partial(prctl, PR_SET_PDEATHSIG, signal.SIGKILL)}


@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's prctl, or None where there is none (not Linux)."""
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (AttributeError, OSError):
        return None


def run(cmd: Sequence[str], *, env: dict[str, str], timeout: float | None = None,
        **kwargs: Any) -> subprocess.CompletedProcess:
    """subprocess.run for a child, its output captured as text; a child past its timeout is killed
    (subprocess.run does so) and reported as a ToolFailed. ^C and SIGTERM in the parent unwind
    through subprocess.run, which kills the child first."""
    try:
        return subprocess.run(list(cmd), env=env, capture_output=True, text=True, errors="replace",
                              timeout=timeout, **tied(), **kwargs)
    except subprocess.TimeoutExpired:
        raise ToolFailed(f"{Path(cmd[0]).name} {' '.join(cmd[1:3])}: no answer after {timeout:g} s; stopped") from None


def result(proc: subprocess.CompletedProcess, envelope: Path, what: str, log: Path | None = None) -> Any:
    """The value the child's `serve` wrote to envelope, or its typed failure. `what` says which
    tool ran ('the TVM build of x'); `log` is where the child's output was kept."""
    doc = read_envelope(envelope)
    if doc is not None:  # the child's own file; anything else at its place is left as it is
        envelope.unlink(missing_ok=True)
    if doc is not None and doc.get("ok") is True:
        return doc.get("result")
    if doc is not None:
        raise_failure(doc, what, log)
    text = (proc.stdout or "") + (proc.stderr or "")
    status = f"signal {-proc.returncode}" if proc.returncode < 0 else f"status {proc.returncode}"
    raise ToolFailed(f"{what} ended with {status}: {first_error_line(text)}" + (f" (log: {log})" if log else ""))


def raise_failure(doc: dict[str, Any], what: str, log: Path | None = None) -> None:
    """Raise the typed failure a child's envelope (or a reply of the same shape) carries."""
    error = doc.get("error") if isinstance(doc.get("error"), dict) else {}
    kind, message = error.get("kind"), str(error.get("message") or "no message")
    where = error.get("log") or (str(log) if log else None)
    if kind == "usage":
        raise UsageError(message)
    if kind == "tool":
        raise ToolFailed(f"{what} failed: {message}" + (f" (log: {where})" if where else ""))
    raise InternalError(f"{what}: {message}", where)


def read_envelope(path: Path) -> dict[str, Any] | None:
    """The envelope at path, or None: none there, not one, or a link (a child never writes one)."""
    if path.is_symlink():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("ok"), bool) else None


# Lines that carry a tool's own diagnosis: "nvcc fatal   : ...", "error: ...", "x.mlir:3:5: error: ...".
_ERROR_LINE = re.compile(r"\b(fatal|error)\b\s*:\s*\S|^\S+:\d+:\d+: (fatal )?error", re.IGNORECASE)
_TRACEBACK_NOISE = re.compile(r"^\s*(File \"|Traceback \(most recent call last\)|\^+$|\d+: 0x)")


def first_error_line(text: str) -> str:
    """The tool's own first error line in its output (what a person would quote), else the last
    line of a Python traceback, else the last line; one line, at most 300 characters."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return "no output"
    own = [line for line in lines if _ERROR_LINE.search(line) and not _TRACEBACK_NOISE.match(line)]
    python = [line for line in lines if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Exit): ", line)]
    line = (own or python or lines)[0 if own else -1]
    return line[:300]


# ---- the child's side -----------------------------------------------------------------------

def serve(function: Callable[[], Any], envelope: Path, log: Path | None = None) -> int:
    """Run function in a child and write its envelope; the child's exit status (0, 2, 3 or 4).

    SystemExit raised by the code the child runs (a spec's script calling sys.exit) is the
    spec's failure, not the child's way to end: it is reported with its place."""
    try:
        doc: dict[str, Any] = {"ok": True, "result": function()}
    except (Exception, SystemExit) as err:  # noqa: BLE001  every failure goes to the parent, typed
        doc = failure(err, log)
        if doc["error"]["kind"] != "usage":  # the tool's whole output or our traceback, for the log
            shown = (err.__cause__ or err) if isinstance(err, ToolFailed) else err
            traceback.print_exception(shown, file=sys.stderr)
    try:  # staged and renamed: never written through a link, never over a user's file in an output
        write_atomic(envelope, json.dumps(doc, default=str))
    except UsageError as err:  # such a file is in the way: the parent reads this line
        print(f"error: {err}", file=sys.stderr)
        return _STATUS["usage"]
    return _STATUS[doc["error"]["kind"]] if not doc["ok"] else 0


_STATUS = {"usage": 2, "tool": 3, "internal": 4}


def failure(err: BaseException, log: Path | None = None) -> dict[str, Any]:
    """The envelope of a child that failed with err: 'usage' (bad input: a spec, a file, a spec's
    script calling sys.exit), 'tool' (the compiler, runtime or profiler), 'internal' (a bug of
    rootcause's, its traceback kept in the log)."""
    from parsers import ParseError

    if isinstance(err, (UsageError, ParseError)):
        return _failure("usage", str(err))
    if isinstance(err, SystemExit):  # raised by code the child runs, not the child's way to end
        return _failure("usage", f"{user_place(err)}: called sys.exit({err.code!r})")
    if isinstance(err, ToolFailed):
        return _failure("tool", str(err), log)
    return _failure("internal", f"{type(err).__name__}: {err}", log)


def tool_failure(err: Exception, package: str) -> ToolFailed | None:
    """A ToolFailed quoting err's first error line when err was raised inside the named package
    (the compiler or runtime the child drives); None when it came from rootcause itself."""
    module = sys.modules.get(package)
    root = os.path.dirname(getattr(module, "__file__", None) or "") if module else ""
    if not root or not any(frame.f_code.co_filename.startswith(root + os.sep)
                           for frame, _ in traceback.walk_tb(err.__traceback__)):
        return None
    failure = ToolFailed(f"{package}: {first_error_line(str(err) or type(err).__name__)}")
    failure.__cause__ = err
    return failure


def _failure(kind: str, message: str, log: Path | None = None) -> dict[str, Any]:
    return {"ok": False, "error": {"kind": kind, "message": message, "log": str(log) if log else None}}


def user_place(err: BaseException) -> str:
    """'file:line' of the deepest frame outside rootcause and the standard library: where the
    spec's own code raised; 'the spec's code' when none is found."""
    root = Path(__file__).resolve().parents[1]
    own = (str(root / "rootcause") + os.sep, str(root / "parsers") + os.sep, os.path.dirname(os.__file__))
    place = "the spec's code"
    for frame, line in traceback.walk_tb(err.__traceback__):
        file = frame.f_code.co_filename
        if not file.startswith(own) and not file.startswith("<"):
            place = f"{Path(file).name}:{line}"
    return place
