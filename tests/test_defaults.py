"""Default outputs never touch the repository's tracked files: the README's main job, run with no
--out from a copy of the repository, leaves `git status` clean, and the default output root of
analyze, sweep and bisect (reports/) is ignored by git and holds no tracked file. The committed
report gallery lives in gallery/, which no default writes to."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    """The working tree's tracked files, committed in a fresh repository (as a clone of this tree)."""
    repo = tmp_path_factory.mktemp("clone")
    for name in filter(None, _git(ROOT, "ls-files", "-z").split("\0")):
        src = ROOT / name
        if src.is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            (repo / name).write_bytes(src.read_bytes())
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "copy")
    return repo


@pytest.mark.parametrize("command, default", [("analyze", "reports/einsum-split-small_vs_einsum-fused-small"),
                                              ("sweep", "reports/sweep-x"), ("bisect", "reports/bisect-x")])
def test_default_output_root_is_ignored_and_untracked(copy, command, default):
    source = (ROOT / "rootcause" / "commands" / f"{command}.py").read_text()
    assert 'Path("reports")' in source  # the default this test is about
    assert subprocess.run(["git", "-C", str(copy), "check-ignore", "-q", default]).returncode == 0
    assert _git(copy, "ls-files", "reports") == ""


def test_readme_main_job_leaves_the_repository_clean(copy):
    """The README's main job as written (no --out), on the CPU, from the copy's root."""
    readme = (ROOT / "README.md").read_text()
    job = ("rootcause analyze fixtures/cases/einsum_fusion/variants.toml#split_small "
           "fixtures/cases/einsum_fusion/variants.toml#fused_small")
    assert job in readme
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # python -m from the copy's root imports the copy's rootcause (its readers in Python: no .so there)
    done = subprocess.run([sys.executable, "-m", "rootcause", *job.split()[1:], "--target", "llvm"],
                          cwd=copy, capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    doc = json.loads((copy / "reports" / "einsum-split-small_vs_einsum-fused-small" / "attribution.json").read_text())
    assert doc["whole_graph"]["significant"] and done.stdout.startswith("einsum-fused-small is ")  # a verdict
    assert _git(copy, "status", "--porcelain") == ""
    assert "NVML" not in done.stderr  # a CPU run does not warn about the GPU library it does not need
    # nor speaks of a GPU's launches or tools: IREE's CPU dispatches run workgroups
    assert not re.search(r"\bblock(s|\(s\))? x |\bSMs?\b|thread slots", done.stdout) and "--gpu" not in done.stdout
    # the seed's mechanism, named with the counts the sources fix: the fused generic evaluates both
    # producers' exp at every (c, i, j, k), the split form once per element of each operand
    n, c = _small_size()
    found = [f for u in doc["units"] for f in u.get("findings", []) if f["rule"] == "recomputation"]
    assert len(found) == 1, done.stdout
    evidence = found[0]["evidence"]
    assert evidence["einsum-fused-small"] == 2 * c * n ** 3 and evidence["einsum-split-small"] == 2 * n * n * c
    assert f"evaluates exp {2 * c * n ** 3:,} times a call" in done.stdout
    # the story adds up: the fused reduction is the top unit with at least 90% of the delta, and
    # the fused side's residual is no more than the gaps its own profile shows outside the one
    # dispatch (read from the raw dispatch events), scaled as the kernels are to the measurement
    top = max(doc["units"], key=lambda u: abs(u["delta_ns"]["median"]))
    assert [k.split("_")[2] for k in top["kernels_b"]] == ["0"] and "reduction" in top["kernels_b"][0]
    assert top["share"] >= 0.9, done.stdout
    # and is told first: the top unit's first line under it is the recomputation, not its workgroups
    assert top["findings"][0]["rule"] == "recomputation", [f["rule"] for f in top["findings"]]
    lines = done.stdout.splitlines()
    first = lines[next(i for i, line in enumerate(lines) if line.startswith("The top unit")) + 1]
    assert "evaluates exp" in first, first
    report = copy / "reports" / "einsum-split-small_vs_einsum-fused-small"
    events = [json.loads(line) for line in (report / "cpu-profiles" / "einsum-fused-small.iree-dispatch.jsonl")
              .read_text().splitlines()]
    events = sorted((e for e in events if e.get("type") == "host_dispatch_event"), key=lambda e: e["start_host_time_ns"])
    starts = np.array([e["start_host_time_ns"] for e in events], dtype=float)
    ends = np.array([e["end_host_time_ns"] for e in events], dtype=float)
    scale = doc["whole_graph"]["b"]["median"] / np.median(ends - starts)
    assert doc["residual"]["b"]["median"] <= np.quantile(starts[1:] - ends[:-1], 0.75) * scale
    # the report as a CPU run's: its subtitle names no unit its numbers do not carry, it asks for
    # no --gpu, and its footer shows the machine and the load the run recorded
    page, md = (report / "report.html").read_text(), (report / "report.md").read_text()
    load = doc["environment"]["measure_start"]["cpu"]["loadavg"][0]
    assert "in ns" not in page and "give --gpu" not in page and "Occupancy not available" not in page
    assert [line for line in md.splitlines() if "not recorded" in line] == []
    assert f"load average {load:.2f}" in md.splitlines()[-3], md.splitlines()[-3]  # the footer's, as measured


def _small_size() -> tuple[int, int]:
    """(N, C) of the small einsum sources, from the generator that writes them."""
    text = (ROOT / "fixtures" / "cases" / "einsum_fusion" / "gen_mlir.py").read_text()
    n, c = re.search(r'"small": \((\d+), (\d+)\)', text).groups()
    return int(n), int(c)
