"""Parallelism: a kernel that launches too few threads (GPU) or keeps too few CPUs busy (CPU) for
the same ops, and the serial chain each thread walks."""
from __future__ import annotations

from typing import Any

import pandas as pd

from rootcause import frontends, gpus
from rootcause.analysis.result import Attribution
from rootcause.analysis.result import Finding
from rootcause.analysis.rules.common import (
    MECHANISM_MIN_SPEEDUP,
    NAME_LIMIT,
    Context,
    Side,
    finding,
    number_text,
    op_evidence_tiers,
    pair,
    product,
    slow_enough,
    unit_speedup,
)
from rootcause.model import CatalogKernel
from rootcause.names import short

# The other side launching this many times the threads for the same ops makes a starved launch a cause.
PARALLELISM_FACTOR = 8


# Or, where the catalogs give the work: each launched thread walking this many times the work a
# thread of the other side walks (over all of that side's kernels for the ops: they run one after
# another): a split that launches a few times the threads stays under PARALLELISM_FACTOR while both
# sides leave the device nearly idle.
SERIAL_FACTOR = 2.0


# A launched thread walking this many bytes (or flops) serially, on a device left idle by both sides:
# the unit's time is a serial chain whatever the other side does.
SERIAL_WORK = 4096


# a kernel's work, in the order it is asked for: flops where the catalog counts them, else bytes moved
WORK_METRICS = (("flops", "flops"), ("bytes_moved", "bytes"))


# On the CPU a dispatch keeping half the CPUs busy or fewer, where the other side's keeps all it can:
# the runtime's threads, one a CPU, take the workgroups in turn (1 workgroup against 16 keeps one CPU busy).
CPU_BUSY_FACTOR = 2


def _resident_threads(side: Side) -> int | None:
    if side.arch is None or side.sms is None:
        return None
    lim = gpus.limits(side.arch)
    return lim.max_warps_per_sm * lim.warp_size * side.sms


def _work_text(slow: Side, focus: pd.Series, fast: Side, best: Any, rows: list, total: int, other_total: int,
               method: str, serial: dict[str, Any] | None, evidence: dict[str, Any]) -> str:
    """The parallelism finding's account of the work: each thread's serial share of the kernel's
    work, the other side's spread of the same ops, and which threads own work (the frontend's
    reading of its tiling); what it rests on goes into evidence."""
    text = ""
    cat = slow.cat(focus["kernel"])
    kernel_work = _kernel_work(cat)
    if kernel_work is not None:
        metric, words, value = kernel_work
        text += f"; each thread's serial share is about {number_text(round(value / total))} {words}"
        evidence["work_per_thread"] = {"metric": metric, "value": value / total}
    else:
        evidence["work_per_thread"] = "not checked: the catalog has no flops or bytes for this kernel"
    same = "the same ops" if method != "remainder" else "the rest of the graph (paired by elimination)"
    text += (f", where {fast.label} spreads {same} over {number_text(other_total)} threads "
             f"(`{best.kernel}`: {number_text(product(best.grid))} x {number_text(product(best.block))}"
             + (f", {len(rows)} kernels" if len(rows) > 1 else "") + ")")
    if serial is not None:
        text += (f"; a thread of {fast.label} walks about {number_text(round(serial['fast']))} {serial['words']} over its "
                 f"kernel(s), {serial['slow'] / serial['fast']:.1f}x less than one of {slow.label}'s")
        evidence["serial_share"] = serial
    work = _thread_work(cat)
    if isinstance(work, dict):
        text += (f". Of each block's {number_text(work['threads_per_workgroup'])} threads, {number_text(work['threads_with_work'])} "
                 f"own an element (workgroup tile {work['workgroup_tile']}, thread tile {work['thread_tile']} against "
                 f"the op's loop ranges {'x'.join(map(str, work['loop_ranges']))}), each computing "
                 f"{number_text(work['outputs_per_thread'])} output(s)")
        if work["serial_elements_per_thread"] > work["outputs_per_thread"]:
            text += f" over {number_text(work['serial_elements_per_thread'])} elements serially"
    evidence["threads_doing_work"] = work
    return text


def parallelism(ctx: Context) -> list[Finding]:
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
    method = ctx.unit.method
    if ctx.cpu:
        return _cpu_parallelism(ctx, slow, focus, fast) if method in op_evidence_tiers() else []
    if method not in op_evidence_tiers() + ("remainder",):
        ctx.attribution.cannot_conclude.append(
            f"unit {ctx.unit.unit}: joined by {method}, not by the ops its kernels compute: "
            "whether the other variant spreads the same work over more threads was not checked")
        return []
    blocks, threads = product(focus["grid"]), product(focus["block"])
    total = blocks * threads
    rows = [r for r in fast.kernels.itertuples(index=False) if r.grid is not None and r.block is not None]
    if not rows:
        return []
    best = max(rows, key=lambda r: product(r.grid) * product(r.block))
    other_total = product(best.grid) * product(best.block)
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
    speedup = unit_speedup(ctx, slow)
    if (wider or shorter) and speedup is not None and speedup < MECHANISM_MIN_SPEEDUP:
        ctx.attribution.cannot_conclude.append(
            f"unit {ctx.unit.unit}: {slow.label}'s `{short(focus['kernel'], NAME_LIMIT)}` runs {number_text(total)} "
            f"thread(s) where {fast.label} launches {number_text(other_total)} for the same ops, yet {fast.label} is only "
            f"{speedup:.2f}x faster on this unit: its threads do not share the work in proportion, so the thread "
            "count is not named as the cause")
        return _serial_both(ctx, slow, focus, fast, rows, total, other_total, speedup)
    if not (wider or shorter):
        return _serial_both(ctx, slow, focus, fast, rows, total, other_total, speedup)
    text = f"{slow.label}'s `{focus['kernel']}` runs {number_text(blocks)} block(s) x {number_text(threads)} threads = {number_text(total)} threads"
    evidence: dict[str, Any] = {"source": "profiled launches", "pairing": method, "kernel": focus["kernel"], "blocks": blocks,
                                "threads_per_block": threads, "threads": total,
                                "other_kernel": best.kernel, "other_threads": other_total}
    if slots is not None:
        text += (f" ({total / slots:.2%} of the {slow.device}'s {number_text(slots)} resident thread slots, "
                 f"{min(blocks, slow.sms)} of {slow.sms} SMs busy)")
        evidence.update(resident_thread_slots=slots, sms=slow.sms)
    text += _work_text(slow, focus, fast, best, rows, total, other_total, method, serial, evidence)
    return [finding(ctx, "parallelism", text + ".", **evidence)]


def _cpu_count(att: Attribution) -> int | None:
    """The CPUs the measured process could run on (the run's environment record), or None."""
    for moment in ("measure_start", "before"):
        cpu = ((att.environment or {}).get(moment) or {}).get("cpu") or {}
        count = cpu.get("affinity_cpus") or cpu.get("logical_cpus")
        if isinstance(count, int) and count > 0:
            return count
    return None


def _cpu_parallelism(ctx: Context, slow: Side, focus: pd.Series, fast: Side) -> list[Finding]:
    """CPU: the runtime's worker threads, one a CPU, take a dispatch's workgroups in turn, so a dispatch
    keeps min(workgroups, CPUs) of them busy. Named where the slow side's dispatch keeps fewer CPUs
    busy than the other side's for the same ops and the unit is MECHANISM_MIN_SPEEDUP times slower;
    what the CPUs can explain is at most their ratio, which the sentence says."""
    cpus = _cpu_count(ctx.attribution)
    rows = [r for r in fast.kernels.itertuples(index=False) if r.grid is not None]
    if cpus is None or not rows:
        return []
    best = max(rows, key=lambda r: product(r.grid))
    mine, theirs = product(focus["grid"]), product(best.grid)
    busy, busy_other = min(mine, cpus), min(theirs, cpus)
    if busy_other < CPU_BUSY_FACTOR * busy:
        return []
    speedup = slow_enough(ctx, slow, focus, f"runs {number_text(mine)} workgroup(s), keeping {number_text(busy)} of the {cpus} CPUs "
                           f"busy where {fast.label}'s keeps {number_text(busy_other)}", "the CPUs left idle")
    if speedup is None:
        return []
    text = (f"{slow.label}'s `{focus['kernel']}` runs {number_text(mine)} workgroup(s) and so keeps {number_text(busy)} of the run's "
            f"{cpus} CPUs busy, where {fast.label}'s `{best.kernel}` runs {number_text(theirs)} workgroups that the runtime's "
            f"threads share over {number_text(busy_other)} CPUs: the unit is {speedup:.2f}x slower, of which spreading over "
            f"the CPUs can give at most {busy_other / busy:.0f}x")
    return [finding(ctx, "parallelism", text + ".", source="profiled launches, the run's CPU count",
                     pairing=ctx.unit.method, kernel=focus["kernel"], workgroups=mine,
                     other_kernel=best.kernel, other_workgroups=theirs, cpus=cpus, speedup=speedup)]


def _serial_both(ctx: Context, slow: Side, focus: pd.Series, fast: Side, rows: list, total: int,
                 other_max: int, speedup: float | None) -> list[Finding]:
    """Both sides leave the device idle and the slow kernel's threads each walk SERIAL_WORK or more
    (flops, else bytes moved): the unit is a serial chain on both sides, whichever is faster.
    Grid x block against the work, no tiles needed."""
    kernel_work = _kernel_work(slow.cat(focus["kernel"]))
    if kernel_work is None:
        return []
    metric, words, work = kernel_work
    fast_blocks = max(product(r.grid) for r in rows)
    if work / total < SERIAL_WORK or slow.sms is None or fast_blocks >= slow.sms:
        return []
    text = (f"Neither side spreads this unit's work over the {slow.device or 'device'}: {slow.label}'s "
            f"`{focus['kernel']}` runs {number_text(product(focus['grid']))} block(s) x {number_text(product(focus['block']))} threads, "
            f"each walking about {number_text(round(work / total))} {words} serially; {fast.label}'s kernels for the same "
            f"ops launch at most {number_text(other_max)} threads in {number_text(fast_blocks)} block(s) ({fast_blocks} of "
            f"{slow.sms} SMs busy at most)" + (f", and are {speedup:.2f}x faster" if speedup else "")
            + ": the unit's time is a serial chain on both sides")
    return [finding(ctx, "parallelism", text + ".", source="profiled launches, catalog work",
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
                   product(r.grid) * product(r.block)) for r in rows]
        if work and others and all(w and t for w, t in others) and len(rows) == len(fast.kernels):
            return {"metric": metric, "words": words, "slow": work / (product(focus["grid"]) * product(focus["block"])),
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
