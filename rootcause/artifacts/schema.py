"""Shapes of the JSON files rootcause writes and reads back, checked on every read.

A file rootcause reads back may have been edited, truncated by hand or written by another
version; a field of the wrong type must stop the reader in one line that names the file and the
key, before any renderer or stage indexes into it. A shape is plain data:

- a type or a tuple of types: isinstance (bool is not a number; floats must be finite);
- NUM: a finite int or float of magnitude at most LARGEST;
- Opt(shape): the shape, or null;
- {"key": shape, "key?": shape}: an object with these keys (a trailing ? marks an optional
  one); other keys are allowed and not checked;
- [shape]: a list whose every item has the shape;
- Map(shape): an object whose every value has the shape (names as keys: kernels, variants);
- ANY: anything.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rootcause.errors import UsageError

ANY = object()
NUM = (int, float)
# Far above anything rootcause writes (epoch timestamps in ns are about 1.8e18, flop counts of a
# call 1e15) and far enough below the float range that sums and products of two such numbers stay
# finite in a renderer (an edited 1e308 overflowed to infinity, and the HTML figure's JSON failed).
LARGEST = 1e30


@dataclass(frozen=True)
class Opt:
    shape: Any


@dataclass(frozen=True)
class Map:
    shape: Any


def check(value: Any, shape: Any, file: str, path: str = "") -> None:
    """UsageError '<file>: key '<path>': expected ..., got ...' at the first value off its shape."""
    if shape is ANY:
        return
    if isinstance(shape, Opt):
        if value is not None:
            check(value, shape.shape, file, path)
        return
    if isinstance(shape, dict):
        _expect(value, dict, file, path)
        for key, sub in shape.items():
            name, optional = (key[:-1], True) if key.endswith("?") else (key, False)
            if name not in value:
                if not optional:
                    raise UsageError(f"{file}: key '{_join(path, name)}': missing")
                continue
            check(value[name], sub, file, _join(path, name))
        return
    if isinstance(shape, list):
        _expect(value, list, file, path)
        for i, item in enumerate(value):
            check(item, shape[0], file, f"{path}[{i}]")
        return
    if isinstance(shape, Map):
        _expect(value, dict, file, path)
        for key, item in value.items():
            check(item, shape.shape, file, _join(path, str(key)))
        return
    _expect(value, shape, file, path)


def _expect(value: Any, kind: type | tuple[type, ...], file: str, path: str) -> None:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if getattr(value, "shape", None) == () and callable(getattr(value, "item", None)):
        value = value.item()  # a NumPy scalar in a document not yet written (json_text writes its value)
    numeric = any(k in (int, float) for k in kinds)
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
        name = "number" if kinds == NUM else " or ".join(_name(k) for k in kinds)
        raise UsageError(f"{file}: key '{path or '(top level)'}': expected {name}, got {_name(type(value))}")
    if numeric and isinstance(value, float) and not math.isfinite(value):
        raise UsageError(f"{file}: key '{path}': {value} is not a finite number")
    if kinds == NUM and abs(value) > LARGEST:
        raise UsageError(f"{file}: key '{path}': {value} is beyond any value rootcause writes ({LARGEST:g})")


def _name(kind: type) -> str:
    return {dict: "an object", list: "a list", str: "a string", int: "an integer", float: "a number",
            bool: "true or false", type(None): "null"}.get(kind, kind.__name__)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
