"""Rules on memory: shared and local memory per block, achieved bandwidth and compute
throughput, and the hardware counters of global and shared accesses."""
from __future__ import annotations


import pandas as pd

from rootcause import gpus
from rootcause.analysis.result import Finding
from rootcause.analysis.rules.common import Context, Side, finding, is_na, number_text, op_evidence_tiers, time_text
from rootcause.analysis.rules.recomputation import side_work

# A hardware-counter ratio (L2 sectors, sectors per request, wavefronts per shared instruction)
# this large between the two sides' kernels names a memory-access mechanism.
COUNTER_FACTOR = 2.0


def _max_col(side: Side, col: str) -> tuple[int, str | None]:
    vals = side.kernels[["kernel", col]].dropna() if col in side.kernels else pd.DataFrame()
    if vals.empty:
        return 0, None
    row = vals.sort_values(col, ascending=False).iloc[0]
    return int(row[col]), row["kernel"]


def shared_memory(ctx: Context) -> list[Finding]:
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
    return [finding(ctx, "shared-memory", sentence + ".", source="profiled", variant=has.label,
                     kernel=k, shared_bytes=size, schedule_rule=rule)]


def local_memory(ctx: Context) -> list[Finding]:
    """Local memory, stack or spills where the other side has none (or less). On the CPU spills
    alone: a dispatch's stack frame is ordinary cached memory, and its size (locals and spills
    together, read from the prologue) says nothing of how often the loop touches it."""
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
    weighed = ("spills",) if ctx.cpu else tuple(fa)
    if all(fa[k] == fb[k] for k in weighed):
        return []
    worse, better = (ctx.b, ctx.a) if sum(fb[k] for k in weighed) > sum(fa[k] for k in weighed) else (ctx.a, ctx.b)
    f = facts[worse.label]
    sentence = (f"{worse.label} uses {f['local_bytes']} B local memory per thread, {f['spills']} "
                f"spilled bytes and {f['stack_bytes']} B stack; {better.label}: "
                f"{facts[better.label]['local_bytes']} B, {facts[better.label]['spills']}, "
                f"{facts[better.label]['stack_bytes']} B.")
    return [finding(ctx, "local-memory", sentence, source="profiled local bytes, static spills/stack",
                     **facts)]


def bandwidth(ctx: Context) -> list[Finding]:
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
        t = f"{label} moves {r['bytes_per_call'] / 1e6:.2f} MB in {time_text(r['time_ns'])} ({_rate(r['bytes_per_s'])}"
        peak = peaks[label]
        t += f", {r['bytes_per_s'] / peak:.1%} of the {devices[label]}'s {peak / 1e12:.1f} TB/s peak)" if peak else ")"
        texts.append(t)
    peak = peaks[ctx.a.label] if peaks[ctx.a.label] == peaks[ctx.b.label] else None
    return [finding(ctx, "bandwidth", "; ".join(texts) + ".", source="static bytes_moved, profiled time",
                     peak_bytes_per_s=peak, peak_source="vendor spec sheet" if any(peaks.values()) else None,
                     **rows)]


def compute_throughput(ctx: Context) -> list[Finding]:
    """Achieved arithmetic from the catalog's flops against the device's FP32 vector peak (a
    roofline's compute side, beside bandwidth): a compute-starved kernel shows as a small share.
    GPUs of known peak only: a CPU's depends on its cores and vector units, which the run does not record."""
    if ctx.cpu:
        return []
    rows, texts = {}, []
    for side in (ctx.a, ctx.b):
        work = side_work(side, "flops")
        time = float(side.kernels.time_per_call_ns.sum())
        peak = gpus.PEAK_FP32_FLOPS.get(side.device or "")
        if not work or not time or not peak:  # no GPU of known peak (a CPU profile compared): nothing to weigh
            return []
        rate = work / time * 1e9
        rows[side.label] = {"flops_per_call": work, "time_ns": time, "flops_per_s": rate, "peak_fp32": peak}
        text = f"{side.label} does {_scaled(work, 'FLOP')} in {time_text(time)} ({_scaled(rate, 'FLOP/s')}"
        texts.append(text + f", {rate / peak:.1%} of the {side.device}'s {peak / 1e12:.0f} TFLOP/s FP32 vector peak)")
    return [finding(ctx, "compute", "; ".join(texts) + ".", source="static flops, profiled time", **rows)]


def _rate(bytes_per_s: float) -> str:
    """Bytes a second in the unit that shows its digits: TB/s on a GPU's scale, GB/s below it."""
    return f"{bytes_per_s / 1e12:.2f} TB/s" if bytes_per_s >= 1e11 else f"{bytes_per_s / 1e9:.2f} GB/s"


def _scaled(value: float, unit: str) -> str:
    """A count or rate of floating-point operations with the decimal prefix that keeps its first
    digits: 0.27 TFLOP/s, 28.3 MFLOP, never 0.00 GFLOP for a pooling kernel's few thousand."""
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= factor / 10:
            return f"{value / factor:,.2f} {prefix}{unit}"
    return f"{value:,.0f} {unit}"


def slow_fast(ctx: Context) -> tuple[Side, Side]:
    return (ctx.b, ctx.a) if ctx.unit.delta_ns.median > 0 else (ctx.a, ctx.b)


def counted(side: Side, cols: tuple[str, ...]) -> dict[str, float] | None:
    """Per call: the side's kernels' counter sums (median per launch x launches), None when a
    kernel has no count (the profile is not a counter profile, or did not count that metric)."""
    totals = dict.fromkeys(cols, 0.0)
    for r in side.kernels.to_dict("records"):
        for c in cols:
            v = r.get(c)
            if v is None or is_na(v):
                return None
            totals[c] += float(v) * r["launches_per_call"]
    return totals if len(side.kernels) else None


def global_access(ctx: Context) -> list[Finding]:
    """Uncoalesced global access (hardware counters): the slow side's kernels for the same ops
    move COUNTER_FACTOR times the L2 sectors of the other side's, and their global loads and
    stores touch COUNTER_FACTOR times the 32-byte sectors per request. Both, so that more
    traffic of a different cause (more bytes, re-reads) or a wider access that L1 absorbs is not
    called uncoalesced. Only between kernels paired by the ops they compute."""
    if ctx.unit.method not in op_evidence_tiers() + ("remainder",):
        return []
    slow, fast = slow_fast(ctx)
    cols = ("l2_sectors", "global_sectors", "global_requests")
    s, f = counted(slow, cols), counted(fast, cols)
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
    return [finding(ctx, "global-access", sentence, source="profiled hardware counters (ncu)",
                     **{slow.label: s, fast.label: f}, l2_ratio=l2,
                     sectors_per_request={slow.label: per_s, fast.label: per_f})]


def bank_conflicts(ctx: Context) -> list[Finding]:
    """Shared-memory bank conflicts (hardware counters): the slow side's kernels need
    COUNTER_FACTOR times the wavefronts per shared-memory instruction of the other side's, and
    at least two (one is a conflict-free access). Only where both sides use shared memory."""
    slow, fast = slow_fast(ctx)
    cols = ("shared_wavefronts", "shared_instructions")
    s, f = counted(slow, cols), counted(fast, cols)
    if not s or not f or not s["shared_instructions"] or not f["shared_instructions"]:
        return []
    ws, wf = s["shared_wavefronts"] / s["shared_instructions"], f["shared_wavefronts"] / f["shared_instructions"]
    if ws < 2 or ws < COUNTER_FACTOR * wf:
        return []
    sentence = (f"{slow.label}'s kernels need {ws:.1f} shared-memory wavefronts per shared load or store against "
                f"{wf:.2f} in {fast.label} ({number_text(round(s['shared_wavefronts']))} vs {number_text(round(f['shared_wavefronts']))} per call): "
                "bank conflicts serialize each warp's shared accesses.")
    return [finding(ctx, "bank-conflicts", sentence, source="profiled hardware counters (ncu)",
                     **{slow.label: s, fast.label: f}, wavefronts_per_instruction={slow.label: ws, fast.label: wf})]
