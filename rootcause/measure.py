"""Whole-graph latency: the interleaved measurement protocol and its statistics.

The protocol is the one of seeds/000: per variant, warm-up calls then a timed warm-up of a few
seconds; then blocks, each running every variant `repeats` times, with the variant order taken
from a rotating list of permutations (block b uses permutations[(offset + b) % k]) so that no
variant always runs first or right after another one. It stops early once every ratio's
bootstrap interval is narrower than a target (relative to the ratio), or when the time budget
is spent, or after `blocks` blocks.

Statistics (NumPy only, seeded so a result can be recomputed from its samples):
- median, CV (sample stdev / mean);
- percentile bootstrap interval of the median;
- ratio of medians A/B with an interval from resampling A's and B's samples independently
  (the two variants' samples are not paired: block effects are handled by interleaving);
- significant: |ratio - 1| > threshold and the interval excludes 1.
"""
from __future__ import annotations

import itertools
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np

from rootcause.errors import UsageError

# Resampling is done in chunks so a long run (10^4 samples) never allocates resamples x n at once.
_CHUNK_ELEMENTS = 1 << 22


@dataclass
class Protocol:
    warmup_calls: int = 75
    warmup_seconds: float = 2.0
    blocks: int = 40  # most blocks run
    repeats: int = 5  # samples of each variant per block
    min_blocks: int = 5  # blocks before early stopping is considered
    target_rel_width: float | None = 0.02  # stop once (hi - lo) / ratio < this for every ratio
    budget_seconds: float | None = None  # stop once the timed blocks have run this long
    threshold: float = 0.10  # a ratio differing from 1 by more than this may be significant
    confidence: float = 0.95
    resamples: int = 2000
    seed: int = 0
    offset: int = 0  # first permutation (seed 000 uses trial * blocks)


@dataclass
class VariantStats:
    name: str
    samples_s: list[float]
    median_s: float
    mean_s: float
    cv: float | None
    ci_s: tuple[float, float]


@dataclass
class Ratio:
    a: str
    b: str
    ratio: float  # median(a) / median(b)
    ci: tuple[float, float]
    significant: bool
    threshold: float


@dataclass
class Measurement:
    protocol: dict[str, Any]
    variants: dict[str, VariantStats]
    ratios: list[Ratio]
    blocks_run: int
    stopped: str  # 'converged' | 'budget' | 'max_blocks'
    orders: list[list[str]] = field(default_factory=list)
    elapsed_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Measurement":
        variants = {k: VariantStats(**{**v, "ci_s": tuple(v["ci_s"])}) for k, v in d["variants"].items()}
        ratios = [Ratio(**{**r, "ci": tuple(r["ci"])}) for r in d["ratios"]]
        return cls(d["protocol"], variants, ratios, d["blocks_run"], d["stopped"],
                   d.get("orders", []), d.get("elapsed_s", 0.0))


# ---- statistics ---------------------------------------------------------------------------

def median(x) -> float:
    return float(np.median(np.asarray(x, dtype=float)))


def cv(x) -> float | None:
    """Coefficient of variation: sample standard deviation (ddof=1) over the mean."""
    x = np.asarray(x, dtype=float)
    if x.size < 2 or x.mean() == 0:
        return None
    return float(x.std(ddof=1) / x.mean())


def bootstrap_medians(x, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Medians of `resamples` resamples of x with replacement (indices drawn row by row)."""
    x = np.asarray(x, dtype=float)
    if x.size == 0:
        raise UsageError("bootstrap of an empty sample")
    rows = max(1, _CHUNK_ELEMENTS // x.size)
    out = np.empty(resamples)
    for lo in range(0, resamples, rows):
        hi = min(resamples, lo + rows)
        idx = rng.integers(0, x.size, size=(hi - lo, x.size))
        out[lo:hi] = np.median(x[idx], axis=1)
    return out


def _interval(values: np.ndarray, confidence: float) -> tuple[float, float]:
    tail = 100 * (1 - confidence) / 2
    lo, hi = np.percentile(values, [tail, 100 - tail])
    return float(lo), float(hi)


def median_ci(x, confidence: float = 0.95, resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the median."""
    return _interval(bootstrap_medians(x, resamples, np.random.default_rng(seed)), confidence)


def ratio_ci(a, b, confidence: float = 0.95, resamples: int = 2000,
             seed: int = 0) -> tuple[float, tuple[float, float]]:
    """median(a) / median(b) and its bootstrap interval; a and b resampled independently
    from one generator (a's resamples first)."""
    rng = np.random.default_rng(seed)
    ma = bootstrap_medians(a, resamples, rng)
    mb = bootstrap_medians(b, resamples, rng)
    return median(a) / median(b), _interval(ma / mb, confidence)


def significant(ratio: float, ci: tuple[float, float], threshold: float) -> bool:
    return abs(ratio - 1) > threshold and not (ci[0] <= 1 <= ci[1])


def summarize(samples: dict[str, list[float]], protocol: Protocol,
              pairs: list[tuple[str, str]] | None = None) -> tuple[dict[str, VariantStats], list[Ratio]]:
    """Per-variant statistics and the ratios of `pairs` (default: every a before b)."""
    variants = {}
    for i, (name, xs) in enumerate(samples.items()):
        variants[name] = VariantStats(name, list(map(float, xs)), median(xs), float(np.mean(xs)), cv(xs),
                                      median_ci(xs, protocol.confidence, protocol.resamples, protocol.seed + i))
    ratios = []
    for a, b in pairs if pairs is not None else itertools.combinations(samples, 2):
        r, ci = ratio_ci(samples[a], samples[b], protocol.confidence, protocol.resamples, protocol.seed)
        ratios.append(Ratio(a, b, r, ci, significant(r, ci, protocol.threshold), protocol.threshold))
    return variants, ratios


# ---- protocol -----------------------------------------------------------------------------

def measure(callables: dict[str, Callable[[], float | None]], protocol: Protocol | None = None,
            clock: Callable[[], float] = time.perf_counter,
            pairs: list[tuple[str, str]] | None = None) -> Measurement:
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

    for name in perms[protocol.offset % len(perms)]:
        for _ in range(protocol.warmup_calls):
            callables[name]()
        deadline = clock() + protocol.warmup_seconds
        while clock() < deadline:
            callables[name]()
    samples: dict[str, list[float]] = {n: [] for n in names}
    orders: list[list[str]] = []
    start = clock()
    stopped = "max_blocks"
    for block in range(protocol.blocks):
        order = list(perms[(protocol.offset + block) % len(perms)])
        orders.append(order)
        for name in order:
            samples[name].extend(sample(name) for _ in range(protocol.repeats))
        if protocol.budget_seconds is not None and clock() - start >= protocol.budget_seconds:
            stopped = "budget"
            break
        if block + 1 >= protocol.min_blocks and _converged(samples, protocol, pairs):
            stopped = "converged"
            break
    elapsed = clock() - start
    variants, ratios = summarize(samples, protocol, pairs)
    return Measurement(asdict(protocol), variants, ratios, len(orders), stopped, orders, float(elapsed))


def _converged(samples: dict[str, list[float]], protocol: Protocol,
               pairs: list[tuple[str, str]] | None) -> bool:
    if protocol.target_rel_width is None or len(samples) < 2:
        return False
    for a, b in pairs if pairs is not None else itertools.combinations(samples, 2):
        r, (lo, hi) = ratio_ci(samples[a], samples[b], protocol.confidence, protocol.resamples, protocol.seed)
        if not (hi - lo) / r < protocol.target_rel_width:
            return False
    return True


def measure_interleaved(timers: dict[str, Callable[[int], Callable[[], float]]], budget_s: float,
                        protocol: Protocol | None = None, target_sample_s: float = 2e-3) -> dict[str, Any]:
    """The runners' entry point: `timers[name](number)` returns a sampler of seconds per call
    over `number` calls (rootcause.runners Session.timer). `number` is calibrated so a sample
    lasts about target_sample_s; the result is Measurement.to_dict() plus calls_per_sample."""
    protocol = protocol or Protocol(budget_seconds=budget_s)
    samplers, numbers = {}, {}
    for name, timer_for in timers.items():
        numbers[name], samplers[name] = _calibrate(timer_for, target_sample_s)
    result = measure(samplers, protocol).to_dict()
    for name, number in numbers.items():
        result["variants"][name]["calls_per_sample"] = number
    result["budget_s"] = budget_s
    return result


def _calibrate(timer_for: Callable[[int], Callable[[], float]], target_s: float,
               tries: int = 3) -> tuple[int, Callable[[], float]]:
    # The fastest of a few samples: one preempted sample must not fix `number` at 1.
    number = 1
    while True:
        sampler = timer_for(number)
        t = min(sampler() for _ in range(tries))
        if t * number >= target_s or number >= 1 << 16:
            return number, sampler
        number = min(1 << 16, max(number * 2, int(target_s / max(t, 1e-9)) + 1))
