"""Bootstrap statistics, once: resampled medians and percentile intervals.

Every interval rootcause reports (whole-graph latency, ratio, unit deltas, hybrid shares) is
a percentile bootstrap of medians at LEVEL, computed by these functions.
"""
from __future__ import annotations

import numpy as np

LEVEL = 0.95
RESAMPLES = 2000

# A delta is significant when its interval excludes 0 and it is at least this share of the
# baseline whole-graph time (so drift of a few ns on a 100 us graph is not called a change).
MIN_EFFECT_SHARE = 0.01
# On a CPU the whole graph's share is larger (units keep 1%, checked by require_repeat): on a
# loaded CPU two builds of one spec measure up to about 5% apart, interleaved (other processes, and
# where each session's buffers land, move a whole call), which no interval over its calls shows.
# benchmarks/README.md#a-against-a-on-the-cpu-2026-12-04
CPU_MIN_EFFECT_SHARE = 0.05
# The recovered share (of a unit's delta, or of the A-B delta) a hybrid's interval must exceed to
# confirm it (analysis.confirm; here so that `analyze --help` needs no analysis import).
CONFIRM_THRESHOLD = 0.5
CHUNK_ELEMENTS = 1 << 22  # index rows drawn at a time: bounds memory for large samples


def whole_graph_share(on_cpu: bool) -> float:
    """The share of A's call the whole-graph delta must clear: the CPU's larger one where the
    variants run, or were profiled, on a CPU."""
    return CPU_MIN_EFFECT_SHARE if on_cpu else MIN_EFFECT_SHARE


def holds_edge(low: float, high: float, edge: float) -> bool:
    """Whether the interval [low, high] holds an edge of the band +-edge: it lies neither entirely
    beyond the band nor entirely inside it, so whether the difference reaches `edge` is undecided."""
    return low < edge <= high or low <= -edge < high


def median(x) -> float:
    return float(np.median(np.asarray(x, dtype=float)))


def quantile(x, q: float) -> float:
    """The q-quantile of x (NumPy's default, linear interpolation)."""
    return float(np.quantile(np.asarray(x, dtype=float), q))


def bootstrap_medians(x, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Medians of `resamples` resamples of x with replacement (indices drawn row by row)."""
    from rootcause.errors import UsageError

    x = np.asarray(x, dtype=float)
    if x.size == 0:
        raise UsageError("bootstrap of an empty sample")
    rows = max(1, CHUNK_ELEMENTS // x.size)
    out = np.empty(resamples)
    for lo in range(0, resamples, rows):
        hi = min(resamples, lo + rows)
        idx = rng.integers(0, x.size, size=(hi - lo, x.size))
        out[lo:hi] = np.median(x[idx], axis=1)
    return out


def rank_draws(n: int, resamples: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Ranks (into sorted samples) of the two middle order statistics of each resample of n
    values: one draw serves many columns resampled together (medians_at_ranks). One value has a
    single resample, itself: its 2,000 copies would say the same at 2,000 times the cost (a
    one-step trace of 700 units)."""
    if n == 1:
        resamples = 1
    draws = np.sort(rng.integers(0, n, size=(resamples, n)), axis=1)
    return draws[:, (n - 1) // 2], draws[:, n // 2]


def medians_at_ranks(values: np.ndarray, ranks: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """values (n, k) -> bootstrap medians (resamples, k), rows resampled by rank_draws."""
    s = np.sort(values, axis=0)
    out = s[ranks[0]]  # in place from here: (resamples, k) is 12 MB at 700 units
    out += s[ranks[1]]
    out /= 2.0
    return out


def percentile_interval(boot: np.ndarray, level: float = LEVEL, axis: int = 0, in_place: bool = False) -> tuple:
    """(low, high) percentile interval of bootstrap values (linear interpolation, NumPy's
    default); along `axis` for arrays of several columns. in_place: boot may be partitioned
    in place (no copy of it; its values no longer keep their rows)."""
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(boot, [tail, 100 - tail], axis=axis, overwrite_input=in_place)
    return lo, hi


def median_ci(x, confidence: float = LEVEL, resamples: int = RESAMPLES, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the median."""
    lo, hi = percentile_interval(bootstrap_medians(x, resamples, np.random.default_rng(seed)), confidence)
    return float(lo), float(hi)
