"""Diagnose what differs in each unit whose delta is significant.

Each rule is one small function `rule(ctx) -> list[dict]`; a finding is
{"rule", "unit", "sentence", "evidence"}: the sentence is what a compiler engineer would
write in a triage thread, the evidence the numbers it rests on and where they came from
('profiled' from the KernelEvents, 'static' from a catalog). Unit rules only run on units
whose delta is significant (interval excludes 0, at least the minimum effect), so noise is
never blamed; the residual rule only runs when the residual delta is significant.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import pandas as pd

from rootcause import frontends, gpus
from rootcause.names import short
from rootcause.analysis.align import Alignment, base_kernel, catalog_index, frontend_tiers
from rootcause.analysis.attribute import Attribution
from rootcause.model import COUNTER_COLUMNS, CatalogKernel, strip_kernel

# A fused kernel doing this many times the replaced kernels' work recomputes its producers.
RECOMPUTE_FACTOR = 1.5
# The other side launching this many times the threads for the same ops makes a starved launch a cause.
PARALLELISM_FACTOR = 8
# Or, where the catalogs give the work: each launched thread walking this many times the work a
# thread of the other side walks (over all of that side's kernels for the ops: they run one after
# another): a split that launches a few times the threads stays under PARALLELISM_FACTOR while both
# sides leave the device nearly idle.
SERIAL_FACTOR = 2.0
# A static difference (fewer threads, a longer serial chain a thread, a cache line an element) is named
# as the cause only where the unit is this many times slower on the slow side: more threads for the
# same ops need not share its work. benchmarks/README.md#the-h100-top-k-batch-class-2-fixturescapturesh100-2026-12-05-gen-topk
MECHANISM_MIN_SPEEDUP = 1.5
# A launched thread walking this many bytes (or flops) serially, on a device left idle by both sides:
# the unit's time is a serial chain whatever the other side does.
SERIAL_WORK = 4096
# a kernel's work, in the order it is asked for: flops where the catalog counts them, else bytes moved
WORK_METRICS = (("flops", "flops"), ("bytes_moved", "bytes"))
# On the CPU a dispatch keeping half the CPUs busy or fewer, where the other side's keeps all it can:
# the runtime's threads, one a CPU, take the workgroups in turn (2 CPUs here: 1 workgroup against 16).
CPU_BUSY_FACTOR = 2
# An IREE CPU dispatch whose vector tiles hold this many times fewer elements than those of the other
# side's dispatch for the same ops steps through its loops that many times more often for the same work.
VECTOR_TILE_FACTOR = 4
# A CPU loop stepping this many bytes between iterations gives every element a cache line of its
# own (and no vector lanes): the x86 and Arm cores this runs on have 64-byte lines.
CACHE_LINE_BYTES = 64
# A hardware-counter ratio (L2 sectors, sectors per request, wavefronts per shared instruction)
# this large between the two sides' kernels names a memory-access mechanism.
COUNTER_FACTOR = 2.0


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
    unit: dict[str, Any]
    a: Side
    b: Side
    attribution: Attribution
    extra: dict[str, Any] = field(default_factory=dict)
    cpu: bool = False  # the variants ran on the CPU (llvm): no launches, counters or --gpu to ask for


def _us(ns: float) -> str:
    return f"{ns / 1e3:.1f} us" if abs(ns) >= 100 else f"{ns:.0f} ns"


def _n(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() else f"{x:,.2f}"


def _prod(t) -> int | None:
    return math.prod(int(x) for x in t) if t is not None else None


NAME_LIMIT = 80  # characters of a kernel name in a sentence (names.short); the evidence keeps it whole


def _finding(ctx: Context | None, rule: str, sentence: str, **evidence) -> dict[str, Any]:
    parts = sentence.split("`")  # odd parts are the names between backticks
    sentence = "`".join(short(p, NAME_LIMIT) if i % 2 else p for i, p in enumerate(parts))
    return {"rule": rule, "unit": ctx.unit["unit"] if ctx else None, "sentence": sentence,
            "evidence": evidence}


def _is_na(x) -> bool:
    return x is None or (not isinstance(x, (tuple, list)) and pd.isna(x))


def _zero_if_na(value: Any) -> Any:
    return 0 if _is_na(value) else value


def _waves(side: Side, row: pd.Series) -> dict[str, Any] | None:
    """Waves of resident blocks on the device, from gpus.occupancy and the SM count."""
    if side.arch is None or side.sms is None or _is_na(row.get("registers")) or row["block"] is None \
            or not _prod(row["block"]) or row["grid"] is None:
        return None
    occ = gpus.occupancy(side.arch, _prod(row["block"]), int(row["registers"]),
                         int(0 if _is_na(row.get("shared_bytes")) else row["shared_bytes"]))
    per_wave = occ.active_blocks * side.sms
    blocks = _prod(row["grid"])
    if not per_wave or blocks is None:
        return None
    waves = blocks / per_wave
    tail = ((blocks % per_wave) or per_wave) / per_wave  # how full the last wave is: a whole one is 100%
    return {"blocks_per_sm": occ.active_blocks, "blocks_per_wave": per_wave, "waves": waves,
            "tail": tail, "occupancy": occ.occupancy, "limiter": occ.limiter}


# --- unit rules ------------------------------------------------------------------------------

def pair(ctx: Context) -> tuple[Side, pd.Series, Side, pd.Series] | None:
    """(slow side, its dominant kernel, fast side, the counterpart kernel there).

    The counterpart is the other side's kernel whose op name appears earliest in the
    dominant kernel's name (pool2d in fused_pool2d_add2), else the other side's dominant."""
    slow, fast = (ctx.b, ctx.a) if ctx.unit["delta_ns"]["median"] > 0 else (ctx.a, ctx.b)
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


def _launch_text(ctx: Context, side: Side, k: pd.Series) -> tuple[str, dict[str, Any]]:
    blocks, threads = _prod(k["grid"]), _prod(k["block"])
    if ctx.cpu:  # a CPU dispatch's grid is its workgroups, tasks for the runtime's threads
        text = f"{side.label}'s `{k['kernel']}` runs {_n(blocks)} workgroup{'s' if blocks != 1 else ''}"
        return text, {"kernel": k["kernel"], "grid": list(k["grid"]), "block": list(k["block"]),
                      "workgroups": blocks}
    w = _waves(side, k)
    text = f"{side.label}'s `{k['kernel']}` launches {_n(blocks)} blocks x {_n(threads)} threads"
    if w and w["waves"] < 1:
        text += (f" (a partial wave: {w['waves']:.0%} of the {_n(w['blocks_per_wave'])} resident "
                 f"block slots of the {side.device}'s {side.sms} SMs)")
    elif w:
        text += (f" ({w['waves']:.2f} waves of {_n(w['blocks_per_wave'])} resident blocks on the "
                 f"{side.device}'s {side.sms} SMs, last wave {w['tail']:.0%} full)")
    return text, {"kernel": k["kernel"], "grid": list(k["grid"]), "block": list(k["block"]),
                  "blocks": blocks, "threads_per_block": threads, "waves": w}


def launch_config(ctx: Context) -> list[dict[str, Any]]:
    """The slow side's dominant kernel is launched unlike every kernel of the other side;
    waves per SM and tail when the device is known."""
    p = pair(ctx)
    if p is None or any(k[c] is None for k in (p[1], p[3]) for c in ("grid", "block")):
        return []  # a launch the profile does not describe (no grid or block) is not compared
    slow, focus, fast, counterpart = p
    config = (tuple(focus["grid"]), tuple(focus["block"]))
    if any(r.grid is not None and (tuple(r.grid), tuple(r.block)) == config
           for r in fast.kernels.itertuples(index=False)):
        return []
    text_slow, ev_slow = _launch_text(ctx, slow, focus)
    text_fast, ev_fast = _launch_text(ctx, fast, counterpart)
    sentence = f"{text_slow}, where {text_fast}."
    evidence = {"source": "profiled", slow.label: ev_slow, fast.label: ev_fast}
    # the pool_fusion case's signature: one block per element the other side computes with one thread.
    if (not ctx.cpu and counterpart["block"] is not None and _prod(focus["block"]) > 1
            and _prod(focus["grid"]) == _prod(counterpart["grid"]) * _prod(counterpart["block"])):
        sentence += (f" That is one block of {_n(_prod(focus['block']))} threads per element that "
                     f"`{counterpart['kernel']}` computes with one thread ({_n(_prod(focus['grid']))} elements).")
        evidence["one_block_per_element"] = True
    return [_finding(ctx, "launch-config", sentence, **evidence)]


def launch_count(ctx: Context) -> list[dict[str, Any]]:
    """The slow side launches many more kernels for the same ops."""
    la, lb = ctx.unit["launches_a"], ctx.unit["launches_b"]
    slow, fast, ls, lf = (ctx.b, ctx.a, lb, la) if ctx.unit["delta_ns"]["median"] > 0 else (ctx.a, ctx.b, la, lb)
    if ls < 2 * max(lf, 1):
        return []
    t = ctx.unit["time_a_ns" if slow is ctx.a else "time_b_ns"]["median"]
    sentence = (f"{slow.label} launches {_n(ls)} kernels per call for these ops ({slow.kernels['kernel'].nunique()} "
                f"distinct, {_us(t)} in total) where {fast.label} launches {_n(lf)}.")
    return [_finding(ctx, "launch-count", sentence, source="profiled",
                     launches_per_call={ctx.a.label: la, ctx.b.label: lb})]


def occupancy_limiter(ctx: Context) -> list[dict[str, Any]]:
    """Theoretical occupancy or its limiter differ between the dominant kernels."""
    p = pair(ctx)
    if p is None:
        return []
    ka, kb = (p[3], p[1]) if p[0] is ctx.b else (p[1], p[3])
    wa, wb = _waves(ctx.a, ka), _waves(ctx.b, kb)
    if not wa or not wb:
        return []
    if abs(wa["occupancy"] - wb["occupancy"]) < 0.05 and wa["limiter"] == wb["limiter"]:
        return []
    sentence = (f"Theoretical occupancy goes from {wa['occupancy']:.0%} ({wa['limiter']}-limited, "
                f"`{ka['kernel']}`: {_n(ka['registers'])} registers, {_n(_zero_if_na(ka['shared_bytes']))} B "
                f"shared) in {ctx.a.label} to {wb['occupancy']:.0%} ({wb['limiter']}-limited, `{kb['kernel']}`: "
                f"{_n(kb['registers'])} registers, {_n(_zero_if_na(kb['shared_bytes']))} B shared) in {ctx.b.label}.")
    return [_finding(ctx, "occupancy", sentence, source="profiled resources, gpus.occupancy",
                     a={**wa, "kernel": ka["kernel"]}, b={**wb, "kernel": kb["kernel"]})]


def _max_col(side: Side, col: str) -> tuple[int, str | None]:
    vals = side.kernels[["kernel", col]].dropna() if col in side.kernels else pd.DataFrame()
    if vals.empty:
        return 0, None
    row = vals.sort_values(col, ascending=False).iloc[0]
    return int(row[col]), row["kernel"]


def shared_memory(ctx: Context) -> list[dict[str, Any]]:
    """Shared memory per block introduced or removed."""
    for side in (ctx.a, ctx.b):
        if "shared_bytes" not in side.kernels or side.kernels["shared_bytes"].isna().all():
            return []  # the profile does not record shared memory: "uses none" would be a guess
    (sa, ka), (sb, kb) = _max_col(ctx.a, "shared_bytes"), _max_col(ctx.b, "shared_bytes")
    if (sa > 0) == (sb > 0):
        return []
    has, k, other = (ctx.b, kb, ctx.a) if sb else (ctx.a, ka, ctx.b)
    size = sb or sa
    sentence = (f"{has.label}'s `{k}` uses {size} B of shared memory per block; "
                f"{other.label}'s kernels for the same ops use none")
    cat = has.cat(k)
    rule = (cat.schedule or {}).get("rule") if cat else None
    if rule and "reduction" in rule.lower():
        sentence += f", consistent with the cross-thread reduction of its {rule} schedule"
    return [_finding(ctx, "shared-memory", sentence + ".", source="profiled", variant=has.label,
                     kernel=k, shared_bytes=size, schedule_rule=rule)]


def local_memory(ctx: Context) -> list[dict[str, Any]]:
    """Local memory, stack or spills where the other side has none (or less)."""
    facts = {}
    for side in (ctx.a, ctx.b):
        local, k = _max_col(side, "local_bytes")
        spills = stack = 0
        for name in side.kernels.kernel:
            cat = side.cat(name)
            res = cat.resources if cat else {}
            spills = max(spills, res.get("spills") or 0)
            stack = max(stack, res.get("stack_bytes") or 0)
            local = max(local, res.get("local_bytes") or 0)
        facts[side.label] = {"local_bytes": local, "spills": spills, "stack_bytes": stack}
    fa, fb = facts[ctx.a.label], facts[ctx.b.label]
    if fa == fb:
        return []
    worse, better = (ctx.b, ctx.a) if sum(fb.values()) > sum(fa.values()) else (ctx.a, ctx.b)
    f = facts[worse.label]
    sentence = (f"{worse.label} uses {f['local_bytes']} B local memory per thread, {f['spills']} "
                f"spilled bytes and {f['stack_bytes']} B stack; {better.label}: "
                f"{facts[better.label]['local_bytes']} B, {facts[better.label]['spills']}, "
                f"{facts[better.label]['stack_bytes']} B.")
    return [_finding(ctx, "local-memory", sentence, source="profiled local bytes, static spills/stack",
                     **facts)]


def bandwidth(ctx: Context) -> list[dict[str, Any]]:
    """Achieved DRAM bandwidth from the catalog's bytes_moved against the device's peak."""
    peaks = {side.label: gpus.PEAK_DRAM_BYTES_PER_S.get(side.device or "") for side in (ctx.a, ctx.b)}
    devices = {side.label: side.device for side in (ctx.a, ctx.b)}
    rows = {}
    for side in (ctx.a, ctx.b):
        moved = time = 0.0
        for r in side.kernels.itertuples(index=False):
            cat = side.cat(r.kernel)
            if cat is None or cat.bytes_moved is None:
                return []
            moved += cat.bytes_moved * r.launches_per_call
            time += r.time_per_call_ns
        if time:
            rows[side.label] = {"bytes_per_call": moved, "time_ns": time, "bytes_per_s": moved / time * 1e9}
    if len(rows) != 2:
        return []
    texts = []
    for label, r in rows.items():
        t = f"{label} moves {r['bytes_per_call'] / 1e6:.2f} MB in {_us(r['time_ns'])} ({_rate(r['bytes_per_s'])}"
        peak = peaks[label]
        t += f", {r['bytes_per_s'] / peak:.1%} of the {devices[label]}'s {peak / 1e12:.1f} TB/s peak)" if peak else ")"
        texts.append(t)
    peak = peaks[ctx.a.label] if peaks[ctx.a.label] == peaks[ctx.b.label] else None
    return [_finding(ctx, "bandwidth", "; ".join(texts) + ".", source="static bytes_moved, profiled time",
                     peak_bytes_per_s=peak, peak_source="vendor spec sheet" if any(peaks.values()) else None,
                     **rows)]


def compute_throughput(ctx: Context) -> list[dict[str, Any]]:
    """Achieved arithmetic from the catalog's flops against the device's FP32 vector peak (a
    roofline's compute side, beside bandwidth): a compute-starved kernel shows as a small share.
    GPUs of known peak only: a CPU's depends on its cores and vector units, which the run does not record."""
    if ctx.cpu:
        return []
    rows, texts = {}, []
    for side in (ctx.a, ctx.b):
        work = _work(side, "flops")
        time = float(side.kernels.time_per_call_ns.sum())
        peak = gpus.PEAK_FP32_FLOPS.get(side.device or "")
        if not work or not time or not peak:  # no GPU of known peak (a CPU profile compared): nothing to weigh
            return []
        rate = work / time * 1e9
        rows[side.label] = {"flops_per_call": work, "time_ns": time, "flops_per_s": rate, "peak_fp32": peak}
        text = f"{side.label} does {work / 1e9:,.2f} GFLOP in {_us(time)} ({rate / 1e12:.2f} TFLOP/s"
        texts.append(text + f", {rate / peak:.1%} of the {side.device}'s {peak / 1e12:.0f} TFLOP/s FP32 vector peak)")
    return [_finding(ctx, "compute", "; ".join(texts) + ".", source="static flops, profiled time", **rows)]


def _rate(bytes_per_s: float) -> str:
    """Bytes a second in the unit that shows its digits: TB/s on a GPU's scale, GB/s below it."""
    return f"{bytes_per_s / 1e12:.2f} TB/s" if bytes_per_s >= 1e11 else f"{bytes_per_s / 1e9:.2f} GB/s"


def _slow_fast(ctx: Context) -> tuple[Side, Side]:
    return (ctx.b, ctx.a) if ctx.unit["delta_ns"]["median"] > 0 else (ctx.a, ctx.b)


def _counted(side: Side, cols: tuple[str, ...]) -> dict[str, float] | None:
    """Per call: the side's kernels' counter sums (median per launch x launches), None when a
    kernel has no count (the profile is not a counter profile, or did not count that metric)."""
    totals = dict.fromkeys(cols, 0.0)
    for r in side.kernels.to_dict("records"):
        for c in cols:
            v = r.get(c)
            if v is None or _is_na(v):
                return None
            totals[c] += float(v) * r["launches_per_call"]
    return totals if len(side.kernels) else None


def global_access(ctx: Context) -> list[dict[str, Any]]:
    """Uncoalesced global access (hardware counters): the slow side's kernels for the same ops
    move COUNTER_FACTOR times the L2 sectors of the other side's, and their global loads and
    stores touch COUNTER_FACTOR times the 32-byte sectors per request. Both, so that more
    traffic of a different cause (more bytes, re-reads) or a wider access that L1 absorbs is not
    called uncoalesced. Only between kernels paired by the ops they compute."""
    if ctx.unit.get("method") not in op_evidence_tiers() + ("remainder",):
        return []
    slow, fast = _slow_fast(ctx)
    cols = ("l2_sectors", "global_sectors", "global_requests")
    s, f = _counted(slow, cols), _counted(fast, cols)
    if not s or not f or not f["l2_sectors"] or not s["global_requests"] or not f["global_requests"]:
        return []
    l2 = s["l2_sectors"] / f["l2_sectors"]
    per_s, per_f = s["global_sectors"] / s["global_requests"], f["global_sectors"] / f["global_requests"]
    if l2 < COUNTER_FACTOR or per_s < COUNTER_FACTOR * per_f:
        return []
    sentence = (f"{slow.label}'s kernels for these ops move {l2:.1f}x the L2 sectors of {fast.label}'s "
                f"({s['l2_sectors'] * 32 / 1e6:.1f} vs {f['l2_sectors'] * 32 / 1e6:.1f} MB per call), and their global "
                f"loads and stores touch {per_s:.1f} sectors per request against {per_f:.1f}: each warp's accesses "
                "spread over more 32-byte sectors (uncoalesced access).")
    return [_finding(ctx, "global-access", sentence, source="profiled hardware counters (ncu)",
                     **{slow.label: s, fast.label: f}, l2_ratio=l2,
                     sectors_per_request={slow.label: per_s, fast.label: per_f})]


def bank_conflicts(ctx: Context) -> list[dict[str, Any]]:
    """Shared-memory bank conflicts (hardware counters): the slow side's kernels need
    COUNTER_FACTOR times the wavefronts per shared-memory instruction of the other side's, and
    at least two (one is a conflict-free access). Only where both sides use shared memory."""
    slow, fast = _slow_fast(ctx)
    cols = ("shared_wavefronts", "shared_instructions")
    s, f = _counted(slow, cols), _counted(fast, cols)
    if not s or not f or not s["shared_instructions"] or not f["shared_instructions"]:
        return []
    ws, wf = s["shared_wavefronts"] / s["shared_instructions"], f["shared_wavefronts"] / f["shared_instructions"]
    if ws < 2 or ws < COUNTER_FACTOR * wf:
        return []
    sentence = (f"{slow.label}'s kernels need {ws:.1f} shared-memory wavefronts per shared load or store against "
                f"{wf:.2f} in {fast.label} ({_n(round(s['shared_wavefronts']))} vs {_n(round(f['shared_wavefronts']))} per call): "
                "bank conflicts serialize each warp's shared accesses.")
    return [_finding(ctx, "bank-conflicts", sentence, source="profiled hardware counters (ncu)",
                     **{slow.label: s, fast.label: f}, wavefronts_per_instruction={slow.label: ws, fast.label: wf})]


# Alignment tiers whose pairing is evidence that two kernels compute the same ops: rules that
# compare work across the pair (recomputation) need one of these, never a shape-only pairing.
def op_evidence_tiers() -> tuple[str, ...]:
    """The alignment tiers that join kernels by what they compute (ops, locations, names)."""
    return ("provenance", "location", "name", "normalized-name", "cpu-op", *(t.name for t in frontend_tiers()))


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


def _work(side: Side, metric: str) -> float | None:
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


def recomputed_evaluations(ctx: Context) -> list[dict[str, Any]] | None:
    """The slower side evaluates a transcendental function RECOMPUTE_FACTOR or more times as often
    a call as the faster side, for the same ops (each compiler's IR read for its kernels' bodies
    and iteration spaces: a producer's exp fused into a reduction runs once per reduction step).
    None where the two sides' catalogs do not both count one function (a frontend that does not
    read them), so the other checks run; [] where they do and no count differs that much."""
    slow, fast = (ctx.b, ctx.a) if ctx.unit["delta_ns"]["median"] > 0 else (ctx.a, ctx.b)
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
    sentence = (f"{slow.label}'s {where} evaluates {kind} {_n(es[kind])} times a call where {fast.label}'s kernels "
                f"evaluate it {_n(ef[kind])} times ({ratio:.1f}x), counted from each compiler's IR (bodies x "
                f"iteration spaces): {slow.label} recomputes a producer the other side computes once.")
    return [_finding(ctx, "recomputation", sentence, source="static evaluations (IR bodies x iteration spaces)",
                     metric=f"evaluations of {kind}", ratio=ratio, fused_kernel=top.kernel if top is not None else None,
                     **{slow.label: es[kind], fast.label: ef[kind]})]


def recomputation(ctx: Context) -> list[dict[str, Any]]:
    """A fused kernel recomputes its producers: the slower side evaluates a transcendental function
    more often for the same ops (recomputed_evaluations), or, where the catalogs do not count
    evaluations, it covers the source ops of two or more of the other side's kernels (a strict
    superset of each), its side launches fewer kernels, and its work (flops, else bytes moved) is
    RECOMPUTE_FACTOR or more times theirs. Never on the side with more launches, never on the
    faster side, never across a pairing that is not by ops (shape, remainder)."""
    by_evaluations = recomputed_evaluations(ctx)
    if by_evaluations is not None:
        return by_evaluations
    la, lb = ctx.unit["launches_a"], ctx.unit["launches_b"]
    # 'absorbed' (a producer joined to the consumer launched after it, the catalogs' work
    # permitting) is checked below by what the kernels compute, as read from their sources
    if ctx.unit.get("method") not in (*op_evidence_tiers(), "absorbed"):
        if la != lb:
            ctx.attribution.cannot_conclude.append(
                f"unit {ctx.unit['unit']}: joined by {ctx.unit.get('method')}, not by the ops its kernels compute: "
                "whether a fused kernel recomputes its producers was not checked")
        return []
    if la == lb:
        return []
    fused, other = (ctx.a, ctx.b) if la < lb else (ctx.b, ctx.a)
    if fused is not (ctx.b if ctx.unit["delta_ns"]["median"] > 0 else ctx.a):
        return []  # the fused side is the faster one: what it recomputes is not this unit's cost
    top = fused.dominant()
    if top is None or other.kernels.empty:
        return []
    parts = _fused_parts(fused, top["kernel"], other, by_location=ctx.unit.get("method") != "absorbed")
    if len(parts) < 2:
        return []  # not a fusion of the other side's kernels (the same op split, or unrelated kernels)
    for metric in ("flops", "bytes_moved"):
        wf, wo = _work(fused, metric), _work(other, metric)
        if not wf or not wo:
            continue
        ratio = wf / wo
        if ratio < RECOMPUTE_FACTOR:
            return []
        what = "arithmetic" if metric == "flops" else "memory traffic"
        sentence = (f"{fused.label}'s `{top['kernel']}` covers the ops of {len(parts)} kernels of {other.label} "
                    f"and does {ratio:.1f}x their {what} ({_n(wf)} vs {_n(wo)} {metric} per call): the fused "
                    f"kernel recomputes its producers.")
        return [_finding(ctx, "recomputation", sentence, source=f"static {metric}, catalog source ops",
                         metric=metric, ratio=ratio, fused_kernel=top["kernel"], replaced=parts,
                         covered_ops=sorted(_ops(fused, top["kernel"])), **{fused.label: wf, other.label: wo})]
    ctx.attribution.cannot_conclude.append(
        f"unit {ctx.unit['unit']}: `{top['kernel']}` fuses the ops of {len(parts)} kernels, but the catalogs "
        "give neither flops nor bytes moved for all of them: recomputation was not checked")
    return []


def _resident_threads(side: Side) -> int | None:
    if side.arch is None or side.sms is None:
        return None
    lim = gpus.limits(side.arch)
    return lim.max_warps_per_sm * lim.warp_size * side.sms


def parallelism(ctx: Context) -> list[dict[str, Any]]:
    """The slow side's dominant kernel leaves the device idle: fewer blocks than SMs, or threads
    a small share of the resident thread slots, where the other side's kernels for the same ops
    launch at least PARALLELISM_FACTOR times the threads. Work per thread (flops, else bytes
    moved, over launched threads) says how long each thread's serial chain is. Only on a unit
    joined by the ops its kernels compute, or by elimination (the remainder: all else matched),
    which the sentence then says; never on a shape-only pairing."""
    p = pair(ctx)
    if p is None:
        return []
    slow, focus, fast, _ = p
    if focus["grid"] is None or focus["block"] is None:
        return []
    method = ctx.unit.get("method")
    if ctx.cpu:
        return _cpu_parallelism(ctx, slow, focus, fast) if method in op_evidence_tiers() else []
    if method not in op_evidence_tiers() + ("remainder",):
        ctx.attribution.cannot_conclude.append(
            f"unit {ctx.unit['unit']}: joined by {method}, not by the ops its kernels compute: "
            "whether the other variant spreads the same work over more threads was not checked")
        return []
    blocks, threads = _prod(focus["grid"]), _prod(focus["block"])
    total = blocks * threads
    rows = [r for r in fast.kernels.itertuples(index=False) if r.grid is not None and r.block is not None]
    if not rows:
        return []
    best = max(rows, key=lambda r: _prod(r.grid) * _prod(r.block))
    other_total = _prod(best.grid) * _prod(best.block)
    slots = _resident_threads(slow)
    starved = (slow.sms is not None and blocks < slow.sms) or (slots is not None and total < 0.25 * slots)
    serial = _serial_shares(slow, focus, fast, rows)
    if slots is None and slow.sms is None:
        starved = total * PARALLELISM_FACTOR <= other_total  # without the device, only the comparison
    wider = other_total >= PARALLELISM_FACTOR * total
    shorter = serial is not None and (slots is not None or slow.sms is not None) \
        and serial["slow"] >= SERIAL_FACTOR * serial["fast"]
    if not starved:
        return []
    speedup = _unit_speedup(ctx, slow)
    if (wider or shorter) and speedup is not None and speedup < MECHANISM_MIN_SPEEDUP:
        ctx.attribution.cannot_conclude.append(
            f"unit {ctx.unit['unit']}: {slow.label}'s `{short(focus['kernel'], NAME_LIMIT)}` runs {_n(total)} "
            f"thread(s) where {fast.label} launches {_n(other_total)} for the same ops, yet {fast.label} is only "
            f"{speedup:.2f}x faster on this unit: its threads do not share the work in proportion, so the thread "
            "count is not named as the cause")
        return _serial_both(ctx, slow, focus, fast, rows, total, other_total, speedup)
    if not (wider or shorter):
        return _serial_both(ctx, slow, focus, fast, rows, total, other_total, speedup)
    text = f"{slow.label}'s `{focus['kernel']}` runs {_n(blocks)} block(s) x {_n(threads)} threads = {_n(total)} threads"
    evidence: dict[str, Any] = {"source": "profiled launches", "pairing": method, "kernel": focus["kernel"], "blocks": blocks,
                                "threads_per_block": threads, "threads": total,
                                "other_kernel": best.kernel, "other_threads": other_total}
    if slots is not None:
        text += (f" ({total / slots:.2%} of the {slow.device}'s {_n(slots)} resident thread slots, "
                 f"{min(blocks, slow.sms)} of {slow.sms} SMs busy)")
        evidence.update(resident_thread_slots=slots, sms=slow.sms)
    cat = slow.cat(focus["kernel"])
    kernel_work = _kernel_work(cat)
    if kernel_work is not None:
        metric, words, value = kernel_work
        text += f"; each thread's serial share is about {_n(round(value / total))} {words}"
        evidence["work_per_thread"] = {"metric": metric, "value": value / total}
    else:
        evidence["work_per_thread"] = "not checked: the catalog has no flops or bytes for this kernel"
    same = "the same ops" if method != "remainder" else "the rest of the graph (paired by elimination)"
    text += (f", where {fast.label} spreads {same} over {_n(other_total)} threads "
             f"(`{best.kernel}`: {_n(_prod(best.grid))} x {_n(_prod(best.block))}"
             + (f", {len(rows)} kernels" if len(rows) > 1 else "") + ")")
    if serial is not None:
        text += (f"; a thread of {fast.label} walks about {_n(round(serial['fast']))} {serial['words']} over its "
                 f"kernel(s), {serial['slow'] / serial['fast']:.1f}x less than one of {slow.label}'s")
        evidence["serial_share"] = serial
    work = _thread_work(cat)
    if isinstance(work, dict):
        text += (f". Of each block's {_n(work['threads_per_workgroup'])} threads, {_n(work['threads_with_work'])} "
                 f"own an element (workgroup tile {work['workgroup_tile']}, thread tile {work['thread_tile']} against "
                 f"the op's loop ranges {'x'.join(map(str, work['loop_ranges']))}), each computing "
                 f"{_n(work['outputs_per_thread'])} output(s)")
        if work["serial_elements_per_thread"] > work["outputs_per_thread"]:
            text += f" over {_n(work['serial_elements_per_thread'])} elements serially"
    evidence["threads_doing_work"] = work
    return [_finding(ctx, "parallelism", text + ".", **evidence)]


def _cpu_count(att: Attribution) -> int | None:
    """The CPUs the measured process could run on (the run's environment record), or None."""
    for moment in ("measure_start", "before"):
        cpu = ((att.environment or {}).get(moment) or {}).get("cpu") or {}
        count = cpu.get("affinity_cpus") or cpu.get("logical_cpus")
        if isinstance(count, int) and count > 0:
            return count
    return None


def _cpu_parallelism(ctx: Context, slow: Side, focus: pd.Series, fast: Side) -> list[dict[str, Any]]:
    """CPU: the runtime's worker threads, one a CPU, take a dispatch's workgroups in turn, so a dispatch
    keeps min(workgroups, CPUs) of them busy. Named where the slow side's dispatch keeps fewer CPUs
    busy than the other side's for the same ops and the unit is MECHANISM_MIN_SPEEDUP times slower;
    what the CPUs can explain is at most their ratio, which the sentence says."""
    cpus = _cpu_count(ctx.attribution)
    rows = [r for r in fast.kernels.itertuples(index=False) if r.grid is not None]
    if cpus is None or not rows:
        return []
    best = max(rows, key=lambda r: _prod(r.grid))
    mine, theirs = _prod(focus["grid"]), _prod(best.grid)
    busy, busy_other = min(mine, cpus), min(theirs, cpus)
    if busy_other < CPU_BUSY_FACTOR * busy:
        return []
    speedup = _slow_enough(ctx, slow, focus, f"runs {_n(mine)} workgroup(s), keeping {_n(busy)} of the {cpus} CPUs "
                           f"busy where {fast.label}'s keeps {_n(busy_other)}", "the CPUs left idle")
    if speedup is None:
        return []
    text = (f"{slow.label}'s `{focus['kernel']}` runs {_n(mine)} workgroup(s) and so keeps {_n(busy)} of the run's "
            f"{cpus} CPUs busy, where {fast.label}'s `{best.kernel}` runs {_n(theirs)} workgroups that the runtime's "
            f"threads share over {_n(busy_other)} CPUs: the unit is {speedup:.2f}x slower, of which spreading over "
            f"the CPUs can give at most {busy_other / busy:.0f}x")
    return [_finding(ctx, "parallelism", text + ".", source="profiled launches, the run's CPU count",
                     pairing=ctx.unit.get("method"), kernel=focus["kernel"], workgroups=mine,
                     other_kernel=best.kernel, other_workgroups=theirs, cpus=cpus, speedup=speedup)]


def _slow_enough(ctx: Context, slow: Side, focus: pd.Series, what: str, mechanism: str) -> float | None:
    """The unit's speedup where it is MECHANISM_MIN_SPEEDUP or more, else None after a cannot-conclude
    line: `what` the slow side's kernel does, `mechanism` the cause it then does not name."""
    speedup = _unit_speedup(ctx, slow)
    if speedup is not None and speedup >= MECHANISM_MIN_SPEEDUP:
        return speedup
    ctx.attribution.cannot_conclude.append(
        f"unit {ctx.unit['unit']}: {slow.label}'s `{short(focus['kernel'], NAME_LIMIT)}` {what}, yet the unit is "
        f"only {speedup or 0:.2f}x slower: {mechanism} is not named as the cause")
    return None


def _unit_speedup(ctx: Context, slow: Side) -> float | None:
    """The unit's time on the slow side over the fast side's (medians per call)."""
    t_slow = ctx.unit["time_a_ns" if slow is ctx.a else "time_b_ns"]["median"]
    t_fast = ctx.unit["time_b_ns" if slow is ctx.a else "time_a_ns"]["median"]
    return t_slow / t_fast if t_fast else None


def _serial_both(ctx: Context, slow: Side, focus: pd.Series, fast: Side, rows: list, total: int,
                 other_max: int, speedup: float | None) -> list[dict[str, Any]]:
    """Both sides leave the device idle and the slow kernel's threads each walk SERIAL_WORK or more
    (flops, else bytes moved): the unit is a serial chain on both sides, whichever is faster.
    Grid x block against the work, no tiles needed."""
    kernel_work = _kernel_work(slow.cat(focus["kernel"]))
    if kernel_work is None:
        return []
    metric, words, work = kernel_work
    fast_blocks = max(_prod(r.grid) for r in rows)
    if work / total < SERIAL_WORK or slow.sms is None or fast_blocks >= slow.sms:
        return []
    text = (f"Neither side spreads this unit's work over the {slow.device or 'device'}: {slow.label}'s "
            f"`{focus['kernel']}` runs {_n(_prod(focus['grid']))} block(s) x {_n(_prod(focus['block']))} threads, "
            f"each walking about {_n(round(work / total))} {words} serially; {fast.label}'s kernels for the same "
            f"ops launch at most {_n(other_max)} threads in {_n(fast_blocks)} block(s) ({fast_blocks} of "
            f"{slow.sms} SMs busy at most)" + (f", and are {speedup:.2f}x faster" if speedup else "")
            + ": the unit's time is a serial chain on both sides")
    return [_finding(ctx, "parallelism", text + ".", source="profiled launches, catalog work",
                     kernel=focus["kernel"], threads=total, work={"metric": metric, "value": work},
                     work_per_thread=work / total, other_threads_max=other_max, other_blocks_max=fast_blocks,
                     sms=slow.sms, speedup=speedup, both_serial=True)]


def _kernel_work(cat: CatalogKernel | None) -> tuple[str, str, float] | None:
    """(metric, words, value) of a catalog kernel's work per launch, flops else bytes moved; None where
    the catalog gives neither."""
    for metric, words in WORK_METRICS:
        value = getattr(cat, metric) if cat else None
        if value:
            return metric, words, value
    return None


def _serial_shares(slow: Side, focus: pd.Series, fast: Side, rows: list) -> dict[str, Any] | None:
    """Work a launched thread walks: the slow kernel's flops (else bytes moved) over its threads,
    against the sum over the fast side's kernels (they run one after another) of each one's work
    over its threads; None where a kernel's launch or work is not known."""
    for metric, words in WORK_METRICS:
        cat = slow.cat(focus["kernel"])
        work = getattr(cat, metric) if cat else None
        others = [(getattr(fast.cat(r.kernel), metric, None) if fast.cat(r.kernel) else None,
                   _prod(r.grid) * _prod(r.block)) for r in rows]
        if work and others and all(w and t for w, t in others) and len(rows) == len(fast.kernels):
            return {"metric": metric, "words": words, "slow": work / (_prod(focus["grid"]) * _prod(focus["block"])),
                    "fast": sum(w / t for w, t in others)}
    return None


def _thread_work(cat: CatalogKernel | None) -> dict[str, Any] | str:
    """Threads that own work in the slow kernel, as the frontend that tiled it reads them
    (its thread_work hook: IREE's TileAndFuse dispatches), or why that was not checked."""
    for hook in frontends.hooks("thread_work") if cat is not None else ():
        work = hook(cat)
        if work is not None:
            return work
    return "not checked: the catalog gives no tiling of this kernel (TVM's TIR loops are not read)"


def _owner(name: str) -> str | None:
    """The function a kernel symbol was named after, as its frontend reads it (dispatch_owner)."""
    return next((o for hook in frontends.hooks("dispatch_owner") if (o := hook(name))), None)


def shared_executable(ctx: Context) -> list[dict[str, Any]]:
    """One executable serving call sites of different shapes (the prefill_dedup case), lowering_config named."""
    out = []
    for side, other in ((ctx.a, ctx.b), (ctx.a, ctx.b)[::-1]):
        for name in side.kernels.kernel:
            sites = side.shared.get(name)
            owner = _owner(name)
            by_name = owner and side.entry and owner != side.entry
            if not sites and not by_name:
                continue
            mine = other.dominant()
            cat, cat_other = side.cat(name), other.cat(mine["kernel"]) if mine is not None else None
            la = (cat.schedule or {}).get("lowering_config") if cat else None
            lb = (cat_other.schedule or {}).get("lowering_config") if cat_other else None
            site_text = ", ".join(sites) if sites else f"{owner} and {side.entry}"
            sentence = (f"In {side.label}, `{name}` is one executable serving {site_text}"
                        + (f"; this call ({side.entry}) runs it" if side.entry else ""))
            diff = {}
            if la is not None and lb is not None:
                diff = {k: {"a_side" if side is ctx.a else "b_side": la.get(k), "other": lb.get(k)}
                        for k in sorted(set(la) | set(lb)) if la.get(k) != lb.get(k)}
                if diff:
                    sentence += (" with lowering_config " + ", ".join(f"{k}={la.get(k)}" for k in diff)
                                 + f", where {other.label}'s `{mine['kernel']}` uses "
                                 + ", ".join(f"{k}={lb.get(k)}" for k in diff))
                else:
                    sentence += f" with the same lowering_config as {other.label}'s `{mine['kernel']}`"
            else:
                sentence += " (no catalog lowering_config to name the difference)"
            out.append(_finding(ctx, "shared-executable", sentence + ".", source="static catalog" if la else "kernel name",
                                variant=side.label, kernel=name, call_sites=list(sites or [owner, side.entry]),
                                lowering_config=la, other_lowering_config=lb, differs=diff))
    return out


def _vector_step(cat: CatalogKernel | None) -> tuple[int, dict[str, list[int]]] | None:
    """(elements one vector step computes, the vector tile levels read) of a CPU kernel, as its
    frontend reads its catalog schedule (vector_step); None where none does."""
    schedule = (cat.schedule or {}) if cat is not None else {}
    return next((step for hook in frontends.hooks("vector_step") if (step := hook(schedule))), None) if schedule else None


def vector_tiles(ctx: Context) -> list[dict[str, Any]]:
    """CPU: the slow side's kernel computes VECTOR_TILE_FACTOR times fewer elements a vector step
    than the other side's kernel for the same ops (its vector tile sizes, read from the catalog by
    its frontend's vector_step), so its loops take that many more steps for the same work; a step of one element uses no
    vector lanes. Only between dispatches paired by the ops they compute, and only where the unit is
    MECHANISM_MIN_SPEEDUP times slower (else a cannot-conclude line)."""
    p = pair(ctx) if ctx.unit.get("method") in op_evidence_tiers() else None
    if p is None:
        return []
    slow, focus, fast, counterpart = p
    step_slow, step_fast = _vector_step(slow.cat(focus["kernel"])), _vector_step(fast.cat(counterpart["kernel"]))
    if step_slow is None or step_fast is None or step_fast[0] < VECTOR_TILE_FACTOR * step_slow[0]:
        return []
    tiles = {side: ", ".join(f"{k} {v}" for k, v in step[1].items()) for side, step in (("slow", step_slow), ("fast", step_fast))}
    speedup = _slow_enough(ctx, slow, focus, f"computes {_n(step_slow[0])} element(s) a vector step where "
                           f"{fast.label}'s computes {_n(step_fast[0])}", "its vector tiles")
    if speedup is None:
        return []
    one = " (no vector lanes: its loops step one element at a time)" if step_slow[0] == 1 else ""
    text = (f"{slow.label}'s `{focus['kernel']}` computes {_n(step_slow[0])} element(s) a vector step{one}, by its "
            f"vector tiles ({tiles['slow']}), where {fast.label}'s `{counterpart['kernel']}` computes "
            f"{_n(step_fast[0])} ({tiles['fast']}): for the same ops its loops take {step_fast[0] // step_slow[0]}x "
            f"the steps, and the unit is {speedup:.1f}x slower")
    return [_finding(ctx, "vector-tiles", text + ".", source="static catalog lowering_config",
                     kernel=focus["kernel"], other_kernel=counterpart["kernel"], elements_per_step=step_slow[0],
                     other_elements_per_step=step_fast[0], speedup=speedup)]


def loop_stride(ctx: Context) -> list[dict[str, Any]]:
    """CPU: the slow side's kernel steps through a buffer CACHE_LINE_BYTES or more from one iteration
    of its hot loop to the next, where the other side's kernel for the same ops steps through every
    buffer less than a line at a time (catalog `access`, read from the lowered TIR: static, exact
    for affine indices). Only between kernels paired by the ops they compute, and only where the
    unit is MECHANISM_MIN_SPEEDUP times slower on the slow side (else a cannot-conclude line: a
    strided loop that costs little is not what made the unit slower)."""
    p = pair(ctx) if ctx.unit.get("method") in op_evidence_tiers() else None
    if p is None:
        return []
    slow, focus, fast, counterpart = p
    cat_slow, cat_fast = slow.cat(focus["kernel"]), fast.cat(counterpart["kernel"])
    hot_slow, hot_fast = (cat_slow.access if cat_slow else {}), (cat_fast.access if cat_fast else {})
    if not hot_slow.get("strides_bytes") or not hot_fast.get("strides_bytes"):
        return []
    far = {b: n for b, n in hot_slow["strides_bytes"].items() if n >= CACHE_LINE_BYTES}
    near = max(hot_fast["strides_bytes"].values())
    if not far or near >= CACHE_LINE_BYTES:
        return []
    speedup = _slow_enough(ctx, slow, focus, f"steps through memory {_n(max(far.values()))} bytes at a time in its "
                           f"innermost loop where {fast.label}'s steps at most {_n(near)}", "the loop's stride")
    if speedup is None:
        return []
    names = ", ".join(f"`{b}`" for b in sorted(far))
    text = (f"{slow.label}'s `{focus['kernel']}` steps through {names} {_n(max(far.values()))} bytes apart from one "
            f"iteration of its innermost loop (`{hot_slow['loop']}`, {_n(hot_slow['extent'])} iterations) to the next, "
            f"a cache line for every element; {fast.label}'s `{counterpart['kernel']}` steps through its buffers at "
            f"most {_n(near)} bytes apart (`{hot_fast['loop']}`)")
    if near:
        text += f", {CACHE_LINE_BYTES // near} elements to a line"
    if cat_slow.bytes_moved and cat_slow.bytes_moved == cat_fast.bytes_moved:
        text += (f". Both move {_n(cat_slow.bytes_moved)} bytes: the loop order, not the work, makes the unit "
                 f"{speedup:.1f}x slower")
    else:
        text += f"; the unit is {speedup:.1f}x slower"
    return [_finding(ctx, "loop-stride", text + ".", source="static lowered TIR (catalog access)",
                     kernel=focus["kernel"], other_kernel=counterpart["kernel"], speedup=speedup,
                     **{slow.label: hot_slow, fast.label: hot_fast})]


def _schedule_keys() -> tuple[str, ...]:
    """The catalog schedule keys every registered frontend names (rootcause.frontends.base)."""
    return tuple(dict.fromkeys(k for keys in frontends.hooks("schedule_keys") for k in keys))


def library_call(ctx: Context) -> list[dict[str, Any]]:
    """The faster side runs the unit's work as a library call (its catalog's schedule names the
    library: XLA's custom calls and custom fusions, YNNPACK, oneDNN, cuBLAS) where the slower side
    runs code its compiler generated for the same module: which of the two each producer chose, and
    what the unit's time was on each side. Named only that way round: a library call on the slower
    side says nothing about why it is slower."""
    slow, fast = (ctx.b, ctx.a) if ctx.unit["delta_ns"]["median"] > 0 else (ctx.a, ctx.b)
    libs = {r.kernel: (fast.cat(base_kernel(r.kernel)[0]) or CatalogKernel("", "")).schedule.get("library")
            for r in fast.kernels.itertuples(index=False)}
    called = {k: lib for k, lib in libs.items() if lib}
    if not called or any((slow.cat(base_kernel(r.kernel)[0]) or CatalogKernel("", "")).schedule.get("library")
                         for r in slow.kernels.itertuples(index=False)):
        return []
    top = slow.dominant()
    generated = (slow.cat(base_kernel(top["kernel"])[0]) or CatalogKernel("", "")).schedule if top is not None else {}
    how = next((f"{k} '{generated[k]}'" for k in ("pipeline", "rule") if generated.get(k)), "its own code")
    kernel, lib = next(iter(called.items()))
    ts, tf = slow.kernels.time_per_call_ns.sum(), fast.kernels.time_per_call_ns.sum()
    sentence = (f"{fast.label} runs `{kernel}` as a library call ({lib}) where {slow.label} generates "
                f"`{top['kernel']}` ({how}): {tf / 1e3:,.1f} us a call in {fast.label} against {ts / 1e3:,.1f} us "
                f"in {slow.label} for the same module.")
    return [_finding(ctx, "library-call", sentence, source="static catalog (schedule.library)",
                     library=lib, library_kernel=kernel, generated_kernel=top["kernel"] if top is not None else None)]


def schedule_rule(ctx: Context) -> list[dict[str, Any]]:
    """The scheduling choice (TVM rule, IREE pipeline / workgroup size) differs."""
    p = pair(ctx)
    if p is None:
        return []
    ka, kb = (p[3], p[1]) if p[0] is ctx.b else (p[1], p[3])
    ca, cb = ctx.a.cat(ka["kernel"]), ctx.b.cat(kb["kernel"])
    if ca is None or cb is None:
        return []
    sa, sb = ca.schedule or {}, cb.schedule or {}
    if not set(sa) & set(sb) & set(_schedule_keys()):
        return []  # two producers' schedules name different things (library_call compares them)
    diff = {k: (sa.get(k), sb.get(k)) for k in _schedule_keys()
            if (k in sa or k in sb) and sa.get(k) != sb.get(k)}
    if not diff:
        return []
    text = ", ".join(f"{k} {a!r} in {ctx.a.label} vs {b!r} in {ctx.b.label}" for k, (a, b) in diff.items())
    sentence = f"The schedule of `{cb.function or kb['kernel']}` differs from `{ca.function or ka['kernel']}`: {text}."
    return [_finding(ctx, "schedule", sentence, source="static catalog",
                     a={"kernel": ka["kernel"], **sa}, b={"kernel": kb["kernel"], **sb})]


UNIT_RULES: list[Callable[[Context], list[dict[str, Any]]]] = [
    launch_config, launch_count, parallelism, occupancy_limiter, shared_memory, local_memory, global_access,
    bank_conflicts, bandwidth, compute_throughput, recomputation, shared_executable, vector_tiles, loop_stride,
    library_call, schedule_rule,
]
# Rules about one side's kernels alone; every other rule compares the two sides as computing the
# same ops, which a unit with one side, or joined by launch size alone, gives no ground for.
ONE_SIDE_RULES = (shared_executable,)
WEAK_TIERS = ("shape", "unmatched")
# Findings that describe a unit without naming why it is slower: achieved bandwidth is a
# consequence, and a differing schedule says which choice changed, not what it did to the kernel.
DESCRIPTIVE_RULES = ("bandwidth", "compute", "schedule", "library-call")
# On the CPU a dispatch's workgroups are tasks that the runtime's few threads take in turn: how many
# there are on each side is said, but no rule weighs them against the cores, so it names no mechanism
# (the README's main job: the slower side ran 16 workgroups against 1).
CPU_DESCRIPTIVE_RULES = ("launch-config",)


def _unit_rules(unit: dict[str, Any], att: Attribution) -> list[Callable[[Context], list[dict[str, Any]]]]:
    """The rules a unit's pairing supports; what it does not support goes to cannot_conclude."""
    if unit["kernels_a"] and unit["kernels_b"] and unit.get("method") not in WEAK_TIERS:
        return UNIT_RULES
    why = ("has kernels of one variant only" if not (unit["kernels_a"] and unit["kernels_b"])
           else f"was joined by {unit.get('method')} alone, not by the ops its kernels compute")
    att.cannot_conclude.append(f"unit {unit['unit']} {why}: its kernels were not compared with the other "
                               "variant's (launches, occupancy, memory, work, schedule not checked)")
    return [r for r in UNIT_RULES if r in ONE_SIDE_RULES]


# --- whole-graph rule ------------------------------------------------------------------------

def launch_overhead(att: Attribution) -> list[dict[str, Any]]:
    """The residual (launch overhead, gaps, host) accounts for much of a significant whole-graph
    delta. Not when its change is within the profiler's excess (a side's negative residual: its profiled kernels
    outlast its measured call by that much), nor when the side that spends more outside the
    kernels launches fewer of them (then it is not launch overhead), nor from an ncu profile
    (kernels replayed one by one: no timeline); each says so in cannot_conclude."""
    r, wd = att.residual, att.whole_graph["delta_ns"]["median"]
    if not r["significant"] or not att.whole_graph.get("significant"):
        return []  # a share of a delta that is not there (+759% of an A-against-A noise) explains nothing
    d = r["delta_ns"]["median"]
    biggest_unit = max((abs(u["delta_ns"]["median"]) for u in att.units), default=0.0)
    if wd and abs(d) < 0.25 * abs(wd) and abs(d) < biggest_unit:
        return []
    replayed = [att.variants[v]["label"] for v in "ab" if "ncu" in att.variants[v].get("profilers", ())]
    if replayed:  # ncu times each kernel alone, replayed: no timeline of the call to see launches or gaps in
        att.cannot_conclude.append(
            f"residual: ncu replayed each kernel of {' and '.join(replayed)} on its own, so the time outside the "
            f"kernels ({_us(abs(r['delta_ns']['median']))} change) mixes launch overhead with replay effects and "
            "is not read as launch overhead; `rootcause run --profile cupti` measures the call's timeline")
        return []
    la, lb = r["launches_per_call"]["a"], r["launches_per_call"]["b"]
    A, B = att.variants["a"]["label"], att.variants["b"]["label"]
    negative = [v for v in "ab" if r[v]["median"] < 0]
    # A negative residual: the side's profiled kernels outlast its measured call, so its profile
    # overstates kernel time by at least that much; a change within that excess is the profiler's.
    excess = sum(-r[v]["median"] for v in negative)
    if negative and abs(d) <= excess:
        att.cannot_conclude.append(
            f"residual: negative on {' and '.join(att.variants[v]['label'] for v in negative)} (profiled kernels "
            f"{_us(excess)} longer than the measured call), more than its {_us(abs(d))} change: launch overhead "
            "and host time were not measured")
        return []
    if la != lb and (d > 0) != (lb > la):
        att.cannot_conclude.append(
            f"residual: {B if d > 0 else A} spends {_us(abs(d))} more outside the kernels while launching fewer "
            f"kernels ({_n(lb)} vs {_n(la)} per call), so it is not launch overhead; gaps and host time were "
            "not examined")
        return []
    verb = "costs" if d > 0 else "saves"
    sentence = (f"Outside the kernels, {B} {verb} {_us(abs(d))} per call against {A} "
                f"({_us(r['b']['median'])} vs {_us(r['a']['median'])} of launch overhead, gaps and host time), "
                f"with {_n(lb)} launches per call vs {_n(la)}")
    if wd:
        sentence += f"; that is {d / wd:+.0%} of the whole-graph delta"
    if la and la == lb:  # the same launches: what changed is the host's work between them or around the call
        sentence += (f". With the same launches a side, that is not more launches: {_us(abs(d) / la)} a launch "
                     "if it were the launch path, else host work (a synchronisation, a copy, an allocation) "
                     "between launches or around the call")
    idle = _largest_idle_change(att, d)
    if idle:
        sentence += ". " + idle
    return [_finding(None, "launch-overhead", sentence + ".", source=att.whole_graph["source"],
                     residual_a_ns=r["a"], residual_b_ns=r["b"], delta_ns=r["delta_ns"],
                     launches_per_call={"a": la, "b": lb}, profiler_excess_ns=excess)]


def _largest_idle_change(att: Attribution, residual_delta: float) -> str | None:
    """Where inside the profiled calls the device's idle time moved most, when that unit's change
    carries a quarter of the residual's, in the residual's direction: a sentence naming the unit
    whose launches wait (what the host does just before them), or None."""
    rows = [u for u in att.units if u.get("idle_before_a_ns") is not None and u.get("idle_before_b_ns") is not None]
    if not rows or not residual_delta:
        return None
    sign = math.copysign(1.0, residual_delta)
    u = max(rows, key=lambda u: (u["idle_before_b_ns"] - u["idle_before_a_ns"]) * sign)
    if (u["idle_before_b_ns"] - u["idle_before_a_ns"]) * sign < 0.25 * abs(residual_delta):
        return None
    A, B = att.variants["a"]["label"], att.variants["b"]["label"]
    kernel = (u["kernels_b"] or u["kernels_a"])[0]
    return (f"In the profiled calls the device waits {_us(u['idle_before_b_ns'])} a call before the launches of "
            f"unit {u['unit']} (`{short(kernel, 48)}`) in {B} against {_us(u['idle_before_a_ns'])} in {A}: the host's "
            "work just before those launches is where the time goes")


def _device(device: str | None) -> tuple[str | None, int | None]:
    if device is None:
        return None, None
    key = gpus.find_device(device)
    if key is None:
        raise KeyError(f"unknown device {device!r} (known: {', '.join(gpus.DEVICES)})")
    return gpus.DEVICES[key]


def diagnose(att: Attribution, alignment: Alignment, catalog_a: list[CatalogKernel] | None = None,
             catalog_b: list[CatalogKernel] | None = None, device: str | None = None,
             entry_a: str | None = None, entry_b: str | None = None,
             device_b: str | None = None, cpu: bool = False) -> list[dict[str, Any]]:
    """Run every rule; attach findings to their units and to att.findings; return them all.
    device is A's GPU and B's too unless device_b names B's own (two traces of two machines);
    cpu: both variants ran on the CPU (what is left unread is then said in a CPU's terms)."""
    gpu = {v: (gpus.find_device(d) if d else None, *_device(d)) for v, d in (("a", device), ("b", device_b or device))}
    cats = {"a": catalog_index(catalog_a, by_function=False), "b": catalog_index(catalog_b, by_function=False)}
    entries = {"a": entry_a, "b": entry_b}
    shared = {v: {r.kernel: tuple(r.shared_call_sites) for r in alignment.kernels.itertuples()
                  if r.variant == v and r.shared_call_sites} for v in "ab"}
    findings: list[dict[str, Any]] = []
    for unit in att.units:
        unit["unexplained"] = False
        if not unit["significant"]:
            continue
        sides = {}
        for v in "ab":
            rows = att.kernels[(att.kernels.variant == v) & (att.kernels.unit == unit["unit"])]
            sides[v] = Side(att.variants[v]["label"], rows, cats[v], shared[v], entries[v], *gpu[v])
        ctx = Context(unit, sides["a"], sides["b"], att, cpu=cpu)
        rules = _unit_rules(unit, att)
        for rule in rules:
            found = rule(ctx)
            unit["findings"].extend(found)
            findings.extend(found)
        # a unit whose sides were not compared already says so (_unit_rules)
        descriptive = DESCRIPTIVE_RULES + (CPU_DESCRIPTIVE_RULES if cpu else ())
        unit["unexplained"] = rules is UNIT_RULES and all(f["rule"] in descriptive for f in unit["findings"])
        if unit["unexplained"]:
            att.cannot_conclude.append(_unexplained(ctx))
    findings.extend(launch_overhead(att))
    att.findings = findings
    att.cannot_conclude.extend(_limits(att, catalog_a, catalog_b, None if cpu else device, cpu))
    if gpu["a"][0] != gpu["b"][0] and gpu["a"][0] and gpu["b"][0]:
        att.cannot_conclude.append(
            f"{att.variants['a']['label']} ran on the {gpu['a'][0]} and {att.variants['b']['label']} on the "
            f"{gpu['b'][0]}: each side's waves, occupancy and bandwidth are of its own GPU, and the delta mixes the "
            "compiler's change with the GPUs' difference")
    return findings


def _unexplained(ctx: Context) -> str:
    """What to say of a significant unit no rule found a mechanism for: what was compared and
    found alike, and what the rules do not read."""
    u = ctx.unit
    slow = _slow_fast(ctx)[0].label
    text = (f"unit {u['unit']}: {slow} is {_us(abs(u['delta_ns']['median']))} slower per call here and no rule "
            "names a mechanism (launch configuration and count, parallelism, occupancy, shared and local memory, "
            "recomputation and shared executables were compared where the facts allowed and showed none")
    if ctx.cpu:
        return text + ("; nor do the hot loops' memory strides and IREE's vector tiles, where the catalogs read "
                       "them); what else the kernels' bodies do differently (the vector code LLVM emitted, "
                       "instruction mix) is not read by any rule")
    if all(_counted(side, COUNTER_COLUMNS) for side in (ctx.a, ctx.b)):
        return text + ("; nor do the hardware counters: L2 sectors, sectors per global request and wavefronts "
                       "per shared instruction); what else the kernels' bodies do differently (instruction mix, "
                       "latency) is not read by any rule")
    return text + ("); how the kernels' bodies access memory (coalescing, shared-memory bank conflicts) needs "
                   "hardware counters this profile does not have (`rootcause run --profile ncu` records them), "
                   "and their instruction mix is not read by any rule")


def _limits(att, catalog_a, catalog_b, device, cpu: bool = False) -> list[str]:
    out = []
    if not catalog_a or not catalog_b:
        out.append("without both catalogs (bundles' manifest.json), units are joined by what the traces show "
                   "(kernel names, launch shapes, the CPU ops and modules around each launch), not provenance; "
                   "schedule rules, lowering_config, bytes moved "
                   "(bandwidth vs peak), work (recomputation) and spills cannot be checked")
    if device is None and not cpu:
        out.append("no --gpu given: waves per SM, occupancy and bandwidth against peak are not computed")
    if att.whole_graph["source"] == "profiled-span":
        out.append("no measurement given: the whole-graph delta is the profiled span, which includes "
                   "profiler overhead; closure says how well units + residual explain that span, "
                   "not the un-profiled latency")
    if any(u["flagged"] for u in att.units):
        out.append("some kernels have no counterpart in the other variant (flagged units)")
    return out
