"""Memory-access mechanisms from hardware counters: the global-access and bank-conflicts rules on
real ncu profiles of five zoo pairs (fixtures/captures/h200-2026-12-04-ncu/, PROVENANCE.md there).

Two pairs differ in the access pattern alone (tvm_strided_threads: uncoalesced; tvm_bank_conflict:
32-way bank conflicts); three differ by other mechanisms (occupancy, parallelism) and must keep
their zoo diagnosis with neither counter rule firing. Truth: the counters as the CSV holds them,
read with the csv module, and the zoo's expected.toml (written from how each case is built).
Three more pairs from a later call: iree_dedup_matmul (one launch a side, where the time outside
the replayed kernels must not be read as launch overhead) and two nulls.
These rules were written after the two access pairs' counters were seen: they are not held out.
"""
from __future__ import annotations

import csv
import json
import shutil
import statistics
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import captures

ROOT = Path(__file__).resolve().parent.parent
NCU = ROOT / "fixtures" / "captures" / "h200-2026-12-04-ncu"
ZOO = ROOT / "fixtures" / "zoo"
COUNTER_RULES = {"global-access", "bank-conflicts"}


def expected(case: str) -> dict:
    return tomllib.loads((ZOO / case / "expected.toml").read_text())


def analyze(case: str, tmp: Path, run: Path) -> dict:
    exp = expected(case)["case"]
    out = tmp / case
    shutil.copytree(run.parent / "analyze", out)  # the plan and manifests the run's bundles were built with
    spec = ZOO / case / "variants.toml"
    proc = subprocess.run([sys.executable, "-m", "rootcause", "analyze", f"{spec}#{exp['a']}", f"{spec}#{exp['b']}",
                           "--out", str(out), "--from-run", str(run), "--gpu", "H200"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads((out / "attribution.json").read_text())


def top(att: dict) -> dict:
    return max(att["units"], key=lambda u: abs(u["delta_ns"]["median"]))


def raw_counters(case: str, variant: str) -> dict[str, float]:
    """Per launch (the median of the profiled launches), from the raw page with the csv module."""
    lines = (NCU / case / "run" / f"{variant}.ncu.csv").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = list(csv.reader(lines[start:]))
    header, data = rows[0], rows[2:]

    def per_launch(*names: str) -> float:
        """Median over launches of the summed columns (ld + st of one launch, as ncu counts it)."""
        return statistics.median(sum(float(r[header.index(n)].replace(",", "")) for n in names) for r in data)

    pre = "l1tex__t_{}_pipe_lsu_mem_global_op_{}.sum"
    return {"sectors": per_launch(pre.format("sectors", "ld"), pre.format("sectors", "st")),
            "requests": per_launch(pre.format("requests", "ld"), pre.format("requests", "st")),
            "wavefronts": per_launch("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
                                     "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"),
            "shared": per_launch("smsp__inst_executed_op_shared_ld.sum", "smsp__inst_executed_op_shared_st.sum")}


@pytest.fixture(scope="module")
def ncu_att(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ncu")
    cache: dict[str, dict] = {}

    def get(case: str) -> dict:
        if case not in cache:
            cache[case] = analyze(case, tmp, NCU / case / "run")
        return cache[case]
    return get


def test_uncoalesced_pair_is_blamed_on_global_access(ncu_att):
    unit = top(ncu_att("tvm_strided_threads"))
    (f,) = [f for f in unit["findings"] if f["rule"] in COUNTER_RULES]
    assert f["rule"] == "global-access" and not unit["unexplained"]
    for v in ("strided_threads-columns", "strided_threads-rows"):
        c = raw_counters("tvm_strided_threads", v)
        assert f["evidence"]["sectors_per_request"][v] == pytest.approx(c["sectors"] / c["requests"])
    # the fully coalesced side: a warp's 32 four-byte accesses in 4 sectors
    assert f["evidence"]["sectors_per_request"]["strided_threads-rows"] == pytest.approx(4.0)


def test_bank_conflicted_pair_is_blamed_on_bank_conflicts(ncu_att):
    unit = top(ncu_att("tvm_bank_conflict"))
    (f,) = [f for f in unit["findings"] if f["rule"] in COUNTER_RULES]
    assert f["rule"] == "bank-conflicts" and not unit["unexplained"]
    for v in ("bank_conflict-pitch32", "bank_conflict-padded"):
        c = raw_counters("tvm_bank_conflict", v)
        assert f["evidence"]["wavefronts_per_instruction"][v] == pytest.approx(c["wavefronts"] / c["shared"])


@pytest.mark.parametrize("case", ["tvm_smem_occupancy", "tvm_block32_rowsum", "iree_rowmax_pipeline"])
def test_other_mechanisms_keep_their_diagnosis_and_no_counter_rule_fires(ncu_att, case):
    att = ncu_att(case)
    assert not COUNTER_RULES & {f["rule"] for f in att["findings"]}
    assert expected(case)["expected"]["cause_rule"] in {f["rule"] for f in top(att)["findings"]}


def test_without_counters_the_unexplained_unit_says_what_would_read_them(tmp_path):
    """The zoo's CUPTI capture of the uncoalesced pair: no counters, so no counter rule, the unit
    unexplained, and the line names the profile that would tell."""
    att = analyze("tvm_strided_threads", tmp_path, ZOO / "tvm_strided_threads" / "capture" / "run")
    unit = top(att)
    assert unit["unexplained"] and not COUNTER_RULES & {f["rule"] for f in att["findings"]}
    (line,) = [c for c in att["cannot_conclude"] if c.startswith(f"unit {unit['unit']}:")]
    assert "--profile ncu" in line


def measured_minus_kernels_ns(case: str, variant: str) -> float:
    """The measured call's median (measurement.json's samples) minus the replayed kernels' time
    per call (the ncu page's durations over its profiled calls, read with the csv module)."""
    run = NCU / case / "run"
    doc = json.loads((run / "measurement.json").read_text())
    measured = statistics.median(doc["measurement"]["variants"][variant]["samples_s"]) * 1e9
    rows = captures.ncu_rows(variant, run)
    launches = len(rows) // doc["profiles"][variant]["calls"]
    per_call = [sum(ns for _, ns in rows[i:i + launches]) for i in range(0, len(rows), launches)]
    return measured - statistics.median(per_call)


def test_ncu_residual_is_not_read_as_launch_overhead(ncu_att):
    """One launch a side, the same matmul kernel: the zoo's CUPTI capture blames the shared
    executable and nothing outside the kernels. Under ncu each kernel is replayed alone, and the
    measured call minus the replayed kernel differs by a quarter of the delta: that is not launch
    overhead (must_not_fire here), so the rule declines and says why; the rest of the verdict stands."""
    att = ncu_att("iree_dedup_matmul")
    exp = expected("iree_dedup_matmul")["expected"]
    assert exp["cause_rule"] in {f["rule"] for f in top(att)["findings"]}
    assert not set(exp["must_not_fire"]) & {f["rule"] for f in att["findings"]}
    (line,) = [c for c in att["cannot_conclude"] if c.startswith("residual: ncu replayed")]
    assert "--profile cupti" in line
    # what the rule declined to read is real in the capture: outside the replayed kernel, B spends
    # over a fifth of the measured whole-graph difference more than A, with one launch a side
    outside = {v: measured_minus_kernels_ns("iree_dedup_matmul", v) for v in ("mm_bs4-alone", "mm_bs4-dedup")}
    delta = outside["mm_bs4-dedup"] - outside["mm_bs4-alone"]
    assert att["residual"]["significant"]
    assert att["residual"]["delta_ns"]["median"] == pytest.approx(delta, rel=0.1)
    assert delta > 0.2 * att["whole_graph"]["delta_ns"]["median"]
    assert att["residual"]["launches_per_call"] == {"a": 1.0, "b": 1.0}


@pytest.mark.parametrize("case", ["iree_null", "tvm_null"])
def test_ncu_null_pairs_show_nothing(ncu_att, case):
    att = ncu_att(case)
    assert not att["whole_graph"]["significant"] and not att["residual"]["significant"]
    assert not any(u["significant"] for u in att["units"]) and not att["findings"]
