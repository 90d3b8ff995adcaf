"""How a bisection judges a version whose ratio interval straddles its threshold: timed longer
(bisect.LONGER) until the interval leaves the threshold, else 'undecided', never judged by the
median of a straddling interval. The ratios are made here, so the right verdict is known from
their construction."""
from __future__ import annotations

from rootcause import bisect


def _judge(threshold: float = 0.05):
    up = 1 + threshold

    def judge(r):  # the slower direction, as Bisection.judge
        return "bad" if r["low"] > up else "good" if r["high"] < up else "unsure"
    return judge


def _ratio(median: float, half: float) -> dict:
    return {"median": median, "low": median - half, "high": median + half}


def test_a_clear_interval_is_judged_at_once():
    asked = []
    verdict, ratio, note = bisect.settle(_ratio(1.5, 0.1), _judge(), lambda f: asked.append(f), "v", 4.0)
    assert (verdict, note, asked) == ("bad", "", [])


def test_a_straddling_interval_is_timed_longer_until_it_decides():
    runs = {2: _ratio(1.10, 0.08), 4: _ratio(1.02, 0.02)}  # narrows below 1.05 on the longest run
    asked = []

    def measure(factor):
        asked.append(factor)
        return runs[factor]
    verdict, ratio, note = bisect.settle(_ratio(1.175, 0.2), _judge(), measure, "3.7.1", 4.0)
    assert (verdict, ratio, asked) == ("good", runs[4], [2, 4])


def test_an_interval_that_never_leaves_the_threshold_is_undecided():
    """The issue's 3.7.1: 1.175x [0.914, 1.338] against a 5% threshold. Judged by its median it
    was called bad; it must be undecided."""
    first = {"median": 1.175, "low": 0.914, "high": 1.338}
    verdict, ratio, note = bisect.settle(first, _judge(), lambda f: _ratio(1.06, 0.05), "3.7.1", 4.0)
    assert verdict == "undecided" and "straddles" in note and "16 s" in note
    assert bisect.LONGER[-1] * 4.0 == 16.0
