"""Text that reaches a terminal or a Markdown page from outside (kernel names from a capture,
paths, a tool's error line): control characters escaped, so that no escape sequence, title code
or carriage return is acted on, and one-line messages stay one line."""
from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: object) -> str:
    """str(text) with every control character but the tab written as an escape (\\n, \\x1b, ...)."""
    return _CONTROL.sub(_escape, str(text))


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return {"\n": "\\n", "\r": "\\r"}.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")
