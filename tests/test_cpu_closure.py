"""The README's CPU default (pool_fusion on/off for llvm) through `rootcause analyze`: real TVM builds,
the run stage's interleaved measurement on this host, and the TVM CPU profile (launches replayed
after calls timed without a profiler).

Everything is recomputed here from the raw files the run left: the Chrome trace of each profile,
the profile session's own timed calls (cpu-profiles/profiles.json), the measured samples
(run/measurement.json) and the catalogs; the closure either lands within 95-105% or one
cannot_conclude line says why, with the numbers computed here."""
from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest

from captures import cpu_profile_rows, launch_nodes, node_call_ns, unit_launches
from rootcause import cli

ROOT = Path(__file__).resolve().parents[1]
CASE = ROOT / "fixtures" / "cases" / "pool_fusion" / "variants.toml"


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cpu") / "O"
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        assert cli.main(["analyze", f"{CASE}#on", f"{CASE}#off", "--no-confirm", "--budget-s", "4",
                         "--out", str(out)]) == 0
    return out, json.loads((out / "attribution.json").read_text()), printed.getvalue()


def test_cpu_closure_from_the_raw_profile_and_measurement(cpu_run):
    out, doc, printed = cpu_run
    busy, units, whole = {}, {}, {}
    for v in "ab":
        whole[v], scale, calls, rows = cpu_profile_rows(out, doc, v)
        assert f"scaled by {scale:.3f} to the measurement" in " ".join(doc["notes"])
        nodes = launch_nodes(calls, rows, list(doc["catalogs"][v]["kernels"].values()))
        per_unit = {u["unit"]: node_call_ns(calls, rows, unit_launches(doc, v, u, nodes)) for u in doc["units"]}
        busy[v] = node_call_ns(calls, rows, {(k, None) for _, k, _, _ in rows})  # one thread: no overlap
        assert sum(per_unit.values()) == pytest.approx(busy[v])  # every launch in exactly one unit
        units[v] = {u: float(np.median(t)) for u, t in per_unit.items()}
        for u in doc["units"]:
            assert u[f"time_{v}_ns"]["median"] == pytest.approx(units[v][u["unit"]], abs=2)
        resid = whole[v] - float(np.median(busy[v]))
        assert doc["residual"][v]["median"] == pytest.approx(resid, abs=2)
    d_whole = whole["b"] - whole["a"]
    d_units = sum(units["b"][u] - units["a"][u] for u in units["a"])
    d_resid = (whole["b"] - np.median(busy["b"])) - (whole["a"] - np.median(busy["a"]))
    closure = (d_units + d_resid) / d_whole
    lines = [c for c in doc["cannot_conclude"] if "closure" in c]
    resid = {v: whole[v] - float(np.median(busy[v])) for v in "ab"}
    if doc["whole_graph"]["significant"]:
        assert doc["closure"] == pytest.approx(closure, rel=1e-3)
    else:
        assert doc["closure"] is None
    # one line, the deepest cause first: kernels longer than the measured call (a residual whose
    # whole interval lies below zero: no residual to close with), no significant delta, closure
    # outside the band; none when it closes
    below = [v for v in "ab" if resid[v] < 0 and doc["residual"][v]["high"] < 0]
    if below:
        worst = min(below, key=resid.get)
        assert lines == [next(c for c in lines if c.startswith(
            f"closure is no check here: {doc['variants'][worst]['label']}'s profiled kernels take "
            f"{-resid[worst] / 1e3:.1f} us per call more"))]
    elif not doc["whole_graph"]["significant"]:
        assert lines == [next(c for c in lines if c.startswith(
            f"closure not computed: the measured whole-graph delta {d_whole / 1e3:+.1f} us"))]
    elif not 0.95 <= closure <= 1.05:
        assert lines == [next(c for c in lines if c.startswith(f"closure {closure:.0%} is outside 95%-105%"))]
    else:
        assert lines == []
    assert all(f"Cannot conclude: {c}." in printed for c in lines)


def _unit_medians(out, doc, v, repeat):
    _, _, calls, rows = cpu_profile_rows(out, doc, v, repeat=repeat)
    nodes = launch_nodes(calls, rows, list(doc["catalogs"][v]["kernels"].values()))
    return {u["unit"]: float(np.median(node_call_ns(calls, rows, unit_launches(doc, v, u, nodes))))
            for u in doc["units"]}


def test_deltas_are_significant_only_beyond_what_a_session_alone_does(cpu_run):
    """A and B were profiled twice, in the order A, B, B, A. From the raw traces and the sessions'
    own timed calls: each unit's repeat_delta_ns is the second pair's delta; a significant unit has
    the same sign there and a delta larger than either side's change between its two sessions; a
    significant whole-graph delta has its sign in both pairs of sessions' timed calls, and the
    mirrored order's delta of those calls ((B1 + B2 - A1 - A2) / 2, a steady drift cancelled)
    reaches 5% of A's."""
    out, doc, printed = cpu_run
    first = {v: _unit_medians(out, doc, v, False) for v in "ab"}
    again = {v: _unit_medians(out, doc, v, True) for v in "ab"}
    for u in doc["units"]:
        j = u["unit"]
        assert u["repeat_delta_ns"]["median"] == pytest.approx(again["b"][j] - again["a"][j], abs=4)
        if u["significant"]:
            assert (again["b"][j] > again["a"][j]) == (u["delta_ns"]["median"] > 0)
            spread = max(abs(again[v][j] - first[v][j]) for v in "ab")
            assert abs(u["delta_ns"]["median"]) > spread - 4
    profiles = json.loads((out / "cpu-profiles" / "profiles.json").read_text())["records"]
    assert all(r["repeat"]["file"].startswith("repeat/") for r in profiles.values())
    variants = json.loads((out / "run" / "measurement.json").read_text())["measurement"]["variants"]
    whole = {v: float(np.median(variants[doc["variants"][v]["label"]]["samples_s"])) * 1e9 for v in "ab"}
    if doc["whole_graph"]["significant"]:
        d = whole["b"] - whole["a"]
        timed = {v: [float(np.median(r["timed_ns"])), float(np.median(r["repeat"]["timed_ns"]))]
                 for v, r in ((v, profiles[doc["variants"][v]["label"]]) for v in "ab")}
        assert all((timed["b"][i] > timed["a"][i]) == (d > 0) for i in (0, 1))  # both session pairs agree
        mirrored = (sum(timed["b"]) - sum(timed["a"])) / 2
        assert (mirrored > 0) == (d > 0) and abs(mirrored) >= 0.05 * sum(timed["a"]) / 2 * (1 - 1e-6)
    for c in doc["cannot_conclude"]:
        if "does not reproduce" in c or "a session alone" in c:
            assert f"Cannot conclude: {c}." in printed
            if c.startswith("unit "):
                assert not next(u for u in doc["units"] if c.startswith(f"unit {u['unit']} "))["significant"]
            else:
                assert c.startswith("whole graph:") and not doc["whole_graph"]["significant"]
