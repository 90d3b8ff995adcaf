"""Whole-graph latency: the interleaved measurement protocol and its statistics.

The protocol is the one TVM and IREE triage threads use by hand: per variant, warm-up calls, then a
timed warm-up of a few seconds that calls every variant in turn; then blocks, each running every variant `repeats` times, with the variant order taken
from a rotating list of permutations (block b uses permutations[(offset + b) % k]) so that no
variant always runs first or right after another one. It stops early once every ratio's
bootstrap interval is narrower than a target (relative to the ratio), or when the time budget
is spent, or after `blocks` blocks. With a band (the analysis's practical threshold, a share of
A's median) and a budget, a run whose first two variants' delta interval, once narrow enough,
still holds +-band x A's median does not stop early: it spends its budget, since its verdict is
not decided yet.

The stop check is kept cheap (the full bootstrap of a ratio costs milliseconds per hundred
samples, more than a GPU block once a variant has ~10^3 samples): it runs on a geometric
schedule of blocks (every block up to 1/check_growth blocks, then every check_growth x blocks
done), first as an O(n) order-statistic estimate of the ratio interval's width, scaled by what
the last full bootstrap measured against it; only when that estimate is within full_check_margin
of the target is the full-resolution bootstrap computed (at most once per full_check_growth x
blocks), and only the full one can stop the run. The reported interval is always the full
bootstrap, so the statistics are those of the every-block rule (stop_check='every-block', kept as
the reference); the stop block is at most about check_growth later. No wall-clock enters the
schedule: a run is reproducible from its samples and seed.

Statistics (NumPy only, seeded so a result can be recomputed from its samples):
- median, CV (sample stdev / mean);
- percentile bootstrap interval of the median;
- ratio of medians A/B with an interval from resampling A's and B's samples independently;
- the same two intervals by blocks (hierarchical_medians: blocks drawn with replacement, the same
  blocks for every variant, then samples within each): samples of one block share the machine's
  state of that moment (another process's burst, a frequency step), which lasts longer than a
  block on a shared CPU, so resampling samples alone understates the uncertainty. Each reported
  interval is the hull of both (ci_s / ci, with ci_samples and ci_blocks kept);
- the delta median(b) - median(a) with its paired interval (paired_delta), recorded beside each
  ratio (a headline still compares the two variants' own intervals: on a 2 us graph whose samples
  sit in two states, the paired interval called an A-against-A pair significant:
  benchmarks/README.md#a-against-a-found-in-the-protocol-2026-12-05-a-third-session);
- significant: |ratio - 1| > threshold and the interval excludes 1.
"""
from __future__ import annotations

import itertools
import json
import math
import time
from dataclasses import asdict, dataclass, field
from statistics import NormalDist
from typing import Any, Callable, Mapping

import numpy as np

from rootcause.errors import UsageError
from rootcause.stats import CHUNK_ELEMENTS, bootstrap_medians, holds_edge, median, median_ci, percentile_interval

# Resampling is done in chunks so a long run (10^4 samples) never allocates resamples x n at once.


# Blocks a run with a time budget may take: the budget (or convergence) ends it, not a block
# count, so a graph of a few hundred microseconds is measured for the seconds the user gave.
BUDGETED_BLOCKS = 100_000
WARMUP_MIN_CALLS = 3  # counted warm-up calls made even when warmup_seconds has passed


@dataclass
class Protocol:
    warmup_calls: int = 75  # a variant, at most: the count stops once warmup_seconds passed (measure's warm-up)
    warmup_seconds: float = 2.0  # then this long of calls of every variant in turn
    blocks: int = 40  # most blocks run (a budgeted run: BUDGETED_BLOCKS, so that its budget ends it)
    repeats: int = 5  # samples of each variant per block
    min_blocks: int = 5  # blocks before early stopping is considered
    target_rel_width: float | None = 0.02  # stop once (hi - lo) / ratio < this for every ratio
    budget_seconds: float | None = None  # stop once the timed blocks have run this long
    threshold: float = 0.10  # a ratio differing from 1 by more than this may be significant
    confidence: float = 0.95
    resamples: int = 2000
    seed: int = 0
    offset: int = 0  # first permutation (bench_measure_efficiency uses trial * blocks)
    stop_check: str = "scheduled"  # 'scheduled' (cheap estimate first) | 'every-block' (full bootstrap each block)
    check_growth: float = 1 / 32  # scheduled: next check after max(1, this x blocks done) more blocks
    full_check_margin: float = 0.1  # full bootstrap once the estimate is below target x (1 + this)
    full_check_growth: float = 0.1  # after a full check said no: the next one after this x blocks done
    # The practical threshold, as a share of the first variant's median (the analysis's whole-graph
    # threshold). Where, once narrow enough, the first two variants' delta interval (B - A) holds
    # +-band x A's median, the verdict is undecided: the run goes on to its budget instead of
    # stopping. Decided once, at the first narrow-enough check, so the run never stops because an
    # edge was cleared at some later look (no optional stopping on the verdict).
    band: float | None = None


@dataclass
class VariantStats:
    name: str
    samples_s: list[float]
    median_s: float
    mean_s: float
    cv: float | None
    ci_s: tuple[float, float]  # the hull of the two below (the one set where there are no blocks)
    ci_samples_s: tuple[float, float] | None = None  # samples resampled independently
    ci_blocks_s: tuple[float, float] | None = None  # blocks resampled, then samples within each


@dataclass
class Ratio:
    a: str
    b: str
    ratio: float  # median(a) / median(b)
    ci: tuple[float, float]
    significant: bool
    threshold: float
    ci_samples: tuple[float, float] | None = None
    ci_blocks: tuple[float, float] | None = None
    delta_s: float | None = None  # median(b) - median(a)
    delta_ci_s: tuple[float, float] | None = None  # paired_delta's interval


@dataclass
class Measurement:
    protocol: dict[str, Any]
    variants: dict[str, VariantStats]
    ratios: list[Ratio]
    blocks_run: int
    stopped: str  # 'converged' | 'budget' | 'max_blocks'
    orders: list[list[str]] = field(default_factory=list)
    elapsed_s: float = 0.0
    checks: dict[str, Any] = field(default_factory=dict)  # the stop rule's counts and seconds

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Measurement":
        variants = {k: VariantStats(**{**v, "ci_s": tuple(v["ci_s"])}) for k, v in d["variants"].items()}
        ratios = [Ratio(**{**r, "ci": tuple(r["ci"])}) for r in d["ratios"]]
        return cls(d["protocol"], variants, ratios, d["blocks_run"], d["stopped"],
                   d.get("orders", []), d.get("elapsed_s", 0.0), d.get("checks", {}))


# ---- statistics ---------------------------------------------------------------------------

def cv(x) -> float | None:
    """Coefficient of variation: sample standard deviation (ddof=1) over the mean."""
    x = np.asarray(x, dtype=float)
    if x.size < 2 or x.mean() == 0:
        return None
    return float(x.std(ddof=1) / x.mean())


def _float_pair(x) -> tuple[float, float]:
    return float(x[0]), float(x[1])


def ratio_ci(a, b, confidence: float = 0.95, resamples: int = 2000,
             seed: int = 0) -> tuple[float, tuple[float, float]]:
    """median(a) / median(b) and its bootstrap interval; a and b resampled independently
    from one generator (a's resamples first)."""
    rng = np.random.default_rng(seed)
    ma = bootstrap_medians(a, resamples, rng)
    mb = bootstrap_medians(b, resamples, rng)
    return median(a) / median(b), _float_pair(percentile_interval(ma / mb, confidence))


def order_stat_rel_width(x, confidence: float = 0.95) -> float:
    """Width of the distribution-free order-statistic interval of the median over the median:
    ranks n/2 -+ z sqrt(n)/2 (normal approximation of Binomial(n, 1/2)). O(n), one partition."""
    x = np.asarray(x, dtype=float)
    n = x.size
    if n == 0:
        raise UsageError("interval of an empty sample")
    half = NormalDist().inv_cdf(0.5 + confidence / 2) * math.sqrt(n) / 2
    lo, hi = max(0, math.floor(n / 2 - half)), min(n - 1, math.ceil(n / 2 + half))
    k = [lo, (n - 1) // 2, n // 2, hi]
    part = np.partition(x, k)
    med = (part[k[1]] + part[k[2]]) / 2
    return float((part[hi] - part[lo]) / med) if med else math.inf


def ratio_rel_width_estimate(a, b, confidence: float = 0.95) -> float:
    """Cheap estimate of the ratio interval's relative width: the two medians' relative widths
    added in quadrature (log ratio = log a - log b, independent samples)."""
    return math.hypot(order_stat_rel_width(a, confidence), order_stat_rel_width(b, confidence))


def significant(ratio: float, ci: tuple[float, float], threshold: float) -> bool:
    return abs(ratio - 1) > threshold and not (ci[0] <= 1 <= ci[1])


def summarize(samples: dict[str, list[float]], protocol: Protocol,
              pairs: list[tuple[str, str]] | None = None,
              known: dict[tuple[str, str], tuple[float, tuple[float, float]]] | None = None,
              blocks: np.ndarray | None = None,
              ) -> tuple[dict[str, VariantStats], list[Ratio]]:
    """Per-variant statistics and the ratios of `pairs` (default: every a before b). `known`:
    ratio_ci results already computed on these very samples (the stop rule's last full check);
    `blocks`: their _block_medians, likewise (the stop rule's band check).
    samples[name] holds the protocol's blocks in order, `protocol.repeats` samples each; each
    interval is the hull of the independent one and the one by blocks (module doc)."""
    if blocks is None:
        blocks = _block_medians(samples, protocol)
    variants = {}
    for i, (name, xs) in enumerate(samples.items()):
        plain = median_ci(xs, protocol.confidence, protocol.resamples, protocol.seed + i)
        by_blocks = None if blocks is None else _float_pair(percentile_interval(blocks[:, i], protocol.confidence))
        variants[name] = VariantStats(name, list(map(float, xs)), median(xs), float(np.mean(xs)), cv(xs),
                                      _hull(plain, by_blocks or plain), plain, by_blocks)
    names = list(samples)
    ratios = []
    for a, b in _pairs(samples, pairs):
        r, plain = (known or {}).get((a, b)) or ratio_ci(samples[a], samples[b], protocol.confidence,
                                                         protocol.resamples, protocol.seed)
        by_blocks = None if blocks is None else _float_pair(percentile_interval(
            blocks[:, names.index(a)] / blocks[:, names.index(b)], protocol.confidence))
        ci = _hull(plain, by_blocks or plain)
        delta, delta_ci = paired_delta(samples[a], samples[b], protocol,
                                       None if blocks is None else blocks[:, [names.index(a), names.index(b)]])
        ratios.append(Ratio(a, b, r, ci, significant(r, ci, protocol.threshold), protocol.threshold,
                            plain, by_blocks, delta, delta_ci))
    return variants, ratios


def paired_delta(a: list[float], b: list[float], protocol: Protocol,
                 blocks: np.ndarray | None = None) -> tuple[float, tuple[float, float]]:
    """median(b) - median(a) and its interval: the hull of the independent bootstrap's and the one by
    blocks (the same blocks drawn for both: a state both variants met in a block cancels). The
    interval that compares two variants measured side by side; each one's own interval alone
    cannot pair them (their difference of ends is as wide as both together). `blocks`: the two
    columns (a, b) of _block_medians already drawn for these samples (summarize has them)."""
    rng = np.random.default_rng(protocol.seed)
    plain = percentile_interval(bootstrap_medians(b, protocol.resamples, rng)
                                - bootstrap_medians(a, protocol.resamples, rng), protocol.confidence)
    if blocks is None:
        blocks = _block_medians({"a": a, "b": b}, protocol)
    joint = plain if blocks is None else percentile_interval(blocks[:, 1] - blocks[:, 0], protocol.confidence)
    return median(b) - median(a), _hull(_float_pair(plain), _float_pair(joint))


def _block_medians(samples: dict[str, list[float]], protocol: Protocol) -> np.ndarray | None:
    """Bootstrap medians (resamples, variants): hierarchical_medians with the protocol's blocks as
    the groups, vectorised for blocks of one size; None where the samples are not whole blocks of
    `repeats` or there are fewer than two blocks."""
    r = protocol.repeats
    sizes = {len(xs) for xs in samples.values()}
    if r < 1 or len(sizes) != 1 or (n := sizes.pop()) % r or n // r < 2:
        return None
    blocks = [np.asarray(xs, dtype=float).reshape(n // r, r) for xs in samples.values()]
    rng = np.random.default_rng(protocol.seed)
    out = np.empty((protocol.resamples, len(blocks)))
    rows = max(1, CHUNK_ELEMENTS // n)
    for lo in range(0, protocol.resamples, rows):
        hi = min(protocol.resamples, lo + rows)
        chosen = rng.integers(0, n // r, size=(hi - lo, n // r, 1))  # the same blocks for every variant
        for v, x in enumerate(blocks):
            within = rng.integers(0, r, size=(hi - lo, n // r, r))
            out[lo:hi, v] = np.median(x[chosen, within].reshape(hi - lo, n), axis=1)
    return out


def _pairs(samples: dict[str, list[float]], pairs: list[tuple[str, str]] | None) -> list[tuple[str, str]]:
    return list(pairs) if pairs is not None else list(itertools.combinations(samples, 2))


# ---- protocol -----------------------------------------------------------------------------

def measure(callables: Mapping[str, Callable[[], float | None]], protocol: Protocol | None = None,
            clock: Callable[[], float] = time.perf_counter,
            pairs: list[tuple[str, str]] | None = None,
            on_block: Callable[[float], Any] | None = None) -> Measurement:
    """Run the interleaved protocol. Each callable runs the graph once (or a fixed batch) and
    returns its own seconds, or None to be timed with `clock` around the call."""
    protocol = protocol or Protocol()
    names = list(callables)
    if not names:
        raise UsageError("measure: no variants given")
    perms = list(itertools.permutations(names))

    def sample(name: str) -> float:
        t0 = clock()
        got = callables[name]()
        if got is None:
            return float(clock() - t0)
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            raise UsageError(f"measure: variant {name!r} returned {type(got).__name__}, expected seconds or None")
        return float(got)

    first = perms[protocol.offset % len(perms)]
    for name in first:
        # each variant's own warm-up: warmup_calls calls (its first-call work, allocations, caches);
        # a slow call (seconds on a CPU) stops the count once warmup_seconds have passed and
        # WARMUP_MIN_CALLS were made, or 75 calls of a 20 s graph would warm one variant for 25 minutes
        start = clock()
        for i in range(protocol.warmup_calls):
            callables[name]()
            if i + 1 >= WARMUP_MIN_CALLS and clock() - start >= protocol.warmup_seconds:
                break
    # then the device's: warmup_seconds of calls of every variant in turn, as the blocks will make
    # them (clocks settled under this load, no variant idle since its own warm-up)
    deadline = clock() + protocol.warmup_seconds
    while clock() < deadline:
        for name in first:
            callables[name]()
    samples: dict[str, list[float]] = {n: [] for n in names}
    orders: list[list[str]] = []
    rule = StopRule(protocol, _pairs(samples, pairs))
    start = clock()
    stopped = "max_blocks"
    for block in range(protocol.blocks):
        order = list(perms[(protocol.offset + block) % len(perms)])
        orders.append(order)
        for name in order:
            samples[name].extend(sample(name) for _ in range(protocol.repeats))
        if on_block is not None:  # between blocks: nothing of it is inside a timed sample
            on_block(clock() - start)
        if protocol.budget_seconds is not None and clock() - start >= protocol.budget_seconds:
            stopped = "budget"
            break
        if rule.converged(block + 1, samples):
            stopped = "converged"
            break
    elapsed = clock() - start
    known, blocks = (rule.last_full, rule.last_blocks) if stopped == "converged" else (None, None)
    variants, ratios = summarize(samples, protocol, pairs, known, blocks)
    return Measurement(asdict(protocol), variants, ratios, len(orders), stopped, orders, float(elapsed),
                       rule.record())


class StopRule:
    """The early-stop decision after each block (see the module docstring), with its cost
    recorded: checks made, full bootstraps computed, and the seconds each kind took."""

    def __init__(self, protocol: Protocol, pairs: list[tuple[str, str]]):
        if protocol.stop_check not in ("scheduled", "every-block"):
            raise UsageError(f"measure: stop_check {protocol.stop_check!r} is not 'scheduled' or 'every-block'")
        self.p, self.pairs = protocol, pairs
        self.next_check = protocol.min_blocks
        self.next_full = protocol.min_blocks
        self.scale = {pair: 1.0 for pair in pairs}  # full width / estimate at the last full check
        self.last_full: dict[tuple[str, str], tuple[float, tuple[float, float]]] | None = None
        self.checks, self.check_s, self.full_s = 0, 0.0, 0.0
        self.full_at: list[int] = []
        self.undecided_at: int | None = None  # blocks at which the first pair held the band's edge
        self.last_blocks: np.ndarray | None = None  # _block_medians of the band check's samples

    def converged(self, blocks: int, samples: dict[str, list[float]]) -> bool:
        """Narrow enough to stop, and, with a band, the first pair's verdict decided."""
        if self.undecided_at is not None:
            return False
        if not self._narrow(blocks, samples):
            return False
        if self._holds_band_edge(samples):
            self.undecided_at = blocks
            return False
        return True

    def _holds_band_edge(self, samples: dict[str, list[float]]) -> bool:
        """The first pair's delta interval (paired_delta, the one the analysis judges) holds
        +-band x A's median (verdict.require_clear_of_floor's rule)."""
        p = self.p
        if p.band is None or p.band <= 0 or p.budget_seconds is None:
            return False
        a, b = self.pairs[0]
        names = list(samples)
        blocks = self.last_blocks = _block_medians(samples, p)  # drawn as summarize draws them
        _, (low, high) = paired_delta(samples[a], samples[b], p,
                                      None if blocks is None else blocks[:, [names.index(a), names.index(b)]])
        return holds_edge(low, high, p.band * median(samples[a]))

    def _narrow(self, blocks: int, samples: dict[str, list[float]]) -> bool:
        p = self.p
        if p.target_rel_width is None or not self.pairs or blocks < self.next_check:
            return False
        self.checks += 1
        if p.stop_check == "every-block":
            return self._full(blocks, samples, {})
        self.next_check = blocks + max(1, math.floor(blocks * p.check_growth))
        t0 = time.perf_counter()
        estimate = {pair: ratio_rel_width_estimate(samples[pair[0]], samples[pair[1]], p.confidence)
                    for pair in self.pairs}
        self.check_s += time.perf_counter() - t0
        limit = p.target_rel_width * (1 + p.full_check_margin)
        if blocks < self.next_full or any(self.scale[k] * w >= limit for k, w in estimate.items()):
            return False
        if self._full(blocks, samples, estimate):
            return True
        self.next_full = blocks + max(1, math.ceil(blocks * p.full_check_growth))
        return False

    def _full(self, blocks: int, samples: dict[str, list[float]], estimate: dict[tuple[str, str], float]) -> bool:
        """Full-resolution bootstrap of every ratio (the interval that is reported); stops at the
        first ratio still too wide. Recalibrates the estimate's scale of each ratio computed."""
        p = self.p
        t0 = time.perf_counter()
        self.full_at.append(blocks)
        done = {}
        try:
            for a, b in self.pairs:
                r, ci = done[(a, b)] = ratio_ci(samples[a], samples[b], p.confidence, p.resamples, p.seed)
                width = (ci[1] - ci[0]) / r
                if estimate.get((a, b), 0.0) > 0:
                    self.scale[(a, b)] = width / estimate[(a, b)]
                if p.target_rel_width is None or not width < p.target_rel_width:
                    return False
        finally:
            self.full_s += time.perf_counter() - t0
        self.last_full = done
        return True

    def record(self) -> dict[str, Any]:
        return {"rule": self.p.stop_check, "checks": self.checks, "full": len(self.full_at),
                "full_at_blocks": self.full_at, "check_s": self.check_s, "full_s": self.full_s,
                "undecided_at_blocks": self.undecided_at}


def measure_interleaved(timers: dict[str, Callable[[int], Callable[[], float]]], budget_s: float,
                        protocol: Protocol | None = None, target_sample_s: float = 2e-3) -> dict[str, Any]:
    """The runners' entry point: `timers[name](number)` returns a sampler of seconds per call
    over `number` calls (rootcause.runners Session.timer). Every variant's sample makes the same
    number of calls: the fewest any variant needs to last about target_sample_s (calibrated per
    variant, kept as calls_calibrated), raised so the fastest lasts MIN_SAMPLE_S. Under load a
    call's time depends on how long the run of calls around it is (the machine's other processes
    take their share in the pauses between samples, or inside a long one), so unequal runs of calls
    can differ by 2x on a loaded CPU for the same module. The result is Measurement.to_dict() plus
    calls_per_sample.
    A progress bar shows the budget's seconds on a terminal (updated between blocks, never inside
    one)."""
    from rootcause.terminal import progress_bar

    protocol = protocol or Protocol(budget_seconds=budget_s)
    calibrated = {name: _calibrate(timer_for, target_sample_s) for name, timer_for in timers.items()}
    number = _common_number(calibrated)
    samplers = {name: timer_for(number) for name, timer_for in timers.items()}
    bar = progress_bar(budget_s, f"timing {', '.join(timers)}")
    try:
        result = measure(samplers, protocol,
                         on_block=lambda elapsed: bar.update(min(elapsed, budget_s) - bar.n)).to_dict()
    finally:
        bar.close()
    for name, (calls, _) in calibrated.items():
        result["variants"][name].update(calls_per_sample=number, calls_calibrated=calls)
    result["budget_s"] = budget_s
    return result


MIN_SAMPLE_S = 1e-4  # the fastest variant's sample at least: perf_counter's own cost stays < 0.1%
MAX_CALLS = 1 << 16


def _common_number(calibrated: dict[str, tuple[int, float]]) -> int:
    """Calls per sample for every variant: the fewest calibrated, raised until the fastest
    variant's sample lasts MIN_SAMPLE_S. calibrated[name] = (calls, seconds per call)."""
    number = min(calls for calls, _ in calibrated.values())
    fastest = min(t for _, t in calibrated.values())
    return min(MAX_CALLS, max(number, math.ceil(MIN_SAMPLE_S / max(fastest, 1e-12))))


def _calibrate(timer_for: Callable[[int], Callable[[], float]], target_s: float,
               tries: int = 3) -> tuple[int, float]:
    """(calls for a sample of about target_s, seconds per call at that count). The fastest of a
    few samples: one preempted sample must not fix `number` at 1."""
    number = 1
    while True:
        sampler = timer_for(number)
        t = min(sampler() for _ in range(tries))
        if t * number >= target_s or number >= MAX_CALLS:
            return number, t
        number = min(MAX_CALLS, max(number * 2, int(target_s / max(t, 1e-9)) + 1))

# ---- several processes ----------------------------------------------------------------------
# A host-launch-bound graph can run at a different speed in each process (docs/GPU_HOST.md: pool_fusion
# OFF 83-118 us median across processes, 1 us within one), so one process's interval understates
# the uncertainty. Samples of N processes are pooled; intervals come from a hierarchical
# bootstrap that resamples processes first, then samples within each chosen process.

def _hier_index(sizes: np.ndarray, chosen: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Indices into the concatenated samples: for each chosen process, sizes[p] draws from it."""
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    n = sizes[chosen]
    base = np.repeat(offsets[chosen], n)
    width = np.repeat(sizes[chosen], n)
    return base + (rng.random(int(n.sum())) * width).astype(np.int64)


def hierarchical_medians(groups: list[list[list[float]]], resamples: int,
                         rng: np.random.Generator) -> np.ndarray:
    """Bootstrap medians, shape (resamples, variants). groups[v][p]: samples of variant v in
    process p. Each resample draws P processes with replacement (the same processes for every
    variant: they were measured side by side), then each variant's samples within each."""
    if not groups or not groups[0]:
        raise UsageError("hierarchical bootstrap: no processes")
    procs = len(groups[0])
    if any(len(g) != procs for g in groups) or any(len(s) == 0 for g in groups for s in g):
        raise UsageError("hierarchical bootstrap: every variant needs samples from every process")
    flat = [np.concatenate([np.asarray(s, dtype=float) for s in g]) for g in groups]
    sizes = [np.array([len(s) for s in g]) for g in groups]
    out = np.empty((resamples, len(groups)))
    for r in range(resamples):
        chosen = rng.integers(0, procs, size=procs)
        for v in range(len(groups)):
            out[r, v] = np.median(flat[v][_hier_index(sizes[v], chosen, rng)])
    return out


def spread_warnings(per_process: dict[str, list[dict[str, Any]]], unit: float = 1e-6,
                    unit_name: str = "us") -> list[str]:
    """One line per variant whose per-process medians spread (max - min) more than the widest
    within-process interval of the median: the variance between processes then dominates and
    one process's figure would mislead. per_process[name] = [{"median_s", "ci_s"}, ...]."""
    lines = []
    for name, procs in per_process.items():
        if len(procs) < 2:
            continue
        medians = [p["median_s"] for p in procs]
        width = max(p["ci_s"][1] - p["ci_s"][0] for p in procs)
        spread = max(medians) - min(medians)
        if spread > width:
            lines.append(f"{name}: per-process medians range {min(medians) / unit:.2f}-{max(medians) / unit:.2f} "
                         f"{unit_name} ({spread / median(medians):.1%}) over {len(procs)} processes, "
                         f"wider than the within-process interval "
                         f"(at most {width / unit:.2f} {unit_name}): the between-process variance dominates; "
                         f"use the pooled interval")
    return lines


def _hull(x: tuple[float, float], y: tuple[float, float]) -> tuple[float, float]:
    return min(x[0], y[0]), max(x[1], y[1])


def _process_stats(v: dict[str, Any], protocol: Protocol, index: int) -> dict[str, Any]:
    """One process's figures of one variant (its own median and interval, recomputed if absent)."""
    xs = v["samples_s"]
    ci = v.get("ci_s") or median_ci(xs, protocol.confidence, protocol.resamples, protocol.seed + index)
    return {"median_s": v.get("median_s", median(xs)), "ci_s": list(ci), "cv": v.get("cv", cv(xs)),
            "calls_per_sample": v.get("calls_per_sample"), "samples": len(xs), "samples_s": list(xs)}


def pool_processes(results: list[dict[str, Any]], protocol: Protocol | None = None) -> dict[str, Any]:
    """Pool measure_interleaved results of several processes (same variants) into one record of
    the same shape (variants: pooled samples_s and median_s; ratios: median over median), plus
    "processes" (each one's medians, intervals, samples) and "warnings" (spread_warnings).

    Intervals: the hierarchical bootstrap resamples processes jointly for all variants (they ran
    side by side), so a slowdown common to both variants in one process cancels in a ratio while
    a variant-specific one widens it. It can then be narrower than a plain bootstrap of the pooled
    samples (whose median straddles the processes' modes); the reported ci / ci_s is the hull of
    both (each kept as ci_hierarchical / ci_plain), so pooling never claims more than either."""
    if not results:
        raise UsageError("pool: no process results")
    protocol = protocol or Protocol(**{k: v for k, v in (results[0].get("protocol") or {}).items()
                                       if k in Protocol.__dataclass_fields__})
    names = list(results[0]["variants"])
    for i, res in enumerate(results):
        if list(res["variants"]) != names:
            raise UsageError(f"pool: process {i} measured {list(res['variants'])}, process 0 {names}")
    groups = {n: [res["variants"][n]["samples_s"] for res in results] for n in names}
    rng = np.random.default_rng(protocol.seed)
    boot = hierarchical_medians([groups[n] for n in names], protocol.resamples, rng)
    variants, pooled = {}, {}
    for v, name in enumerate(names):
        xs = pooled[name] = [x for g in groups[name] for x in g]
        hier = _float_pair(percentile_interval(boot[:, v], protocol.confidence))
        plain = median_ci(xs, protocol.confidence, protocol.resamples, protocol.seed + v)
        variants[name] = {**asdict(VariantStats(name, xs, median(xs), float(np.mean(xs)), cv(xs), _hull(hier, plain))),
                          "ci_hierarchical_s": hier, "ci_plain_s": plain,
                          "calls_per_sample": [res["variants"][name].get("calls_per_sample") for res in results]}
    ratios = []
    for a, b in itertools.combinations(names, 2):
        ia, ib = names.index(a), names.index(b)
        hier = _float_pair(percentile_interval(boot[:, ia] / boot[:, ib], protocol.confidence))
        r, plain = ratio_ci(pooled[a], pooled[b], protocol.confidence, protocol.resamples, protocol.seed)
        ci = _hull(hier, plain)
        ratios.append({**asdict(Ratio(a, b, r, ci, significant(r, ci, protocol.threshold), protocol.threshold)),
                       "ci_hierarchical": hier, "ci_plain": plain})
    processes: list[dict[str, Any]] = [
        {"index": i, "blocks_run": res.get("blocks_run"), "stopped": res.get("stopped"),
         "elapsed_s": res.get("elapsed_s"), "ratios": res.get("ratios"),
         "variants": {n: _process_stats(res["variants"][n], protocol, i) for n in names}}
        for i, res in enumerate(results)]
    per_process = {n: [p["variants"][n] for p in processes] for n in names}
    return {"protocol": asdict(protocol), "variants": variants, "ratios": ratios,
            "blocks_run": sum(res.get("blocks_run") or 0 for res in results),
            "stopped": ",".join(str(res.get("stopped")) for res in results),
            "elapsed_s": float(sum(res.get("elapsed_s", 0.0) for res in results)),
            "pooled": {"processes": len(results), "median": "over all samples of all processes",
                       "interval": "hierarchical bootstrap: processes resampled, then samples within each",
                       "resamples": protocol.resamples, "seed": protocol.seed},
            "processes": processes, "warnings": spread_warnings(per_process)}
