"""What IREE's dispatch names tell alignment and diagnosis across two builds.

A dispatch symbol is '<entry>$async_dispatch_<ordinal>_<op kind and shape>': entry and ordinal
change between builds of one graph (another batch size, one dispatch more before it), the op
kind and shape do not.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

from rootcause.model import AlignmentTier, CatalogKernel

# '<owner>$async_dispatch_<ordinal>_<op kind and shape>': the function it was named after, and the rest
_DISPATCH = re.compile(r"^(.*?)(?:[$_]async)?_dispatch_\d+_(.+)$")


def dispatch_key(name: str) -> str | None:
    """IREE dispatch symbol without its entry and ordinal: the op kind and shape."""
    m = _DISPATCH.match(name)
    return m.group(2) if m else None


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


def dispatch_owner(name: str) -> str | None:
    """The function a dispatch symbol was named after ('prefill_bs2$async_dispatch_0_..' ->
    'prefill_bs2'): where it is not the entry that runs it, one executable serves both."""
    m = _DISPATCH.match(name)
    return (m.group(1) or None) if m else None


def vector_step(schedule: dict[str, Any]) -> tuple[int, dict[str, list[int]]] | None:
    """(elements one vector step computes, the vector tile levels read) of a CPU dispatch: per
    loop, the largest of its vector tile sizes (common parallel, reduction, inner parallel levels),
    multiplied; None where the schedule has no iree_cpu lowering_config with vector tiles."""
    if schedule.get("lowering_config_attr") != "iree_cpu.lowering_config":
        return None
    levels = {k: v for k, v in (schedule.get("lowering_config") or {}).items()
              if k.startswith("vector_") and isinstance(v, list) and all(isinstance(x, int) for x in v)}
    if not levels:
        return None
    loops = max(len(v) for v in levels.values())
    sizes = [max([v[i] for v in levels.values() if i < len(v) and v[i] > 0] or [1]) for i in range(loops)]
    return math.prod(sizes), levels
