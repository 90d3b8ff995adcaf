"""What IREE's dispatch names tell alignment and diagnosis across two builds.

A dispatch symbol is '<entry>$async_dispatch_<ordinal>_<op kind and shape>': entry and ordinal
change between builds of one graph (another batch size, one dispatch more before it), the op
kind and shape do not.
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Any

from rootcause.model import AlignmentTier, CatalogKernel

_DISPATCH = re.compile(r"^.*?(?:[$_]async)?_dispatch_\d+_(.+)$")


def dispatch_key(name: str) -> str | None:
    """IREE dispatch symbol without its entry and ordinal: the op kind and shape."""
    m = _DISPATCH.match(name)
    return m.group(1) if m else None


def normalize_op(op: str) -> str:
    """'<entry>/<dispatch symbol>' -> '<entry>/<op kind and shape>' (IREE source-op ids differ by
    dispatch ordinal and owning function between builds); other ids pass unchanged."""
    entry, sep, rest = op.partition("/")
    key = dispatch_key(rest) if sep else None
    return f"{entry}/{key}" if key else op


def _dispatch_name_keys(names: dict[str, list[str]], left: dict[str, list[str]],
                        info: dict[str, dict[str, Any]]) -> tuple[dict[str, list[str]], None]:
    """Dispatches not yet matched whose key is unique on each side."""
    keys = {}
    for v in "ab":
        counts = Counter(dispatch_key(n) for n in left[v])
        for n in left[v]:
            key = dispatch_key(n)
            if key and counts[key] == 1:
                keys[f"{v}:{n}"] = [key]
    return keys, None


TIERS = (AlignmentTier("dispatch-name", _dispatch_name_keys),)


def thread_work(kernel: CatalogKernel) -> dict[str, Any] | str | None:
    """Threads that own work in a TileAndFuse dispatch (rootcause.frontends.iree.work), why that
    was not checked, or None where the catalog gives no IREE tiling of the kernel."""
    from rootcause.frontends.iree.work import threads_doing_work

    if not (kernel.schedule or {}).get("lowering_config"):
        return None
    work = threads_doing_work(kernel.name, kernel.schedule)
    return work if work is not None else ("not checked: not a TileAndFuse dispatch whose thread tiles over its "
                                          "static loop ranges reproduce its workgroup size")
