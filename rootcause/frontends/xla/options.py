"""The spec's [xla] table: XLA debug options handed to the compile (jax's compiler_options), e.g.
`options = { xla_disable_hlo_passes = "fusion" }`.

An option is an XLA DebugOptions field (`xla_...`) whose value is a boolean, a number or a name
list; options that dump, read or write files are refused: a spec is data."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

from rootcause.errors import UsageError
from rootcause.spec import SpecFiles, table_keys

KEYS = ("options",)
_UNSAFE_WORDS = frozenset(("dump", "file", "files", "path", "dir", "directory", "profile", "output",
                           "autotune", "cache", "log", "plugin", "library", "cuda", "ptxas", "nvlink"))
_VALUE = re.compile(r"^[A-Za-z0-9_.,:+-]*$")


@dataclass
class XlaOptions:
    options: dict[str, Any] = field(default_factory=dict)  # compiler_options for jax's compile


def from_dict(d: dict[str, Any]) -> XlaOptions:
    return XlaOptions(dict(d.get("options", {})))


def unsafe_option(name: str, value: Any) -> str | None:
    """Why an XLA option is refused (None: it only steers the compile)."""
    if not re.match(r"^xla_[a-z0-9_]+$", name):
        return "not an XLA debug option (xla_...)"
    bad = sorted(set(name.split("_")) & _UNSAFE_WORDS)
    if bad:
        return f"'{bad[0]}' options read or write files outside the compile"
    if isinstance(value, bool) or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return None
    if not isinstance(value, str) or not _VALUE.match(value):
        return "its value must be a boolean, a number or a name (a path is never a compile option)"
    return None


def check(table: Any, place: Callable[[str | None], str], files: SpecFiles) -> XlaOptions:
    table_keys(table, KEYS, place)
    raw = table.get("options", {})
    if not isinstance(raw, dict):
        raise UsageError(f"{place('options')}: must be a table xla_option = value")
    for name, value in raw.items():
        why = unsafe_option(name, value)
        if why:
            raise UsageError(f"{place('options')}.{name}: refused: {why}")
    return XlaOptions(dict(raw))
