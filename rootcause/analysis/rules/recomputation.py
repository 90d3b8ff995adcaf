"""Recomputation: a fused kernel doing more work than the kernels it replaced (its producers
evaluated once per consumer step), from the catalogs' work and evaluation counts."""
from __future__ import annotations

from collections import Counter

from rootcause.analysis.align import base_kernel
from rootcause.analysis.result import Finding
from rootcause.analysis.rules.common import Context, Side, finding, number_text, op_evidence_tiers
from rootcause.model import CatalogKernel

# A fused kernel doing this many times the replaced kernels' work recomputes its producers.
RECOMPUTE_FACTOR = 1.5


def _ops(side: Side, kernel: str) -> set[str]:
    """The input ops a kernel computes: its input locations where the compiler carries them
    (IREE), else its source ops (TVM bindings)."""
    cat = side.cat(kernel)
    if cat is None:
        return set()
    return set(cat.source_locs) or set(cat.source_ops)


def _fused_parts(fused: Side, kernel: str, other: Side, by_location: bool = True) -> list[str]:
    """The other side's kernels whose ops `kernel` computes, each a strict part of them: by input
    locations (one source file), else, where the two sides' sources are different files, by the
    kinds of op those locations name (a multiset: the fused kernel holds every op of each part)."""
    covered = _ops(fused, kernel)
    if by_location:
        parts = [k for k in other.kernels.kernel if _ops(other, k) and _ops(other, k) < covered]
        if parts or _files(covered) & _files(set().union(*(_ops(other, k) for k in other.kernels.kernel))):
            return parts
    kinds = _op_kinds(fused, kernel)
    return [k for k in other.kernels.kernel
            if _op_kinds(other, k) and not _op_kinds(other, k) - kinds and _op_kinds(other, k) != kinds]


def _files(locs: set[str]) -> set[str]:
    return {loc.rsplit(":", 2)[0] for loc in locs if loc.count(":") >= 2 and not loc.startswith("name:")}


def _op_kinds(side: Side, kernel: str) -> Counter:
    cat = side.cat(kernel)
    return Counter(k for k in (cat.source_op_kinds if cat else []) if k)


def side_work(side: Side, metric: str) -> float | None:
    """Per call: the side's kernels' flops or bytes moved (catalog value x launches), None if any is unknown."""
    total = 0.0
    for r in side.kernels.itertuples(index=False):
        cat = side.cat(r.kernel)
        value = getattr(cat, metric) if cat else None
        if value is None:
            return None
        total += value * r.launches_per_call
    return total


def _evaluations(side: Side) -> dict[str, float]:
    """Per call: each transcendental function's evaluations by the side's kernels in the unit
    (catalog evaluations x launches per call)."""
    out: dict[str, float] = {}
    for r in side.kernels.itertuples(index=False):
        cat = side.cat(base_kernel(r.kernel)[0])
        for name, n in (cat.evaluations if cat else {}).items():
            out[name] = out.get(name, 0.0) + n * r.launches_per_call
    return out


def recomputed_evaluations(ctx: Context) -> list[Finding] | None:
    """The slower side evaluates a transcendental function RECOMPUTE_FACTOR or more times as often
    a call as the faster side, for the same ops (each compiler's IR read for its kernels' bodies
    and iteration spaces: a producer's exp fused into a reduction runs once per reduction step).
    None where the two sides' catalogs do not both count one function (a frontend that does not
    read them), so the other checks run; [] where they do and no count differs that much."""
    slow, fast = (ctx.b, ctx.a) if ctx.unit.delta_ns.median > 0 else (ctx.a, ctx.b)
    es, ef = _evaluations(slow), _evaluations(fast)
    common = sorted(set(es) & set(ef))
    if not common:
        return None
    kind = max(common, key=lambda k: es[k] / ef[k] if ef[k] else 0.0)
    ratio = es[kind] / ef[kind] if ef[kind] else 0.0
    if ratio < RECOMPUTE_FACTOR:
        return []
    top = max(slow.kernels.itertuples(index=False), default=None,
              key=lambda r: ((slow.cat(base_kernel(r.kernel)[0]) or CatalogKernel("", "")).evaluations.get(kind, 0)))
    where = f"`{top.kernel}`" if top is not None else "kernels"
    sentence = (f"{slow.label}'s {where} evaluates {kind} {number_text(es[kind])} times a call where {fast.label}'s kernels "
                f"evaluate it {number_text(ef[kind])} times ({ratio:.1f}x), counted from each compiler's IR (bodies x "
                f"iteration spaces): {slow.label} recomputes a producer the other side computes once.")
    return [finding(ctx, "recomputation", sentence, source="static evaluations (IR bodies x iteration spaces)",
                     metric=f"evaluations of {kind}", ratio=ratio, fused_kernel=top.kernel if top is not None else None,
                     **{slow.label: es[kind], fast.label: ef[kind]})]


def recomputation(ctx: Context) -> list[Finding]:
    """A fused kernel recomputes its producers: the slower side evaluates a transcendental function
    more often for the same ops (recomputed_evaluations), or, where the catalogs do not count
    evaluations, it covers the source ops of two or more of the other side's kernels (a strict
    superset of each), its side launches fewer kernels, and its work (flops, else bytes moved) is
    RECOMPUTE_FACTOR or more times theirs. Never on the side with more launches, never on the
    faster side, never across a pairing that is not by ops (shape, remainder)."""
    by_evaluations = recomputed_evaluations(ctx)
    if by_evaluations is not None:
        return by_evaluations
    la, lb = ctx.unit.launches_a, ctx.unit.launches_b
    # 'absorbed' (a producer joined to the consumer launched after it, the catalogs' work
    # permitting) is checked below by what the kernels compute, as read from their sources
    if ctx.unit.method not in (*op_evidence_tiers(), "absorbed"):
        if la != lb:
            ctx.attribution.cannot_conclude.append(
                f"unit {ctx.unit.unit}: joined by {ctx.unit.method}, not by the ops its kernels compute: "
                "whether a fused kernel recomputes its producers was not checked")
        return []
    if la == lb:
        return []
    fused, other = (ctx.a, ctx.b) if la < lb else (ctx.b, ctx.a)
    if fused is not (ctx.b if ctx.unit.delta_ns.median > 0 else ctx.a):
        return []  # the fused side is the faster one: what it recomputes is not this unit's cost
    top = fused.dominant()
    if top is None or other.kernels.empty:
        return []
    parts = _fused_parts(fused, top["kernel"], other, by_location=ctx.unit.method != "absorbed")
    if len(parts) < 2:
        return []  # not a fusion of the other side's kernels (the same op split, or unrelated kernels)
    for metric in ("flops", "bytes_moved"):
        wf, wo = side_work(fused, metric), side_work(other, metric)
        if not wf or not wo:
            continue
        ratio = wf / wo
        if ratio < RECOMPUTE_FACTOR:
            return []
        what = "arithmetic" if metric == "flops" else "memory traffic"
        sentence = (f"{fused.label}'s `{top['kernel']}` covers the ops of {len(parts)} kernels of {other.label} "
                    f"and does {ratio:.1f}x their {what} ({number_text(wf)} vs {number_text(wo)} {metric} per call): the fused "
                    f"kernel recomputes its producers.")
        return [finding(ctx, "recomputation", sentence, source=f"static {metric}, catalog source ops",
                         metric=metric, ratio=ratio, fused_kernel=top["kernel"], replaced=parts,
                         covered_ops=sorted(_ops(fused, top["kernel"])), **{fused.label: wf, other.label: wo})]
    ctx.attribution.cannot_conclude.append(
        f"unit {ctx.unit.unit}: `{top['kernel']}` fuses the ops of {len(parts)} kernels, but the catalogs "
        "give neither flops nor bytes moved for all of them: recomputation was not checked")
    return []
