"""confirm on the real H200 run of the prefill_dedup case (fixtures/captures/h200-2026-12-02-analyze-prefill/, its
PROVENANCE.md): A (prefill_bs8 alone), B (deduplicated with prefill_bs2) and the two configuration
hybrids rebuilt here with `analyze --bundle-only` (real iree-compile and ptxas, a fresh build
cache, seconds), then `analyze --from-run` on the committed capture.

Every figure is recomputed from the raw files: whole-graph samples in measurement.json, the CUPTI
records cut into calls at the run's call_starts_ns, the variants' TOML, and the configured MLIR
IREE dumped (read with the test's own regexes, not rootcause/frontends/iree/mlir_attrs.py)."""
from __future__ import annotations

import contextlib
import io
import json
import math
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from rootcause import cli
from rootcause.report import markdown

ROOT = Path(__file__).resolve().parents[1]
CASE = ROOT / "fixtures" / "cases" / "prefill_dedup" / "variants.toml"
ALONE, DEDUP = f"{CASE}#alone", f"{CASE}#dedup"
RUN = ROOT / "fixtures" / "captures" / "h200-2026-12-02-analyze-prefill" / "run"
A, B = "prefill_bs8-alone-cuda", "prefill_bs8-dedup-cuda"
EXE_A, EXE_B = "prefill_bs8$async_dispatch_0", "prefill_bs2$async_dispatch_0"
MAX_RSS = 512 << 20  # the build alone peaks near 130 MB; drawing either input (float64 first) would pass 640 MB

# the build in a child process that reports its own peak RSS (iree-compile runs in grandchildren,
# which VmHWM does not count: only this Python's own allocations)
# VmHWM, not getrusage: Linux carries ru_maxrss across fork and exec, so a child of a large
# pytest process would report the parent's footprint; VmHWM is this process image's own peak.
_BUILD = ("import re, sys; from rootcause import cli; rc = cli.main(sys.argv[1:]); "
          "hwm = re.search(r'VmHWM:\\s+(\\d+) kB', open('/proc/self/status').read()).group(1); "
          "print('peak_rss_kb', hwm, file=sys.stderr); sys.exit(rc)")


@pytest.fixture(scope="session")
def prefill(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prefill_h200")
    out = tmp / "O"
    env = {**__import__("os").environ, "ROOTCAUSE_CACHE": str(tmp / "cache")}  # no cache hit: write_bundle runs
    # --hybrids 2: the two configuration hybrids (planned first) are the ones the capture measured
    r = subprocess.run([sys.executable, "-c", _BUILD, "analyze", ALONE, DEDUP, "--bundle-only", "--hybrids", "2",
                        "--target", "cuda:sm_80", "--out", str(out)], capture_output=True, text=True, env=env,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    rss = int(re.search(r"peak_rss_kb (\d+)", r.stderr).group(1)) * 1024
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert cli.main(["analyze", ALONE, DEDUP, "--out", str(out), "--from-run", str(RUN)]) == 0
    doc = json.loads((out / "attribution.json").read_text())
    return out, printed.getvalue(), doc, rss


def _raw():
    m = json.loads((RUN / "measurement.json").read_text())
    return m, {n: np.asarray(v["samples_s"]) for n, v in m["measurement"]["variants"].items()}


def _records(name: str) -> list[dict]:
    m, _ = _raw()
    return json.loads((RUN / m["profiles"][name]["file"]).read_text())


def _calls(name: str, kernels: set[str]) -> np.ndarray:
    """Seconds per profiled call of `kernels`: CUPTI (end - start), call = the last of the run's
    call_starts_ns at or before the record's start."""
    m, _ = _raw()
    starts = np.asarray(m["profiles"][name]["call_starts_ns"], dtype=np.int64)
    per_call = np.zeros(len(starts))
    for r in _records(name):
        if r["name"] in kernels:
            per_call[np.searchsorted(starts, r["start"], side="right") - 1] += (r["end"] - r["start"]) * 1e-9
    return per_call


def _bundle(out: Path, name: str) -> Path:
    return out / json.loads((out / "plan.json").read_text())["bundles"][name]


def _tiles(mlir: str) -> dict[str, list[int]]:
    """workgroup and subgroup tiles of the one lowering_config in a configured executable."""
    got = {k: re.findall(rf"\b{k} = \[([\d, ]*)\]", mlir) for k in ("workgroup", "subgroup")}
    assert all(len(v) == 1 for v in got.values()), got
    return {k: [int(x) for x in v[0].split(",")] for k, v in got.items()}


def _configured(out: Path, name: str, exe: str, unsubstituted: bool = False) -> dict[str, list[int]]:
    folder = _bundle(out, name) / "ir" / ("unsubstituted" if unsubstituted else "")
    return _tiles((folder / f"configured_module_{exe}.mlir").read_text())


def _bootstrap(t: dict[str, np.ndarray], ua: np.ndarray, ub: np.ndarray, base: str, blocks: int, repeats: int,
               seed: int = 11, n: int = 20000) -> np.ndarray:
    """The test's own draws of the unit share: blocks of the interleaved layout resampled together,
    each side's profiled calls on their own. Base A: (T_h - T_A) / (u_B - u_A); base B: (T_h - T_B) / (u_A - u_B)."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, blocks, (n, blocks))
    med = {k: np.median(v.reshape(blocks, repeats)[idx].reshape(n, -1), axis=1) for k, v in t.items()}
    da = np.median(ua[rng.integers(0, ua.size, (n, ua.size))], axis=1)
    db = np.median(ub[rng.integers(0, ub.size, (n, ub.size))], axis=1)
    return (med["h"] - med["a"]) / (db - da) if base == "a" else (med["h"] - med["b"]) / (da - db)


def _check_bounds(rec: dict, draws: np.ndarray) -> None:
    """Each recorded 95% bound is a 2.5th / 97.5th percentile of the test's own draws. Three blocks
    and three calls make the draws discrete (atoms of several percent), so the quantile q must lie
    between the CDF just below the bound and at it, give or take Monte Carlo error."""
    for bound, q in ((rec["low"], 0.025), (rec["high"], 0.975)):
        below, at = np.mean(draws < bound - 1e-12), np.mean(draws <= bound + 1e-12)
        assert below - 0.015 <= q <= at + 0.015, (rec, q, below, at)


def test_build_never_makes_the_unstored_inputs(prefill):
    """8x2048x5120 and 5120x131072 f16 (160 MiB, 1.25 GiB) are over the 64 MiB store limit by shape
    x dtype, so the build writes their spec and never draws them."""
    out, _, _, rss = prefill
    assert rss < MAX_RSS, f"analyze --bundle-only peaked at {rss >> 20} MiB: an unstored input was generated"
    toml = tomllib.loads(CASE.read_text())["base"]["inputs"]
    sizes = [math.prod(i["shape"]) * np.dtype(i["dtype"]).itemsize for i in toml]
    assert min(sizes) > 64 << 20
    plan = json.loads((out / "plan.json").read_text())
    assert len(plan["bundles"]) == 4
    for name in plan["bundles"]:
        m = json.loads((_bundle(out, name) / "manifest.json").read_text())
        assert [{k: r[k] for k in ("shape", "dtype", "low", "high", "seed")} for r in m["inputs"]] == \
            [{k: i[k] for k in ("shape", "dtype", "low", "high", "seed")} for i in toml]
        assert all(r["file"] is None for r in m["inputs"]) and not (_bundle(out, name) / "inputs").exists()
        assert m["reference"] is None  # the spec has none


def test_hybrids_recover_the_unit(prefill):
    """Both configuration hybrids: times, unit delta, unit share with its interval, verdict and the
    printed sentence, from measurement.json samples and CUPTI records."""
    out, printed, doc, _ = prefill
    m, t = _raw()
    blocks, repeats = m["measurement"]["blocks_run"], m["measurement"]["protocol"]["repeats"]
    assert blocks * repeats == t[A].size
    ka, kb = ({r["name"] for r in _records(n)} for n in (A, B))
    assert len(ka) == len(kb) == 1  # one matmul launch per call on each side: the unit is that kernel
    ua, ub = _calls(A, ka), _calls(B, kb)
    d_unit = np.median(ub) - np.median(ua)
    ta, tb = np.median(t[A]), np.median(t[B])
    plan = json.loads((out / "plan.json").read_text())
    rows = {r["name"]: r for r in doc["confirmation"]["hybrids"]}
    assert set(rows) == {h["name"] for h in plan["hybrids"]} and len(rows) == 2
    for h in plan["hybrids"]:
        row, th = rows[h["name"]], np.median(t[h["name"]])
        assert row["kind"] == "configuration" and row["recovered"]["of"] == "unit"
        assert row["median_s"] == pytest.approx({"a": ta, "b": tb, "h": th}, rel=1e-12)
        assert row["unit_delta_s"] == pytest.approx(d_unit, rel=1e-9)
        base = h["base"]
        want = (th - ta) / d_unit if base == "a" else (th - tb) / -d_unit
        assert row["recovered"]["median"] == pytest.approx(want, rel=1e-9)
        draws = _bootstrap({"a": t[A], "b": t[B], "h": t[h["name"]]}, ua, ub, base, blocks, repeats)
        _check_bounds(row["recovered"], draws)
        assert row["recovered"]["low"] > doc["confirmation"]["threshold"] and row["verdict"] == "confirmed"
        assert 0.9 < want < 1.1  # each configuration alone moves the whole unit's 120 ms
        assert row["speedup"] == pytest.approx({"vs_a": ta / th, "vs_b": tb / th})
        graph = (ta - th) / (ta - tb) if base == "a" else (th - tb) / (ta - tb)
        assert row["recovered_graph"]["median"] == pytest.approx(graph, rel=1e-9)
        moved = f"takes {A if base == 'a' else B} from {(ta if base == 'a' else tb) * 1e6:.1f} to {th * 1e6:.1f} us: " \
                f"it recovers {want:.0%} [{row['recovered']['low']:.0%}, {row['recovered']['high']:.0%}] of the " \
                f"unit's {abs(d_unit) * 1e6:.1f} us"
        assert moved in row["sentence"] and moved in printed
        assert markdown.text(moved) in (out / "report.md").read_text()


def test_top_unit_is_the_matmul(prefill):
    """The top unit: A's and B's CUPTI kernels, its times per call and its share of the measured delta."""
    _, _, doc, _ = prefill
    m, t = _raw()
    top = max(doc["units"], key=lambda u: abs(u["delta_ns"]["median"]))
    ka, kb = ({r["name"] for r in _records(n)} for n in (A, B))
    assert (set(top["kernels_a"]), set(top["kernels_b"])) == (ka, kb)
    assert kb == {"prefill_bs2_async_dispatch_0_matmul_Dx131072x5120_f16xf16xf32"}  # B runs bs2's executable
    ua, ub = _calls(A, ka), _calls(B, kb)
    assert top["time_a_ns"]["median"] == pytest.approx(np.median(ua) * 1e9, abs=1)
    assert top["time_b_ns"]["median"] == pytest.approx(np.median(ub) * 1e9, abs=1)
    d = np.median(ub) - np.median(ua)
    assert top["delta_ns"]["median"] == pytest.approx(d * 1e9, abs=1)
    assert top["share"] == pytest.approx(d / (np.median(t[B]) - np.median(t[A])), rel=1e-6)
    assert top["share"] > 0.95


def test_shared_executable_against_the_configured_mlir(prefill):
    """The finding: one executable serving prefill_bs2 and prefill_bs8 in B, its tiles against A's,
    from IREE's own dumps; the profiled grids follow from those tiles and the TOML shapes; each
    hybrid's executable carries the other side's tiles, and its unsubstituted dump its own."""
    out, _, doc, _ = prefill
    finding = next(f for u in doc["units"] for f in u["findings"] if f["rule"] == "shared-executable")
    stream = next((_bundle(out, B) / "ir" / "phases").glob("*.stream.mlir")).read_text()
    calls = {}
    for func, body in re.findall(r"util\.func public @(\w+)\$async\(.*?\n(.*?)\n  util\.func", stream, re.S):
        calls[func] = set(re.findall(r"stream\.cmd\.dispatch @([\w$]+)::", body))
    assert calls == {"prefill_bs2": {EXE_B}, "prefill_bs8": {EXE_B}}
    assert finding["evidence"]["call_sites"] == sorted(calls)

    tiles_a, tiles_b = _configured(out, A, EXE_A), _configured(out, B, EXE_B)
    assert tiles_b != tiles_a
    ev = finding["evidence"]
    for k in ("workgroup", "subgroup"):
        assert ev["lowering_config"][k] == tiles_b[k] and ev["other_lowering_config"][k] == tiles_a[k]
    assert f"workgroup={tiles_b['workgroup']}" in finding["sentence"]

    # grid = batch x ceil(M / tile) x ceil(N / tile) for x[8, 2048, 5120] @ w[5120, 131072]
    (batch, rows, _), (_, cols) = (i["shape"] for i in tomllib.loads(CASE.read_text())["base"]["inputs"])
    for name, tiles in ((A, tiles_a), (B, tiles_b)):
        wg = tiles["workgroup"]
        want = math.ceil(batch / wg[0]) * math.ceil(rows / wg[1]) * math.ceil(cols / wg[2])
        assert {r["grid_x"] * r["grid_y"] * r["grid_z"] for r in _records(name)} == {want}

    plan = json.loads((out / "plan.json").read_text())
    for h in plan["hybrids"]:
        own, other, exe = (tiles_a, tiles_b, EXE_A) if h["base"] == "a" else (tiles_b, tiles_a, EXE_B)
        assert _configured(out, h["name"], exe) == other
        assert _configured(out, h["name"], exe, unsubstituted=True) == own
        assert f"workgroup {other['workgroup']}" in h["description"]
