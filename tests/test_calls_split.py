"""The automatic call split (rootcause.profilers.calls) against a direct rendition of the rule in
its docstring: at each position, the period whose back-to-back repeats cover the most launches
(ties: the smallest period), a stretch that repeats nothing becoming one call. The reference
below tries every period at every position (quadratic and more); the module finds the same
segments by its direct search, from runs (Lyndon roots and common extensions), and switching
from one to the other part way."""
from __future__ import annotations

import numpy as np
import pytest

from rootcause.profilers import calls


def greedy_reference(codes: list[int], max_period: int) -> list[tuple[int, int, int]]:
    n, i, out, pending = len(codes), 0, [], None
    while i < n:
        best = (1, 1, 1)  # coverage, period, repeats
        for p in range(1, min(max_period, (n - i) // 2) + 1):
            run = 0
            while i + p + run < n and codes[i + run] == codes[i + p + run]:
                run += 1
            repeats = 1 + run // p
            if repeats >= 2 and p * repeats > best[0]:
                best = (p * repeats, p, repeats)
        _, period, repeats = best
        if repeats < 2:
            pending = i if pending is None else pending
            i += 1
            continue
        if pending is not None:
            out.append((pending, i - pending, 1))
            pending = None
        out.append((i, period, repeats))
        i += period * repeats
    if pending is not None:
        out.append((pending, n - pending, 1))
    return out


def brute_runs(codes: list[int]) -> set[tuple[int, int, int]]:
    """Every maximal stretch of period p and length >= 2p whose smallest period is p."""
    n, found = len(codes), set()
    for p in range(1, n // 2 + 1):
        t = 0
        while t + p < n:
            if codes[t] != codes[t + p]:
                t += 1
                continue
            s = t
            while t + p < n and codes[t] == codes[t + p]:
                t += 1
            if t - s >= p:  # codes[s:t + p] has period p and length >= 2p
                found.add((s, t + p, p))
    # keep p only where no smaller period covers the same stretch
    return {(s, e, p) for s, e, p in found if not any(s2 == s and e2 == e and p2 < p for s2, e2, p2 in found)}


def _sequences():
    rng = np.random.default_rng(7)
    for n in (0, 1, 2, 3, 5, 8, 13, 40, 97):
        for alphabet in (1, 2, 3, 5):
            yield rng.integers(0, alphabet, n).tolist()
    # Fibonacci and Thue-Morse words: many runs, many squares at one position
    a, b = [0], [0, 1]
    while len(b) < 150:
        a, b = b, b + a
    yield b[:150]
    yield [bin(i).count("1") % 2 for i in range(128)]
    # repeated calls with noise: the shape real traces have
    call = [0, 1, 2, 2, 2, 3, 4]
    yield call * 6 + [9] + call * 3 + [5, 5, 5, 5, 6] + [1, 2] * 7
    yield [v for i in range(60) for v in (0, 100 + i)]  # one common kernel between unique ones


@pytest.mark.parametrize("codes", list(_sequences()))
def test_runs_are_the_maximal_repetitions(codes):
    got = {tuple(r) for r in calls._runs(np.asarray(codes, dtype=np.int64), 4096).tolist()}
    assert got == brute_runs(codes)


@pytest.fixture(params=["as-set", "direct-only", "runs-only"])
def search(request, monkeypatch):
    """The finder's own switch, or one of its two searches throughout."""
    budget = {"as-set": calls._PeriodFinder.DIRECT_PER_LAUNCH, "direct-only": float("inf"), "runs-only": 0.0}
    monkeypatch.setattr(calls._PeriodFinder, "DIRECT_PER_LAUNCH", budget[request.param])


@pytest.mark.parametrize("codes", list(_sequences()))
@pytest.mark.parametrize("max_period", [3, 4096])
def test_segments_follow_the_greedy_rule(codes, max_period, search):
    assert calls._auto_segments(np.asarray(codes, dtype=np.int64), max_period) == greedy_reference(codes, max_period)


def test_random_repeated_calls_with_noise(search):
    rng = np.random.default_rng(11)
    for _ in range(300):
        call = rng.integers(0, 4, rng.integers(1, 9)).tolist()
        codes = call * int(rng.integers(1, 6)) + rng.integers(0, 4, rng.integers(0, 12)).tolist()
        codes += call * int(rng.integers(0, 4))
        assert calls._auto_segments(np.asarray(codes, dtype=np.int64), 4096) == greedy_reference(codes, 4096), codes
