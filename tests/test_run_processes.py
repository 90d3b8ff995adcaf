"""`rootcause run --processes N`: whole-graph timings pooled over fresh processes.

Real llvm bundles of pool_fusion on/off (TVM builds, cached), measured on the CPU by the real
runner in child processes. The pooled figures are checked against NumPy recomputed from the
per-process samples measurement.json records; no timing thresholds."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rootcause import build, cli, spec as spec_mod
from rootcause.artifacts import rundir
from rootcause.measure import pool_processes, spread_warnings

ROOT = Path(__file__).resolve().parents[1]
POOL = ROOT / "fixtures" / "cases" / "pool_fusion" / "variants.toml"
FAST = ["--profile", "none", "--budget-s", "1.5", "--warmup-calls", "3", "--warmup-s", "0.1"]


@pytest.fixture(scope="session")
def bundles(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundles")
    return [build.build_bundle(spec_mod.with_target(spec_mod.load(f"{POOL}#{n}"), "llvm"), out / n)
            for n in ("on", "off")]


def _run(bundles, out: Path, processes: int) -> dict:
    assert cli.main(["run", *map(str, bundles), "--out", str(out), "--processes", str(processes), *FAST]) == 0
    return json.loads((out / "measurement.json").read_text())


@pytest.fixture(scope="session")
def two(bundles, tmp_path_factory):
    out = tmp_path_factory.mktemp("run2")
    return out, _run(bundles, out, 2)


@pytest.fixture(scope="session")
def one(bundles, tmp_path_factory):
    out = tmp_path_factory.mktemp("run1")
    return out, _run(bundles, out, 1)


def test_per_process_samples_add_up_to_pooled(two):
    m = two[1]["measurement"]
    assert len(m["processes"]) == 2 and m["pooled"]["processes"] == 2
    for name, v in m["variants"].items():
        per = [p["variants"][name] for p in m["processes"]]
        assert all(p["samples"] == len(p["samples_s"]) > 0 for p in per)
        assert sum(p["samples"] for p in per) == len(v["samples_s"])
        assert [x for p in per for x in p["samples_s"]] == v["samples_s"]
        # each process's own median is the median of its own samples
        assert all(p["median_s"] == pytest.approx(np.median(p["samples_s"]), rel=1e-12) for p in per)


def test_pooled_median_is_numpys(two):
    m = two[1]["measurement"]
    for name, v in m["variants"].items():
        every = np.concatenate([p["variants"][name]["samples_s"] for p in m["processes"]])
        assert v["median_s"] == pytest.approx(float(np.median(every)), rel=1e-12)


def _plain_ratio_ci(a: np.ndarray, b: np.ndarray, resamples: int, seed: int) -> tuple[float, float]:
    """Percentile bootstrap of median(a)/median(b), a and b resampled independently."""
    rng = np.random.default_rng(seed)
    ma = np.median(a[rng.integers(0, a.size, (resamples, a.size))], axis=1)
    mb = np.median(b[rng.integers(0, b.size, (resamples, b.size))], axis=1)
    lo, hi = np.percentile(ma / mb, [2.5, 97.5])
    return float(lo), float(hi)


def _hier_ratio_ci(a: list[np.ndarray], b: list[np.ndarray], resamples: int = 2000, seed: int = 7):
    """Processes drawn with replacement (the same ones for a and b), then samples within each."""
    rng = np.random.default_rng(seed)
    ratios = []
    for _ in range(resamples):
        ps = rng.integers(0, len(a), len(a))
        ra = np.concatenate([rng.choice(a[p], a[p].size) for p in ps])
        rb = np.concatenate([rng.choice(b[p], b[p].size) for p in ps])
        ratios.append(np.median(ra) / np.median(rb))
    lo, hi = np.percentile(ratios, [2.5, 97.5])
    return float(lo), float(hi)


def test_hierarchical_interval_contains_ratio_and_is_wider(two):
    m = two[1]["measurement"]
    (r,) = m["ratios"]
    a = [np.asarray(p["variants"][r["a"]]["samples_s"]) for p in m["processes"]]
    b = [np.asarray(p["variants"][r["b"]]["samples_s"]) for p in m["processes"]]
    pooled = float(np.median(np.concatenate(a)) / np.median(np.concatenate(b)))
    assert r["ratio"] == pytest.approx(pooled, rel=1e-12)
    lo, hi = r["ci"]
    assert lo <= pooled <= hi
    proto = m["protocol"]
    plo, phi = _plain_ratio_ci(np.concatenate(a), np.concatenate(b), proto["resamples"], proto["seed"])
    assert (plo, phi) == pytest.approx(tuple(r["ci_plain"]), rel=1e-12)
    # wider than the plain interval it hulls (NumPy's recomputation above agrees with it to 1e-12,
    # not to the last bit, so the width is compared with the recorded one)
    assert hi - lo >= r["ci_plain"][1] - r["ci_plain"][0]
    # the process-resampling part: an independent NumPy one agrees within Monte Carlo error
    hlo, hhi = _hier_ratio_ci(a, b)
    clo, chi = r["ci_hierarchical"]
    assert abs(hlo - clo) < 0.25 * (chi - clo) and abs(hhi - chi) < 0.25 * (chi - clo)
    assert lo <= clo and chi <= hi


def test_compare_reads_pooled_figures(two):
    out, doc = two
    m = doc["measurement"]
    a, b = m["variants"]
    wa, wb, meta, _ = rundir.load_measurement(str(out), (a, b))
    assert wa.median_ns == pytest.approx(m["variants"][a]["median_s"] * 1e9)
    assert (wb.low_ns, wb.high_ns) == pytest.approx(tuple(x * 1e9 for x in m["variants"][b]["ci_s"]))
    assert wa.samples == sum(p["variants"][a]["samples"] for p in m["processes"])


def test_one_process_keeps_the_old_record(one):
    out, doc = one
    m = doc["measurement"]
    assert "processes" not in m and "pooled" not in m
    a, b = m["variants"]
    wa, _, _, _ = rundir.load_measurement(str(out), (a, b))
    assert wa.median_ns == pytest.approx(float(np.median(m["variants"][a]["samples_s"])) * 1e9)
    assert isinstance(m["variants"][a]["calls_per_sample"], int)


def test_spread_warning_names_variant_and_range():
    us = 1e-6
    per = {"off": [{"median_s": 83.2 * us, "ci_s": [82.8 * us, 83.6 * us]},
                   {"median_s": 117.7 * us, "ci_s": [117.0 * us, 118.2 * us]}],
           "on": [{"median_s": 107.6 * us, "ci_s": [107.2 * us, 108.0 * us]},
                  {"median_s": 108.1 * us, "ci_s": [107.7 * us, 108.5 * us]}]}
    (line,) = spread_warnings(per)
    assert line.startswith("off:") and "83.20-117.70 us" in line and "1.20 us" in line
    # a spread just inside the widest interval does not warn; a single process never does
    per["off"][1] = {"median_s": 84.3 * us, "ci_s": [83.1 * us, 85.5 * us]}
    assert spread_warnings(per) == []
    assert spread_warnings({"x": per["off"][:1]}) == []


def test_bad_process_count_is_one_line(bundles, tmp_path, capsys):
    assert cli.main(["run", *map(str, bundles), "--out", str(tmp_path), "--processes", "0", *FAST]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["rootcause run: --processes: must be >= 1, got 0"]


H200 = ROOT / "fixtures" / "captures"
H200_RUNS = ["h200-2026-12-02-analyze/run", "h200-2026-12-02-run/ncu", "h200-2026-12-02-run",
             "h200-2026-12-02-run/run2/pool_fusion", "h200-2026-12-02-seeds/pool_fusion",
             "h200-2026-12-02-seeds/pool_fusion_ncu"]


def test_h200_processes_pooled():
    """Six separate H200 processes' pool_fusion on/off measurements (captured, PROVENANCE.md
    there): OFF's per-process medians spread far beyond one process's interval."""
    results = []
    for run in H200_RUNS:
        m = json.loads((H200 / run / "measurement.json").read_text())["measurement"]
        v = {n.replace("_", "-"): x for n, x in m["variants"].items()}
        results.append({**m, "variants": {n: v[n] for n in ("pool-fusion-on", "pool-fusion-off")}})
    pooled = pool_processes(results)
    offs = [r["variants"]["pool-fusion-off"]["median_s"] * 1e6 for r in results]
    (off_line,) = [w for w in pooled["warnings"] if w.startswith("pool-fusion-off:")]
    assert f"{min(offs):.2f}-{max(offs):.2f} us" in off_line and "6 processes" in off_line
    (r,) = pooled["ratios"]
    every = {n: np.concatenate([x["variants"][n]["samples_s"] for x in results]) for n in ("pool-fusion-on",
                                                                                          "pool-fusion-off")}
    assert r["ratio"] == pytest.approx(np.median(every["pool-fusion-on"]) / np.median(every["pool-fusion-off"]))
    lo, hi = r["ci_hierarchical"]
    plo, phi = _plain_ratio_ci(every["pool-fusion-on"], every["pool-fusion-off"], 2000, 0)
    # between-process variance: the process-resampling interval is many times the plain one
    assert lo <= r["ratio"] <= hi and hi - lo > 5 * (phi - plo)


@pytest.mark.parametrize("profiler", ["cupti", "ncu"])
def test_a_profiler_that_cannot_run_is_named_and_the_run_goes_on(bundles, tmp_path, capsys, profiler):
    """On this CPU host the capture child fails (no cupti-python; no ncu binary): its failure
    comes back through the child protocol as one line in measurement.json and on stderr, the
    timing stands, and no envelope is left in the run directory."""
    out = tmp_path / "run"
    argv = ["run", *map(str, bundles), "--out", str(out), "--profile", profiler, *FAST[2:]]
    if profiler == "ncu":
        argv += ["--ncu", str(tmp_path / "no-such-ncu")]
    assert cli.main(argv) == 0
    doc = json.loads((out / "measurement.json").read_text())
    assert doc["measurement"]["ratios"]
    for name, record in doc["profiles"].items():
        assert record["ok"] is False and "\n" not in record["error"]
        expected = "cupti" if profiler == "cupti" else "no-such-ncu not found"
        assert expected in record["error"], record["error"]
    err = capsys.readouterr().err
    assert f"{profiler} failed" in err and "Traceback" not in err
    assert not list(out.glob("*_result.json"))
