"""`rootcause sweep` on the CPU: fixtures/cases/sweep-llvm.toml (six llvm pairs of real TVM and
IREE builds, plus one pair that cannot build for llvm) run in this process and on a local Ray
cluster of 2 CPUs, with one run task's worker process killed mid-sweep. Builds come from the
content-keyed cache ($ROOTCAUSE_CACHE) after the first session; each pair's timing loop is 1 s.
"""
from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from rootcause import cli, executors, sweep as sweeps, sweepfile
from rootcause.spec import resolve_target

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ROOT / "fixtures" / "cases" / "sweep-llvm.toml"
FAILING = "pool_fusion.on_vs_serial.llvm"


def _load(path: Path = SWEEP) -> sweepfile.Sweep:
    return sweeps.load(path, lambda target, spec: resolve_target(target, spec, False))


def _rows(out: Path) -> dict[str, dict]:
    return {r["id"]: r for r in json.loads((out / "sweep.json").read_text())["rows"]}


@pytest.fixture(scope="module")
def sequential(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "seq"
    assert cli.main(["sweep", str(SWEEP), "--out", str(out)]) == 0
    return out


def _kill_first_run_worker(killed: list[int], stop: threading.Event) -> None:
    """SIGKILL the first worker process seen running a run task (Ray titles a worker
    'ray::<task>' while it executes one)."""
    while not stop.is_set():
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            if title.startswith(b"ray::_task_run"):
                time.sleep(0.5)  # let it get into the measurement
                try:  # still that worker running that task (not a pid reused meanwhile)
                    if not Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::_task_run"):
                        continue
                except OSError:
                    continue
                os.kill(int(pid), signal.SIGKILL)
                killed.append(int(pid))
                return
        time.sleep(0.05)


@pytest.fixture(scope="module")
def on_ray(tmp_path_factory):
    ray = pytest.importorskip("ray")
    out = tmp_path_factory.mktemp("sweep") / "ray"
    ray.init(address="local", num_cpus=2, include_dashboard=False)  # its own, never another test's cluster
    killed: list[int] = []
    stop = threading.Event()
    watcher = threading.Thread(target=_kill_first_run_worker, args=(killed, stop), daemon=True)
    watcher.start()
    cancelled: list = []  # Ray's own view: every task the driver cancels
    real_cancel = ray.cancel
    ray.cancel = lambda ref, **kw: cancelled.append(ref) or real_cancel(ref, **kw)
    try:
        sweep = _load()
        rows = sweeps.run_on_ray(sweep, out, max_retries=2)
        sweeps.write_summary(sweep, out, out / "pairs", rows, "ray (test)")
    finally:
        ray.cancel = real_cancel
        stop.set()
        ray.shutdown()
    return out, killed, cancelled


@pytest.mark.slow


def test_every_pair_has_a_row_and_the_bad_one_its_error(sequential):
    rows = _rows(sequential)
    assert len(rows) == 7 and [r["id"] for r in json.loads((sequential / "sweep.json").read_text())["rows"]] == \
        [p.id for p in _load().pairs]
    bad = rows.pop(FAILING)
    assert bad["status"] == "failed" and bad["stage"] == "build" and "cannot build for llvm" in bad["error"]
    assert "\n" not in bad["error"]
    assert all(r["status"] == "ok" for r in rows.values()), rows


def test_rows_say_what_each_attribution_says(sequential):
    """Each row against its pair's attribution.json, by the rule the reports state: B slower
    when the measured whole-graph delta (B - A) is positive and significant."""
    for pid, row in _rows(sequential).items():
        if row["status"] != "ok":
            continue
        doc = json.loads((sequential / "pairs" / pid / "attribution.json").read_text())
        whole = doc["whole_graph"]
        expected = ("no significant difference" if not whole["significant"] else
                    "B slower" if whole["delta_ns"]["median"] > 0 else "B faster")
        assert row["verdict"] == expected, pid
        assert row["units"] == sorted(({"unit": u["unit"], "a": u["kernels_a"], "b": u["kernels_b"]}
                                       for u in doc["units"]), key=lambda u: u["unit"])
        m = json.loads((sequential / "pairs" / pid / "run" / "measurement.json").read_text())
        assert sorted(m["measurement"]["variants"]) == sorted([row["a"], row["b"]])


def test_sweep_reports_link_every_finished_pair(sequential):
    html = (sequential / "sweep.html").read_text()
    md = (sequential / "sweep.md").read_text()
    for pid, row in _rows(sequential).items():
        link, md_link = f"pairs/{pid}/report.html", f"pairs/{pid}/report.md"
        assert (link in html and md_link in html and md_link in md) == (row["status"] == "ok"), pid
        assert (sequential / link).is_file() == (sequential / md_link).is_file() == (row["status"] == "ok")
    assert html.count("<tr class=") == 7 and "data-col" in html and "addEventListener('click'" in html


@pytest.mark.slow


def test_ray_results_equal_the_sequential_ones(sequential, on_ray):
    """What does not depend on timing is equal: rows, errors, units; the verdict where the
    sequential run's ratio interval is far from 1 (a 2x effect cannot flip between two runs)."""
    out, _, _ = on_ray
    seq, par = _rows(sequential), _rows(out)
    assert list(seq) == list(par)
    for pid in seq:
        a, b = seq[pid], par[pid]
        assert (a["status"], a.get("stage"), a.get("error")) == (b["status"], b.get("stage"), b.get("error")), pid
        if a["status"] != "ok":
            continue
        assert a["units"] == b["units"], pid
        if a["ratio_low"] and a["ratio_low"] > 2:
            assert a["verdict"] == b["verdict"], pid
    assert sum(1 for r in seq.values() if r["status"] == "ok" and (r["ratio_low"] or 0) > 2) >= 2
    # the folders a worker made are published with this host's paths in their reports
    doc = json.loads((out / "pairs" / "pool_fusion.on_vs_off.llvm" / "attribution.json").read_text())
    assert doc["run"]["directory"] == str(out / "pairs" / "pool_fusion.on_vs_off.llvm" / "run")


def test_a_killed_worker_is_retried_and_the_sweep_completes(on_ray):
    out, killed, _ = on_ray
    assert len(killed) == 1
    rows = _rows(out)
    assert sum(r["status"] == "ok" for r in rows.values()) == 6
    runs = [json.loads((out / "pairs" / pid / "run" / ".sweep-run.json").read_text())
            for pid, r in rows.items() if r["status"] == "ok"]
    assert killed[0] not in {r["ran_on"]["pid"] for r in runs}  # the killed attempt published nothing


def test_a_failed_stage_cancels_nothing(on_ray):
    """The pair that cannot build ends at its build stage; its run and attribute tasks return
    that failure themselves. Nothing is cancelled: a cancel that races a task's reply aborts Ray's
    driver, which is the sweep's own process (it ended a test worker of this suite)."""
    out, _, cancelled = on_ray
    row = _rows(out)[FAILING]
    assert (row["status"], row["stage"]) == ("failed", "build") and cancelled == []


def test_resume_redoes_only_what_is_missing(sequential, tmp_path, capsys):
    import shutil

    out = tmp_path / "resume"
    shutil.copytree(sequential, out)
    pid = "pool_fusion.on_vs_off.llvm"
    build_record = out / "pairs" / pid / "sweep-build.json"
    before = {p: p.stat().st_mtime_ns for p in (out / "pairs").rglob("*") if p.is_file()}
    (out / "pairs" / pid / "result.json").unlink()
    shutil.rmtree(out / "pairs" / pid / "run")
    capsys.readouterr()
    assert cli.main(["sweep", str(SWEEP), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"{pid}: run" in err and f"{pid}: build" not in err
    assert err.count("done earlier") == 6
    after = {p: p.stat().st_mtime_ns for p in (out / "pairs").rglob("*") if p.is_file()}
    redone = {p.relative_to(out / "pairs").parts[0] for p in after if after[p] != before.get(p)}
    assert redone == {pid} and after[build_record] == before[build_record]
    assert _rows(out)[pid]["status"] == "ok"


@pytest.mark.parametrize("body, message", [
    ("[[pair]]\na = 'pool_fusion/variants.toml#on'\n", "[[pair]] 1.b: missing required key"),
    ("[[pair]]\na = 'pool_fusion/variants.toml#on'\nb = 'pool_fusion/variants.toml#nope'\n", "no variant 'nope'"),
    ("[[pair]]\na = '../x.toml#on'\nb = 'pool_fusion/variants.toml#off'\n", "outside"),
    ("[sweep]\nbudget_s = -1\n[[pair]]\na = 'x#a'\nb = 'x#b'\n", "[sweep].budget_s: must be a number > 0"),
    ("[sweep]\nbogus = 1\n", 'unknown key "bogus"'),
    ("[[pair]]\na = 'pool_fusion/variants.toml#on'\nb = 'pool_fusion/variants.toml#on'\n", "a pair needs two"),
    ("[matrix]\nmodels = ['pool_fusion/variants.toml']\nvariants = [{a = 'on', b = 'off'}, {a = 'on', b = 'off'}]\n",
     "is also"),
    ("", "no pairs"),
    ("[[pair]\n", "not TOML"),
])
def test_bad_sweep_file_is_one_line_exit_2(tmp_path, capsys, body, message):
    """The file is written beside the cases, so its relative paths resolve as a user's would."""
    path = ROOT / "fixtures" / "cases" / f".bad-sweep-{os.getpid()}.toml"
    path.write_text(body)
    try:
        assert cli.main(["sweep", str(path), "--out", str(tmp_path / "o")]) == 2
    finally:
        path.unlink()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and err[0].startswith("rootcause sweep: "), err
    assert not (tmp_path / "o").exists()


def test_stage_keys_ignore_an_added_default_field_and_follow_a_changed_value():
    """A spec type with one more field (at its default) keys as today's; a changed toolchain
    or flag does not."""
    import dataclasses

    from rootcause.spec import VariantSpec

    @dataclasses.dataclass
    class Later(VariantSpec):
        new_option: str = ""
        new_list: list = dataclasses.field(default_factory=list)

    pair = _load().pairs[0]
    folder = SWEEP.resolve().parent
    keys = sweeps._stage_keys(pair, folder)
    later = dataclasses.replace(pair, spec_a=Later(**{f.name: getattr(pair.spec_a, f.name)
                                                      for f in dataclasses.fields(VariantSpec)}))
    assert isinstance(later.spec_a, Later) and sweeps._stage_keys(later, folder) == keys
    for changed in (dataclasses.replace(pair.spec_a, toolchain=["iree-base-compiler==3.8.0"]),
                    dataclasses.replace(later.spec_a, new_option="x")):
        assert sweeps._stage_keys(dataclasses.replace(pair, spec_a=changed), folder)["build"] != keys["build"]


@pytest.mark.slow


def test_pairs_in_flight_on_ray_stay_under_the_cap(tmp_path, monkeypatch):
    """Ray's own view: every ray.wait the driver makes lists the heads of the chains it has out."""
    ray = pytest.importorskip("ray")
    waited: list[int] = []
    real_wait = ray.wait

    def wait(refs, **kw):
        waited.append(len(refs))
        return real_wait(refs, **kw)

    monkeypatch.setattr(ray, "wait", wait)
    ray.init(address="local", num_cpus=2, include_dashboard=False)  # its own, never another test's cluster
    try:
        sweep = _load()
        rows = sweeps.run_on_ray(sweep, tmp_path / "o", until="build", max_in_flight=2)
        # a function every worker can import (this test module is not on their path)
        joined = executors.ray_map(os.path.join, [("d", str(i)) for i in range(6)], max_in_flight=3)
    finally:
        ray.shutdown()
    built = [p for p in sweep.pairs if (tmp_path / "o" / "pairs" / p.id / "sweep-build.json").is_file()]
    assert len(built) == 6 and [r["id"] for r in rows if r] == [FAILING]  # every pair went through
    assert max(waited[:len(waited) - 6]) == 2 and max(waited[-6:]) == 3 
    assert joined == [f"d/{i}" for i in range(6)]  # in the items' order
