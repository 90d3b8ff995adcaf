"""What every diagnosis rule works with: one unit's two sides (Side), the rule's context, the
finding record and its sentence, the kernel pair a rule compares, and whether a unit is slow
enough for a static difference to be named its cause."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from rootcause import gpus
from rootcause.analysis.tiers import frontend_tiers
from rootcause.analysis.result import Attribution, Finding, Unit
from rootcause.model import CatalogKernel, strip_kernel
from rootcause.names import short

# A static difference (fewer threads, a longer serial chain a thread, a cache line an element) is named
# as the cause only where the unit is this many times slower on the slow side: more threads for the
# same ops need not share its work. benchmarks/README.md#the-h100-top-k-batch-class-2-fixturescapturesh100-2026-12-05-gen-topk
MECHANISM_MIN_SPEEDUP = 1.5


@dataclass
class Side:
    """One variant's view of one unit."""
    label: str
    kernels: pd.DataFrame  # attribution.kernels rows of this unit and variant
    catalog: dict[str, CatalogKernel]
    shared: dict[str, tuple]  # kernel -> all call sites, for kernels serving several
    entry: str | None
    device: str | None = None  # the GPU this side ran on (a gpus.DEVICES key); each side has its own
    arch: str | None = None
    sms: int | None = None

    def dominant(self) -> pd.Series | None:
        """The kernel with the most time per call."""
        if self.kernels.empty:
            return None
        return self.kernels.sort_values("time_per_call_ns", ascending=False).iloc[0]

    def cat(self, kernel: str) -> CatalogKernel | None:
        return self.catalog.get(kernel) or self.catalog.get(strip_kernel(kernel))


@dataclass
class Context:
    unit: Unit
    a: Side
    b: Side
    attribution: Attribution
    extra: dict[str, Any] = field(default_factory=dict)
    cpu: bool = False  # the variants ran on the CPU (llvm): no launches, counters or --gpu to ask for


def time_text(ns: float) -> str:
    return f"{ns / 1e3:.1f} us" if abs(ns) >= 100 else f"{ns:.0f} ns"


def number_text(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() else f"{x:,.2f}"


def product(t) -> int | None:
    return math.prod(int(x) for x in t) if t is not None else None


NAME_LIMIT = 80  # characters of a kernel name in a sentence (names.short); the evidence keeps it whole


def finding(ctx: Context | None, rule: str, sentence: str, **evidence) -> Finding:
    """A rule's Finding of ctx's unit (None: of the whole graph); names in backticks are shortened."""
    parts = sentence.split("`")  # odd parts are the names between backticks
    sentence = "`".join(short(p, NAME_LIMIT) if i % 2 else p for i, p in enumerate(parts))
    return Finding(rule, sentence, ctx.unit.unit if ctx else None, evidence)


def is_na(x) -> bool:
    return x is None or (not isinstance(x, (tuple, list)) and pd.isna(x))


def zero_if_na(value: Any) -> Any:
    return 0 if is_na(value) else value


def resident_waves(side: Side, row: pd.Series) -> dict[str, Any] | None:
    """Waves of resident blocks on the device, from gpus.occupancy and the SM count."""
    if side.arch is None or side.sms is None or is_na(row.get("registers")) or row["block"] is None \
            or not product(row["block"]) or row["grid"] is None:
        return None
    occ = gpus.occupancy(side.arch, product(row["block"]), int(row["registers"]),
                         int(0 if is_na(row.get("shared_bytes")) else row["shared_bytes"]))
    per_wave = occ.active_blocks * side.sms
    blocks = product(row["grid"])
    if not per_wave or blocks is None:
        return None
    waves = blocks / per_wave
    tail = ((blocks % per_wave) or per_wave) / per_wave  # how full the last wave is: a whole one is 100%
    return {"blocks_per_sm": occ.active_blocks, "blocks_per_wave": per_wave, "waves": waves,
            "tail": tail, "occupancy": occ.occupancy, "limiter": occ.limiter}


def pair(ctx: Context) -> tuple[Side, pd.Series, Side, pd.Series] | None:
    """(slow side, its dominant kernel, fast side, the counterpart kernel there).

    The counterpart is the other side's kernel whose op name appears earliest in the
    dominant kernel's name (pool2d in fused_pool2d_add2), else the other side's dominant."""
    slow, fast = (ctx.b, ctx.a) if ctx.unit.delta_ns.median > 0 else (ctx.a, ctx.b)
    focus = slow.dominant()
    if focus is None or fast.kernels.empty:
        return None
    name = focus["kernel"]
    ranked = sorted(fast.kernels.itertuples(index=False),
                    key=lambda r: (name.find(strip_kernel(r.kernel)) % (len(name) + 1)
                                   if strip_kernel(r.kernel) in name else len(name) + 1,
                                   -r.time_per_call_ns))
    counterpart = fast.kernels[fast.kernels.kernel == ranked[0].kernel].iloc[0]
    return slow, focus, fast, counterpart


# Alignment tiers whose pairing is evidence that two kernels compute the same ops: rules that
# compare work across the pair (recomputation) need one of these, never a shape-only pairing.
def op_evidence_tiers() -> tuple[str, ...]:
    """The alignment tiers that join kernels by what they compute (ops, locations, names)."""
    return ("provenance", "location", "name", "normalized-name", "cpu-op", *(t.name for t in frontend_tiers()))


def slow_enough(ctx: Context, slow: Side, focus: pd.Series, what: str, mechanism: str) -> float | None:
    """The unit's speedup where it is MECHANISM_MIN_SPEEDUP or more, else None after a cannot-conclude
    line: `what` the slow side's kernel does, `mechanism` the cause it then does not name."""
    speedup = unit_speedup(ctx, slow)
    if speedup is not None and speedup >= MECHANISM_MIN_SPEEDUP:
        return speedup
    ctx.attribution.cannot_conclude.append(
        f"unit {ctx.unit.unit}: {slow.label}'s `{short(focus['kernel'], NAME_LIMIT)}` {what}, yet the unit is "
        f"only {speedup or 0:.2f}x slower: {mechanism} is not named as the cause")
    return None


def unit_speedup(ctx: Context, slow: Side) -> float | None:
    """The unit's time on the slow side over the fast side's (medians per call)."""
    slow_v, fast_v = ("a", "b") if slow is ctx.a else ("b", "a")
    t_slow, t_fast = ctx.unit.time_ns(slow_v).median, ctx.unit.time_ns(fast_v).median
    return t_slow / t_fast if t_fast else None
