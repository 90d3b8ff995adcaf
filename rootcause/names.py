"""Kernel names as people read them: C++ signatures of 2,000 characters shortened to what tells
kernels apart (reports and finding sentences; the JSON keeps every name whole)."""
from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Iterable


def did_you_mean(name: str, valid: Iterable[str]) -> str:
    """' (did you mean "X"?)' for the valid name closest to a misspelt one, or '' when none is
    close: the hint every unknown-name error ends with (spec keys, passes, compiler options)."""
    close = difflib.get_close_matches(str(name), sorted(valid), n=1)
    return f" (did you mean \"{close[0]}\"?)" if close else ""


def short(name: str, limit: int = 56) -> str:
    """A kernel name people can read in `limit` characters: readable(), then cut."""
    return cut(readable(name, limit), limit)


def cut(name: str, limit: int) -> str:
    """The name in `limit` characters, an ellipsis marking what was cut (host op names: kept as written)."""
    return name if len(name) <= limit else name[: limit - 1] + "\u2026"


_QUALIFIER = re.compile(r"(?:\(anonymous namespace\)|[A-Za-z_]\w*)::")


@functools.lru_cache(maxsize=8192)  # a report shows a name in several places; a signature takes 0.1 ms
def readable(name: str, limit: int = 56) -> str:
    """A C++ kernel signature as people read it: no return type, no parameter list, no namespaces
    ('void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>, ...>(int, ...)'
    -> 'vectorized_elementwise_kernel<4, AddFunctor<float>, ...>'); template arguments nested two
    deep or more are elided, the deepest first, only while the name is longer than `limit`, so the
    outer arguments that tell two instantiations apart stay. Names without '::' or '<' are kept."""
    if "::" not in name and "<" not in name:
        return name
    head = name.replace("(anonymous namespace)::", "")
    head = _at_depth_zero_last_word(_before_params(head))
    head = _QUALIFIER.sub("", head).replace("> >", ">>")
    for depth in (3, 2):
        if len(head) <= limit:
            break
        head = _elide_templates(head, depth)
    return head or name


def _before_params(name: str) -> str:
    """The part before the parameter list: the first '(' outside template brackets."""
    depth = 0
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif ch == "(" and depth == 0:
            return name[:i]
    return name


def _at_depth_zero_last_word(text: str) -> str:
    """Drop a leading return type and specifiers: the last space-separated word outside brackets."""
    depth, cut = 0, 0
    for i, ch in enumerate(text):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif ch == " " and depth == 0 and text[i + 1:i + 2] not in ("", "<"):
            cut = i + 1
    return text[cut:].strip()


def _elide_templates(text: str, depth: int) -> str:
    """Template arguments inside `depth` or more brackets replaced by '\u2026'."""
    out, level = [], 0
    for ch in text:
        if ch == "<":
            level += 1
            if level <= depth:
                out.append(ch if level < depth else "<\u2026")
        elif ch == ">":
            if level <= depth:
                out.append(ch)
            level -= 1
        elif level < depth:
            out.append(ch)
    return "".join(out)
