"""Whether the whole-graph delta and each unit's are called significant: the checks run after
attribute() (a second pair of profile sessions, the fastest calls of two processes, the practical
threshold, one basis both sides share, closure). A check reads the attribution and returns what it
takes back (result.Withdrawal, with its reason); `withdraw` applies them, the one place a verdict
changes."""
from __future__ import annotations

from math import comb

from rootcause.analysis.result import Attribution, Unit, Withdrawal
from rootcause.model import Interval, WholeGraph
from rootcause.stats import CPU_MIN_EFFECT_SHARE, LEVEL, holds_edge, quantile


def require_clear_of_floor(att: Attribution) -> list[Withdrawal]:
    """No whole-graph verdict where the delta's interval holds the practical threshold (either
    sign), wherever else it lies: whether the difference reaches the threshold cannot be told, and
    which side of it a run's median falls, or whether its interval just reaches 0, follows the
    machine's load, not the code. The three outcomes follow where the interval lies against the
    band of +-threshold (a region of practical equivalence): entirely beyond it, significant;
    entirely inside it, not significant (no difference that large, whether or not it holds 0);
    across its edge, no verdict. An interval that holds 0 but reaches past the threshold is no
    evidence of 'no difference'. Asked last, after the checks whose reasons say more
    (require_repeat, require_floor)."""
    if att.whole_graph.undetermined:  # withdrawn already, with a reason that says more
        return []
    d, floor = att.whole_graph.delta_ns, att.whole_min_effect_ns
    if floor <= 0 or not holds_edge(d.low, d.high, floor):
        return []
    share = floor / att.whole_graph.a.median if att.whole_graph.a.median else 0.0
    longer = ("this measurement (measure longer: --budget-s)" if att.whole_graph.source == "measured"
              else "these traces (more iterations a side would narrow the interval)")
    return [Withdrawal("clear-of-floor", f"holds in its interval the practical threshold of {floor / 1e3:.1f} us "
                       f"({share:.0%} of A's call): whether the difference reaches it cannot be told from "
                       f"{longer}", measured=True)]


BASES = {"measured": "measured calls", "profiled-span": "profiled spans", "profiler-steps": "ProfilerStep spans",
         "loader-iterations": "data-loader iterations", "annotation-iterations": "annotated iterations",
         "graph-launches": "graph launches, one an iteration", "optimizer-steps": "optimizer steps",
         "launch-interval": "launches, one a call",
         "call-interval": "calls found in the repeating kernel sequence"}


# Bases of one kind: calls found in the kernel sequence, of one launch or of several (a fused side
# that launches one dispatch a call against the split side's three).
_KIND = {"launch-interval": "sequence", "call-interval": "sequence"}


def require_shared_basis(att: Attribution, whole_a: WholeGraph, whole_b: WholeGraph,
                         labels: tuple[str, str]) -> list[Withdrawal]:
    """A whole-graph verdict only on one basis both sides share: the same kind of iteration, and,
    where the calls were found in the kernel sequence (no markers), calls of one signature a side:
    calls of several signatures are a guess at the iterations, and a ratio of guesses is no verdict.
    Records each side's basis in whole_graph.basis."""
    att.whole_graph.basis = {"a": whole_a.source, "b": whole_b.source}
    if _KIND.get(whole_a.source, whole_a.source) != _KIND.get(whole_b.source, whole_b.source):
        whole = Withdrawal("shared-basis", f"{labels[0]} has {whole_a.samples or '?'} "
                           f"{BASES.get(whole_a.source, whole_a.source)}, {labels[1]} has {whole_b.samples or '?'} "
                           f"{BASES.get(whole_b.source, whole_b.source)}: the two times are not of one kind")
        return [whole, *_units_per_call(att, "the two sides' calls are not of one kind")]
    for i, w in enumerate((whole_a, whole_b)):
        if w.source == "call-interval" and (w.signatures or 1) > 1:
            whole = Withdrawal("shared-basis", f"{labels[i]}'s calls, found in its repeating kernel sequence (no "
                               f"ProfilerStep or call markers), have {w.signatures} different signatures: they are "
                               "a guess at its iterations, not the trace's own")
            return [whole, *_units_per_call(att, f"{labels[i]}'s calls are a guess at its iterations")]
    return []


def _units_per_call(att: Attribution, why: str) -> list[Withdrawal]:
    """A unit's time is per call too: where the calls are no shared basis, neither is its delta."""
    return [Withdrawal("shared-basis", f"unit {u.unit}: its time is per call and {why}, so its delta "
                       f"({delta_text(u.delta_ns)}) is no verdict", unit=u.unit)
            for u in att.units if u.significant]


# What the whole-graph time is, by its source (WholeGraph.source)
WHOLE_NOTES = {
    "measured": "measured whole-graph latency (Measurement)",
    "profiler-steps": "the trace's ProfilerStep spans: each step's wall time, host included",
    "loader-iterations": "the trace's iterations, from one data-loader fetch to the next (no ProfilerStep): "
                         "each one's wall time, host included",
    "annotation-iterations": "the trace's iterations, from one repeated annotation to the next (no ProfilerStep): "
                             "each one's wall time, host included",
    "graph-launches": "the trace's iterations, from one graph launch to the next (no ProfilerStep or repeated "
                      "annotation): each one's wall time, host included",
    "optimizer-steps": "the trace's iterations, from one optimizer step to the next (no ProfilerStep): each one's "
                       "wall time, host included",
    "launch-interval": "one launch a call (no call markers): the interval from one launch's start to the next, "
                       "host included",
    "call-interval": "calls found in the profile (no call markers): the interval from one call's first GPU row "
                     "to the next call's, host included",
}


def withdraw(att: Attribution, withdrawals: list[Withdrawal]) -> None:
    """Apply what a check took back, in order: a unit is no longer significant and its line is
    added; the whole graph gets no verdict, its headline the first reason given."""
    units = {u.unit: u for u in att.units}
    for w in withdrawals:
        att.withdrawals.append(w)
        if w.unit is not None:
            units[w.unit].significant = False
            att.cannot_conclude.append(w.why)
        elif w.measured:
            _whole_not_significant(att, w.why)
        else:
            _no_verdict(att, w.why)


def _no_verdict(att: Attribution, reason: str) -> None:
    """No whole-graph verdict: the headline says why instead of a direction (the first reason kept)."""
    att.whole_graph.significant = False
    if att.whole_graph.undetermined is None:
        att.whole_graph.undetermined = reason
    att.closure = None


CLOSURE_BAND = (0.95, 1.05)  # a profile taken apart from the measurement closes within this


def closure_why(att: Attribution, labels: tuple[str, str]) -> str | None:
    """The one line on why the closure of a profile taken apart from the measurement (a CPU
    profile) does not conclude, the deepest cause first: the profiler's own cost inside the kernel
    times (a negative residual), no significant delta to explain, or units and residual outside
    CLOSURE_BAND; None when it closes."""
    d = att.whole_graph.delta_ns
    # a residual whose whole interval is below zero: one that only touches zero is no evidence
    r = att.residual
    over = [(-side.median, r.launches_per_call[v], labels[i])
            for i, (v, side) in enumerate((("a", r.a), ("b", r.b))) if side.high < 0]
    if over:
        extra, n, label = max(over)
        return (f"closure is no check here: {label}'s profiled kernels take {extra / 1e3:.1f} us per call more than "
                f"its measured latency (scaled to it; {extra / n / 1e3:.1f} us or more per launch, {n:g} launches per "
                "call): the profiler's own cost lands inside the kernel times, so the residual is not measured and "
                f"the units carry up to that bias against a {abs(d.median) / 1e3:.1f} us delta")
    if att.closure is None:
        return (f"closure not computed: the measured whole-graph delta {d.median / 1e3:+.1f} us "
                f"[{d.low / 1e3:+.1f}, {d.high / 1e3:+.1f}] is not significant, so there is no delta for "
                "the units and the residual to explain")
    if CLOSURE_BAND[0] <= att.closure <= CLOSURE_BAND[1]:
        return None
    wide = max((b.high - b.low) / 2 for b in (att.variants[v].kernel_busy_ns for v in "ab"))
    calls = min(att.variants[v].calls for v in "ab")
    return (f"closure {att.closure:.0%} is outside {CLOSURE_BAND[0]:.0%}-{CLOSURE_BAND[1]:.0%}: the profiled kernel "
            f"time per call is known to +-{wide / 1e3:.1f} us (95% interval over {calls} calls) against a "
            f"{abs(d.median) / 1e3:.1f} us delta, so the units' medians do not add up to the measured delta; "
            "profile more calls (--profile-calls) or on a quieter machine")


def require_repeat(att: Attribution, repeat: Attribution, how: str,
                   timed: dict[str, tuple[float, float]] | None = None) -> list[Withdrawal]:
    """Keep a delta significant only where it stands out of what a profile session alone does.

    repeat: a second pair of profiles of A and B, taken apart from the first (`how` says how).
    Calls profiled one after another in one session share that session's state (the machine's
    load, where the buffers landed), so a session can shift one kernel for all of its calls and the
    interval over its calls will not show it (on a loaded CPU, tens of percent of a kernel:
    benchmarks/README.md#a-against-a-on-the-cpu-2026-12-04). A unit stays significant when the second
    pair finds it significant with the same sign and in both pairs the sides stand further apart, as a
    factor, than either side's own time for that unit moved between its two sessions. timed: per
    side, the median call of each of its two sessions as it timed them; the measured whole-graph
    delta stays significant when both pairs of sessions show its sign and their mirrored delta
    reaches the CPU's share (_sessions_disagree). Records each unit's delta in the second pair
    (repeat_delta_ns)."""
    again = {u.unit: u for u in repeat.units}
    out = []
    for u in att.units:
        r = again.get(u.unit)
        u.repeat_delta_ns = r.delta_ns if r is not None else None
        if not u.significant:
            continue
        names = unit_names(u)
        if r is None or not r.significant or (r.delta_ns.median > 0) != (u.delta_ns.median > 0):
            again_text = "no such unit" if r is None else delta_text(r.delta_ns) + \
                ("" if r.significant else " (not significant)")
            why = f"but {again_text} in {how}: the difference does not reproduce between profile sessions"
        else:
            # A session scales a kernel's time (the machine's state, where its buffers landed), so
            # both pairs must set the sides further apart than either side's own time moved
            # between its two sessions, as factors: a slow side that doubles between sessions
            # still stands 45x from a fast side that does not.
            drift = max(_factor(r.time_ns(v).median, u.time_ns(v).median) for v in "ab")
            apart = min(_factor(x.time_b_ns.median, x.time_a_ns.median) for x in (u, r))
            if apart > drift:
                continue
            why = (f"and {delta_text(r.delta_ns)} in {how}, while the same code's time for it moved by up to "
                   f"{drift:.2f}x between a side's two sessions, and the sides stand {apart:.2f}x apart: the "
                   "difference is within what a session alone does")
        out.append(Withdrawal("repeat", f"unit {u.unit} ({names}): {delta_text(u.delta_ns)} in the first pair "
                              f"of profiles {why}, so it is not called significant", unit=u.unit))
    if timed and set(timed) == {"a", "b"} and att.whole_graph.significant:
        disagree = _sessions_disagree(att, timed)
        if disagree:
            out.append(Withdrawal("repeat", disagree, measured=True))
    return out


def _factor(x: float, y: float) -> float:
    """How many times the larger of two times is the smaller (1 for two equal or two empty times,
    infinite against an empty one)."""
    lo, hi = sorted((max(x, 0.0), max(y, 0.0)))
    if hi == 0:
        return 1.0
    return hi / lo if lo > 0 else float("inf")


def _whole_not_significant(att: Attribution, why: str) -> None:
    """Withdraw the whole graph's significance, saying why (after 'the measured delta ...')."""
    whole = att.whole_graph
    whole.significant = False
    if whole.undetermined is None:
        whole.undetermined = f"the measured delta {why}"
    att.closure = None
    # the closure line attribute() wrote judged a significant delta: say it again for this one
    att.cannot_conclude = [c for c in att.cannot_conclude if not c.startswith("closure ")]
    closure = closure_why(att, (att.variants["a"].label, att.variants["b"].label))
    att.cannot_conclude += [f"whole graph: the measured delta {delta_text(whole.delta_ns)} {why}, so it is not "
                            "called significant"] + ([closure] if closure else [])


# On a loaded CPU a call now and then stalls for a millisecond or more (the runtime's worker threads
# wake late), and how often differs from one process to another, so two processes' medians can
# differ by the stalls alone; the fastest tenth of each side's calls is what the code decides.
# benchmarks/README.md#one-source-two-releases-the-version-family-2026-12-06
FLOOR_QUANTILE = 0.1


def carry_measured_interval(att: Attribution, stalled: bool = False) -> list[Withdrawal]:
    """Give each unit of sides scaled to their measured latencies the delta interval that carries
    the measurement's own uncertainty, and keep a significant one significant only where that
    interval excludes 0.

    A scaled unit's time is its share of the profiled call times the measured call, f * M, so
    B - A = f_b (M_b - M_a) + (f_b - f_a) M_a: the measured delta enters every scaled unit in
    proportion to its share, and its interval with it. The profiled calls bound each share tightly,
    so the profiles' interval alone would pass a difference of the two measured medians that the
    measurement itself does not call (a loaded machine's) to the unit that fills the call, and
    print it as precise. stalled: the measured delta rests on how often calls stalled
    (require_floor), not on the code, so it is carried as anywhere between 0 and its interval.
    Conservative: each term's interval at its extremes, hulled with the profiles' own interval;
    the median stays the profiles'."""
    d, m = att.whole_graph.delta_ns, {"a": att.whole_graph.a.median, "b": att.whole_graph.b.median}
    if stalled:
        d = Interval(d.median, min(d.low, 0.0), max(d.high, 0.0))
    if min(m.values()) <= 0:
        return []
    what = ("the measured delta, which rests on stalls, taken as anywhere from 0 to its interval" if stalled
            else "the measured delta's own interval")
    out = []
    for u in att.units:
        f = {v: (u.time_ns(v).low / m[v], u.time_ns(v).high / m[v]) for v in "ab"}
        low = min(f["b"][0] * d.low, f["b"][1] * d.low) + (f["b"][0] - f["a"][1]) * m["a"]
        high = max(f["b"][0] * d.high, f["b"][1] * d.high) + (f["b"][1] - f["a"][0]) * m["a"]
        u.delta_ns = Interval(u.delta_ns.median, min(low, u.delta_ns.low), max(high, u.delta_ns.high))
        if not u.significant or u.delta_ns.low > 0 or u.delta_ns.high < 0:
            continue
        out.append(Withdrawal(
            "measured-interval", f"unit {u.unit} ({unit_names(u)}): {u.delta_ns.median / 1e3:+.1f} us once scaled to "
            f"the measured latencies, but [{u.delta_ns.low / 1e3:+.1f}, {u.delta_ns.high / 1e3:+.1f}] us with {what} "
            f"({delta_text(d)}) carried into its scaled times: the measurement does not tell the kernels apart, so it "
            "is not called significant", unit=u.unit))
    return out


def require_floor(att: Attribution, samples: dict[str, list[float]], apart: str) -> list[Withdrawal]:
    """Keep a whole-graph delta measured in two processes significant only where the sides' fastest
    calls (their FLOOR_QUANTILE) differ the same way by CPU_MIN_EFFECT_SHARE of A's or more: else the
    delta is how often each process's calls stalled, not the code. samples: per side ('a', 'b') the
    measured seconds per call; apart: which processes timed the sides, in words."""
    whole = att.whole_graph
    if not whole.significant:
        return []
    floor = {v: quantile(samples[v], FLOOR_QUANTILE) * 1e9 for v in "ab"}
    moved, d = floor["b"] - floor["a"], whole.delta_ns.median
    if (moved > 0) == (d > 0) and abs(moved) >= CPU_MIN_EFFECT_SHARE * floor["a"]:
        return []
    label = {v: att.variants[v].label for v in "ab"}
    return [Withdrawal("floor", (
        f"rests on how often calls stalled, not on the code's time: {apart}, and the fastest tenth of their calls "
        f"take {floor['a'] / 1e3:.1f} us ({label['a']}) and {floor['b'] / 1e3:.1f} us ({label['b']}), "
        f"{moved / floor['a']:+.1%} apart, where the medians are {whole.a.median / 1e3:.1f} us and "
        f"{whole.b.median / 1e3:.1f} us; on this machine how often a process's calls stall differs from "
        "process to process"), measured=True)]


def _sessions_disagree(att: Attribution, timed: dict[str, tuple[float, float]]) -> str | None:
    """Why the profile sessions' own timed calls do not back the measured whole-graph delta, or None.

    Each pair of sessions (A then B, then B then A) times the calls of both sides: each pair must
    show the delta's sign, and the mirrored order's delta, (B1 + B2 - A1 - A2) / 2, in which a
    machine that speeds up or slows down steadily across the four sessions cancels out, must reach
    the CPU's practical share of A's time in the same direction. A side's change between its own
    two sessions is not held against the delta: in the mirrored order it is that drift, which the
    pairs' order cancels and the interleaved measurement never saw."""
    whole = att.whole_graph
    d, base = whole.delta_ns.median, whole.a.median
    (a1, a2), (b1, b2) = timed["a"], timed["b"]
    label = {v: att.variants[v].label for v in "ab"}
    if (b1 - a1 > 0) != (d > 0) or (b2 - a2 > 0) != (d > 0):
        return (f"({d / base:+.1%}) is not what both pairs of profile sessions show with their own timed calls: "
                f"{label['b']} - {label['a']} = {(b1 - a1) / 1e3:+.1f} us in the first pair and "
                f"{(b2 - a2) / 1e3:+.1f} us in the second (mirrored order)")
    mirrored = (b1 + b2 - a1 - a2) / 2
    floor = CPU_MIN_EFFECT_SHARE * (a1 + a2) / 2
    if abs(mirrored) < floor:
        return (f"({d / base:+.1%}) is more than the profile sessions show: in the mirrored order (A, B, B, A), "
                f"which cancels a steady drift of the machine, {label['b']} - {label['a']} = {mirrored / 1e3:+.1f} us "
                f"({mirrored / ((a1 + a2) / 2):+.1%}), under the {CPU_MIN_EFFECT_SHARE:.0%} a CPU delta must reach")
    return None


def unit_names(u: Unit) -> str:
    """A unit's kernels for a withdrawal's line: B's (A's where B has none), at most 80 characters."""
    return " + ".join(u.kernels_b or u.kernels_a)[:80]


def delta_text(d: Interval) -> str:
    return f"{d.median / 1e3:+.1f} us [{d.low / 1e3:+.1f}, {d.high / 1e3:+.1f}]"


def separable(n_a: int, n_b: int, level: float = LEVEL) -> bool:
    """Whether n_a against n_b samples can show a difference at `level`: complete separation of
    the two (every sample of one side above every sample of the other) happens by chance once in
    C(n_a + n_b, n_a) orderings, which must be rarer than 1 - level (3 against 3 at 95%: 1 in 20).
    Fewer calls than that and a percentile interval excludes 0 more often than it says; one call
    a side has no spread at all."""
    return min(n_a, n_b) >= 2 and comb(n_a + n_b, n_a) >= 1 / (1 - level) - 1e-9  # the epsilon absorbs 1 / 0.05 rounding up
