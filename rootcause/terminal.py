"""Text that reaches a terminal or a Markdown page from outside (kernel names from a capture,
paths, a tool's error line): control characters escaped, so that no escape sequence, title code
or carriage return is acted on, and one-line messages stay one line."""
from __future__ import annotations

import contextlib
import re
from typing import Any, Callable, Iterator

_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: object) -> str:
    """str(text) with every control character but the tab written as an escape (\\n, \\x1b, ...)."""
    return _CONTROL.sub(_escape, str(text))


def progress_bar(total: float, what: str, unit: str = "s") -> Any:
    """A tqdm bar on stderr for a long step (a timing loop of seconds), where stderr is a
    terminal: a log or a pipe gets the timestamped lines alone. ROOTCAUSE_PROGRESS=0 turns it off.
    Update it with .update(n) and close it; disabled, both do nothing."""
    import os
    import sys

    from tqdm import tqdm

    off = not sys.stderr.isatty() or os.environ.get("ROOTCAUSE_PROGRESS") == "0"
    return tqdm(total=total, desc=what, unit=unit, disable=off, leave=False, file=sys.stderr,
                bar_format="{desc}: {bar} {n:.0f}/{total:.0f} {unit}")


@contextlib.contextmanager
def ticker(what: str, step: Callable[[], str] = lambda: "") -> Iterator[None]:
    """While the block runs, one line on a terminal's stderr: what, the current step (step(), e.g.
    the pass a build is in) and the seconds so far, redrawn when the step changes (read ten times
    a second: a step of a fifth of a second is shown) and at least twice a second; erased at the end.
    Where stderr is not a terminal (a log, a pipe) or ROOTCAUSE_PROGRESS=0, nothing is drawn."""
    import os
    import sys
    import threading
    import time

    if not sys.stderr.isatty() or os.environ.get("ROOTCAUSE_PROGRESS") == "0":
        yield
        return
    start, done = time.monotonic(), threading.Event()

    def draw() -> None:
        shown, drawn_at = None, start
        while not done.wait(0.1):
            now = step()
            if now == shown and time.monotonic() - drawn_at < 0.5:
                continue
            shown, drawn_at = now, time.monotonic()
            line = f"{what}{': ' + now if now else ''} ({drawn_at - start:.0f} s)"
            sys.stderr.write("\r\x1b[K" + printable(line)[:200])
            sys.stderr.flush()

    thread = threading.Thread(target=draw, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        sys.stderr.write("\r\x1b[K")
        sys.stderr.flush()


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return {"\n": "\\n", "\r": "\\r"}.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")
