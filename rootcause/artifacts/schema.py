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
from typing import Any, Callable, cast

from rootcause.errors import InternalError, UsageError

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
    if not fits(value, shape):
        _explain(value, shape, file, path)
        raise InternalError(f"{file}: {path or '(top level)'}: off its shape, and no key was found to name")


def fits(value: Any, shape: Any) -> bool:
    """Whether value has the shape: check's walk without the key paths, which only an error needs
    (a 5 MB attribution has about 100,000 values)."""
    return _compiled(shape)(value)


# id -> (the shape, its test); holding the shape keeps its id from being reused by another object
_COMPILED: dict[int, tuple[Any, Callable[[Any], bool]]] = {}


def _compiled(shape: Any) -> Callable[[Any], bool]:
    """The shape's test as nested functions, built once per shape: a document's 100,000 values
    are then tested without asking of each what kind of shape it is."""
    found = _COMPILED.get(id(shape))
    if found is None:
        found = _COMPILED[id(shape)] = (shape, _compile(shape))
    return found[1]


def _compile(shape: Any) -> Callable[[Any], bool]:
    if shape is ANY:
        return lambda value: True
    if isinstance(shape, Opt):
        inner = _compile(shape.shape)
        return lambda value: value is None or inner(value)
    if isinstance(shape, dict):
        return _object_test([(name, optional, _compile(sub)) for name, optional, sub in _keys(shape)])
    if isinstance(shape, list):
        item = _compile(shape[0])
        return lambda value: isinstance(value, list) and all(map(item, value))
    if isinstance(shape, Map):
        item = _compile(shape.shape)
        return lambda value: isinstance(value, dict) and all(map(item, value.values()))
    return _scalar_test(shape if isinstance(shape, tuple) else (shape,))


def _object_test(keys: list[tuple[str, bool, Callable[[Any], bool]]]) -> Callable[[Any], bool]:
    def test(value: Any) -> bool:
        if not isinstance(value, dict):
            return False
        for name, optional, sub in keys:
            if name in value:
                if not sub(value[name]):
                    return False
            elif not optional:
                return False
        return True
    return test


def _scalar_test(kinds: tuple[type, ...]) -> Callable[[Any], bool]:
    """_scalar_problem(value, kinds) is None, with the common Python values decided by their type
    alone: a string, null or boolean where its type is allowed, an int where any int is, a
    Python number in NUM's range."""
    always: set[type] = {kind for kind in kinds if kind in (str, bool, type(None))}
    if int in kinds and kinds != NUM:
        always.add(int)
    if kinds == NUM:
        def number(value: Any) -> bool:
            if type(value) is int or type(value) is float:
                return -LARGEST <= value <= LARGEST  # false for NaN and infinities
            return _scalar_problem(value, kinds) is None
        return number
    return lambda value: type(value) in always or _scalar_problem(value, kinds) is None


def _keys(shape: dict[str, Any]) -> list[tuple[str, bool, Any]]:
    """An object shape's (key, optional, shape) triples (read when a shape is compiled, and by the
    walk that names a key off its shape)."""
    return [(key[:-1], True, sub) if key.endswith("?") else (key, False, sub) for key, sub in shape.items()]


def _scalar_problem(value: Any, kinds: tuple[type, ...]) -> str | None:
    """What is wrong with a value of these types (its message), or None when it fits."""
    value = _scalar(value)
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
        name = "number" if kinds == NUM else " or ".join(_name(k) for k in kinds)
        return f"expected {name}, got {_name(type(value))}"
    if isinstance(value, float) and (int in kinds or float in kinds) and not math.isfinite(value):
        return f"{value} is not a finite number"
    if kinds == NUM and abs(cast(float, value)) > LARGEST:
        return f"{value} is beyond any value rootcause writes ({LARGEST:g})"
    return None


def _scalar(value: Any) -> Any:
    """A NumPy scalar as its Python value (a document not yet written holds them; json_text
    writes their values), anything else as it is."""
    if getattr(value, "shape", None) == () and callable(getattr(value, "item", None)):
        return value.item()
    return value


def _explain(value: Any, shape: Any, file: str, path: str) -> None:
    """Raise the UsageError that names the first value off its shape."""
    if shape is ANY:
        return
    if isinstance(shape, Opt):
        if value is not None:
            _explain(value, shape.shape, file, path)
        return
    if isinstance(shape, dict):
        _expect(value, dict, file, path)
        for name, optional, sub in _keys(shape):
            if name not in value:
                if not optional:
                    raise UsageError(f"{file}: key '{_join(path, name)}': missing")
                continue
            _explain(value[name], sub, file, _join(path, name))
        return
    if isinstance(shape, list):
        _expect(value, list, file, path)
        for i, item in enumerate(value):
            _explain(item, shape[0], file, f"{path}[{i}]")
        return
    if isinstance(shape, Map):
        _expect(value, dict, file, path)
        for key, item in value.items():
            _explain(item, shape.shape, file, _join(path, str(key)))
        return
    _expect(value, shape, file, path)


def _expect(value: Any, kind: type | tuple[type, ...], file: str, path: str) -> None:
    problem = _scalar_problem(value, kind if isinstance(kind, tuple) else (kind,))
    if problem is not None:
        raise UsageError(f"{file}: key '{path or '(top level)'}': {problem}")


def _name(kind: type) -> str:
    return {dict: "an object", list: "a list", str: "a string", int: "an integer", float: "a number",
            bool: "true or false", type(None): "null"}.get(kind, kind.__name__)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
