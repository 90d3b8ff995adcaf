"""Diagnose what differs in each unit whose delta is significant.

Each rule is one small function `rule(ctx) -> list[Finding]`; a Finding (analysis.result) has
the rule's name, its unit, a sentence and evidence: the sentence is what a compiler engineer would
write in a triage thread, the evidence the numbers it rests on and where they came from
('profiled' from the KernelEvents, 'static' from a catalog). Unit rules only run on units
whose delta is significant (interval excludes 0, at least the minimum effect), so noise is
never blamed; the residual rule only runs when the residual delta is significant.
"""
from __future__ import annotations

import math
from typing import Callable

from rootcause import gpus
from rootcause.analysis.align import Alignment, catalog_index
from rootcause.analysis.result import Attribution, Finding, Unit
from rootcause.analysis.rules.common import Context, Side, finding, number_text, time_text
from rootcause.analysis.rules.launch import launch_config, launch_count, occupancy_limiter
from rootcause.analysis.rules.memory import (
    bandwidth,
    bank_conflicts,
    compute_throughput,
    counted,
    global_access,
    local_memory,
    shared_memory,
    slow_fast,
)
from rootcause.analysis.rules.parallelism import parallelism
from rootcause.analysis.rules.recomputation import recomputation
from rootcause.analysis.rules.schedule import library_call, loop_stride, schedule_rule, shared_executable, vector_tiles
from rootcause.model import COUNTER_COLUMNS, CatalogKernel
from rootcause.names import short

# In the order a unit's findings are listed: the work a side does first (a kernel that evaluates
# its producers again), then how it is launched, its memory, its schedule. Findings that describe a
# unit without naming why it is slower are listed after those that do (_mechanisms_first).
UNIT_RULES: list[Callable[[Context], list[Finding]]] = [
    recomputation, launch_config, launch_count, parallelism, occupancy_limiter, shared_memory, local_memory,
    global_access, bank_conflicts, bandwidth, compute_throughput, shared_executable, vector_tiles, loop_stride,
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


def _unit_rules(unit: Unit, att: Attribution) -> list[Callable[[Context], list[Finding]]]:
    """The rules a unit's pairing supports; what it does not support goes to cannot_conclude."""
    if unit.kernels_a and unit.kernels_b and unit.method not in WEAK_TIERS:
        return UNIT_RULES
    why = ("has kernels of one variant only" if not (unit.kernels_a and unit.kernels_b)
           else f"was joined by {unit.method} alone, not by the ops its kernels compute")
    att.cannot_conclude.append(f"unit {unit.unit} {why}: its kernels were not compared with the other "
                               "variant's (launches, occupancy, memory, work, schedule not checked)")
    return [r for r in UNIT_RULES if r in ONE_SIDE_RULES]


# --- whole-graph rule ------------------------------------------------------------------------

def launch_overhead(att: Attribution) -> list[Finding]:
    """The residual (launch overhead, gaps, host) accounts for much of a significant whole-graph
    delta. Not when its change is within the profiler's excess (a side's negative residual: its profiled kernels
    outlast its measured call by that much), nor when the side that spends more outside the
    kernels launches fewer of them (then it is not launch overhead), nor from an ncu profile
    (kernels replayed one by one: no timeline); each says so in cannot_conclude."""
    r, wd = att.residual, att.whole_graph.delta_ns.median
    if not r.significant or not att.whole_graph.significant:
        return []  # a share of a delta that is not there (+759% of an A-against-A noise) explains nothing
    d = r.delta_ns.median
    biggest_unit = max((abs(u.delta_ns.median) for u in att.units), default=0.0)
    if wd and abs(d) < 0.25 * abs(wd) and abs(d) < biggest_unit:
        return []
    replayed = [att.variants[v].label for v in "ab" if "ncu" in att.variants[v].profilers]
    if replayed:  # ncu times each kernel alone, replayed: no timeline of the call to see launches or gaps in
        att.cannot_conclude.append(
            f"residual: ncu replayed each kernel of {' and '.join(replayed)} on its own, so the time outside the "
            f"kernels ({time_text(abs(r.delta_ns.median))} change) mixes launch overhead with replay effects and "
            "is not read as launch overhead; `rootcause run --profile cupti` measures the call's timeline")
        return []
    la, lb = r.launches_per_call["a"], r.launches_per_call["b"]
    A, B = att.variants["a"].label, att.variants["b"].label
    side = {"a": r.a.median, "b": r.b.median}
    negative = [v for v in "ab" if side[v] < 0]
    # A negative residual: the side's profiled kernels outlast its measured call, so its profile
    # overstates kernel time by at least that much; a change within that excess is the profiler's.
    excess = sum(-side[v] for v in negative)
    if negative and abs(d) <= excess:
        att.cannot_conclude.append(
            f"residual: negative on {' and '.join(att.variants[v].label for v in negative)} (profiled kernels "
            f"{time_text(excess)} longer than the measured call), more than its {time_text(abs(d))} change: launch overhead "
            "and host time were not measured")
        return []
    if la != lb and (d > 0) != (lb > la):
        att.cannot_conclude.append(
            f"residual: {B if d > 0 else A} spends {time_text(abs(d))} more outside the kernels while launching fewer "
            f"kernels ({number_text(lb)} vs {number_text(la)} per call), so it is not launch overhead; gaps and host time were "
            "not examined")
        return []
    verb = "costs" if d > 0 else "saves"
    sentence = (f"Outside the kernels, {B} {verb} {time_text(abs(d))} per call against {A} "
                f"({time_text(r.b.median)} vs {time_text(r.a.median)} of launch overhead, gaps and host time), "
                f"with {number_text(lb)} launches per call vs {number_text(la)}")
    if wd:
        sentence += f"; that is {d / wd:+.0%} of the whole-graph delta"
    if la and la == lb:  # the same launches: what changed is the host's work between them or around the call
        sentence += (f". With the same launches a side, that is not more launches: {time_text(abs(d) / la)} a launch "
                     "if it were the launch path, else host work (a synchronisation, a copy, an allocation) "
                     "between launches or around the call")
    idle = _largest_idle_change(att, d)
    if idle:
        sentence += ". " + idle
    return [finding(None, "launch-overhead", sentence + ".", source=att.whole_graph.source,
                     residual_a_ns=r.a.to_dict(), residual_b_ns=r.b.to_dict(), delta_ns=r.delta_ns.to_dict(),
                     launches_per_call={"a": la, "b": lb}, profiler_excess_ns=excess)]


def _largest_idle_change(att: Attribution, residual_delta: float) -> str | None:
    """Where inside the profiled calls the device's idle time moved most, when that unit's change
    carries a quarter of the residual's, in the residual's direction: a sentence naming the unit
    whose launches wait (what the host does just before them), or None."""
    rows = [u for u in att.units if u.idle_before_a_ns is not None and u.idle_before_b_ns is not None]
    if not rows or not residual_delta:
        return None
    sign = math.copysign(1.0, residual_delta)
    u = max(rows, key=lambda u: (u.idle_before_b_ns - u.idle_before_a_ns) * sign)
    if (u.idle_before_b_ns - u.idle_before_a_ns) * sign < 0.25 * abs(residual_delta):
        return None
    A, B = att.variants["a"].label, att.variants["b"].label
    kernel = (u.kernels_b or u.kernels_a)[0]
    return (f"In the profiled calls the device waits {time_text(u.idle_before_b_ns)} a call before the launches of "
            f"unit {u.unit} (`{short(kernel, 48)}`) in {B} against {time_text(u.idle_before_a_ns)} in {A}: the host's "
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
             device_b: str | None = None, cpu: bool = False) -> list[Finding]:
    """Run every rule; attach findings to their units and to att.findings; return them all.
    device is A's GPU and B's too unless device_b names B's own (two traces of two machines);
    cpu: both variants ran on the CPU (what is left unread is then said in a CPU's terms)."""
    gpu = {v: (gpus.find_device(d) if d else None, *_device(d)) for v, d in (("a", device), ("b", device_b or device))}
    cats = {"a": catalog_index(catalog_a, by_function=False), "b": catalog_index(catalog_b, by_function=False)}
    entries = {"a": entry_a, "b": entry_b}
    shared: dict[str, dict[str, tuple]] = {"a": {}, "b": {}}
    k = alignment.kernels
    for v, kernel, sites in zip(k["variant"], k["kernel"], k["shared_call_sites"]):
        if sites:
            shared[v][kernel] = tuple(sites)
    findings: list[Finding] = []
    descriptive = DESCRIPTIVE_RULES + (CPU_DESCRIPTIVE_RULES if cpu else ())
    for unit in att.units:
        unit.unexplained = False
        if not unit.significant:
            continue
        sides = {}
        for v in "ab":
            rows = att.kernels[(att.kernels.variant == v) & (att.kernels.unit == unit.unit)]
            sides[v] = Side(att.variants[v].label, rows, cats[v], shared[v], entries[v], *gpu[v])
        ctx = Context(unit, sides["a"], sides["b"], att, cpu=cpu)
        rules = _unit_rules(unit, att)
        unit.findings.extend(_mechanisms_first([f for rule in rules for f in rule(ctx)], descriptive))
        findings.extend(unit.findings)
        # a unit whose sides were not compared already says so (_unit_rules)
        unit.unexplained = rules is UNIT_RULES and all(f.rule in descriptive for f in unit.findings)
        if unit.unexplained:
            att.cannot_conclude.append(_unexplained(ctx))
    findings.extend(launch_overhead(att))
    att.findings = findings
    att.cannot_conclude.extend(_limits(att, catalog_a, catalog_b, None if cpu else device, cpu))
    if gpu["a"][0] != gpu["b"][0] and gpu["a"][0] and gpu["b"][0]:
        att.cannot_conclude.append(
            f"{att.variants['a'].label} ran on the {gpu['a'][0]} and {att.variants['b'].label} on the "
            f"{gpu['b'][0]}: each side's waves, occupancy and bandwidth are of its own GPU, and the delta mixes the "
            "compiler's change with the GPUs' difference")
    return findings


def _mechanisms_first(found: list[Finding], descriptive: tuple[str, ...]) -> list[Finding]:
    """A unit's findings with those that name a mechanism ahead of those that only describe it,
    each group in rule order: a report's first line on a unit is then the cause where a rule named
    one, not the slower side's bandwidth."""
    return sorted(found, key=lambda f: f.rule in descriptive)


def _unexplained(ctx: Context) -> str:
    """What to say of a significant unit no rule found a mechanism for: what was compared and
    found alike, and what the rules do not read."""
    u = ctx.unit
    slow = slow_fast(ctx)[0].label
    text = (f"unit {u.unit}: {slow} is {time_text(abs(u.delta_ns.median))} slower per call here and no rule "
            "names a mechanism (launch configuration and count, parallelism, occupancy, shared and local memory, "
            "recomputation and shared executables were compared where the facts allowed and showed none")
    if ctx.cpu:
        return text + ("; nor do the hot loops' memory strides and IREE's vector tiles, where the catalogs read "
                       "them); what else the kernels' bodies do differently (the vector code LLVM emitted, "
                       "instruction mix) is not read by any rule")
    if all(counted(side, COUNTER_COLUMNS) for side in (ctx.a, ctx.b)):
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
    if att.whole_graph.source == "profiled-span":
        out.append("no measurement given: the whole-graph delta is the profiled span, which includes "
                   "profiler overhead; closure says how well units + residual explain that span, "
                   "not the un-profiled latency")
    if any(u.flagged for u in att.units):
        out.append("some kernels have no counterpart in the other variant (flagged units)")
    return out
