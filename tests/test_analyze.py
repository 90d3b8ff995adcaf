"""`rootcause analyze` end to end on the CPU (llvm): pool_fusion on vs off with real TVM builds,
the real interleaved measurement and the TVM VM profile; exit statuses on bad input and on
outputs that differ. Builds go through the content-keyed cache ($ROOTCAUSE_CACHE), so only the
first session pays for them (about 90 s cold on the 2-core CI machine, 40 s warm)."""
from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import numpy as np
import pytest

from captures import cpu_profile_rows, launch_nodes, node_call_ns, unit_launches
from rootcause import cli
from rootcause.artifacts.attribution import check
from rootcause.report import view

ROOT = Path(__file__).resolve().parents[1]
CASE = ROOT / "fixtures" / "cases" / "pool_fusion" / "variants.toml"
ON, OFF = f"{CASE}#on", f"{CASE}#off"


@pytest.fixture(scope="session")
def analyzed(tmp_path_factory):
    out = tmp_path_factory.mktemp("analyze") / "pf"
    rc = cli.main(["analyze", ON, OFF, "--target", "llvm", "--out", str(out), "--budget-s", "4",
                   "--hybrids", "2"])
    assert rc == 0
    return out


def _stderr_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err  # one line, never a traceback
    return err[0]


@pytest.mark.slow


def test_reports_written_and_valid(analyzed):
    doc = json.loads((analyzed / "attribution.json").read_text())
    check(doc, "attribution.json")  # the report's own schema keys
    assert doc["variants"]["a"]["label"] == "pool_fusion-on" and doc["variants"]["b"]["label"] == "pool_fusion-off"
    html, md = (analyzed / "report.html").read_text(), (analyzed / "report.md").read_text()
    assert "<html" in html.lower() and html.count('id="confirmation"') == 1
    assert md.count("Counterfactual hybrids") == 1 and len(md) > 200
    # one row per hybrid in the report's own table, verdicts as confirm recorded them
    for r in doc["confirmation"]["hybrids"]:
        row = next(line for line in md.splitlines() if line.startswith(f"| `{r['name']}`"))
        assert row.rstrip(" |").endswith(f"**{r['verdict']}**" if not r.get("error") else ")**")
    section = html[html.index('id="confirmation"'):]
    section = section[:section.index("</section>")]
    assert section.count("<tr") == 1 + len(doc["confirmation"]["hybrids"])
    for r in doc["confirmation"]["hybrids"]:
        assert f"<code>{r['name']}</code>" in section and view.fmt_recovered(r.get("recovered")) in section


def test_whole_graph_is_the_measured_median(analyzed):
    doc = json.loads((analyzed / "attribution.json").read_text())
    m = json.loads((analyzed / "run" / "measurement.json").read_text())["measurement"]["variants"]
    for v, name in (("a", "pool_fusion-on"), ("b", "pool_fusion-off")):
        assert doc["whole_graph"][v]["median"] == pytest.approx(np.median(m[name]["samples_s"]) * 1e9)
    assert doc["whole_graph"]["source"] == "measured"


def test_cpu_profile_covers_the_catalog_kernels(analyzed):
    """Every kernel the TVM catalog (read from the lowered IR) lists is in the VM profile, once per call."""
    for name in ("pool_fusion-on", "pool_fusion-off"):
        manifest = json.loads((analyzed / "bundles" / name / "manifest.json").read_text())
        trace = json.loads((analyzed / "cpu-profiles" / f"{name}.tvm-vm.json").read_text())
        calls = trace["otherData"]["calls"]
        seen = [e["name"] for e in trace["traceEvents"]]
        assert set(seen) == {k["name"] for k in manifest["kernels"]}
        for k in manifest["kernels"]:
            # a fused kernel runs once per call; an unfused one reused by n bindings n times
            per_call = 1 if k["name"].startswith("fused_") else len(k["source_ops"])
            assert seen.count(k["name"]) == calls * per_call, k["name"]


def test_hybrid_really_splits_the_pool(analyzed):
    """The boundary hybrid's own catalog (from its IR) computes pool2d alone, as B does."""
    plan = json.loads((analyzed / "plan.json").read_text())
    split = [h for h in plan["hybrids"] if h["kind"] == "dataflow-boundary" and "fused_pool2d_add2" in h["kernels"]]
    assert split, plan["hybrids"]
    manifest = json.loads((analyzed / plan["bundles"][split[0]["name"]] / "manifest.json").read_text())
    covering = [k for k in manifest["kernels"] if "main/lv16:pool2d" in k["source_ops"]]
    assert len(covering) == 1 and covering[0]["source_ops"] == ["main/lv16:pool2d"]


def _unit_calls(out: Path, doc: dict, v: str, unit: dict) -> np.ndarray:
    """Seconds per call of `unit`'s launches on side v, summed from the TVM trace's own events,
    scaled to the measurement (captures.cpu_profile_rows) and per launch (captures.unit_launches)."""
    _, _, calls, rows = cpu_profile_rows(out, doc, v)
    nodes = launch_nodes(calls, rows, list(doc["catalogs"][v]["kernels"].values()))
    return node_call_ns(calls, rows, unit_launches(doc, v, unit, nodes)) * 1e-9


def test_confirmation_recomputed_from_samples(analyzed):
    """Whole-graph share from the measured samples; a unit hybrid's judged share from the samples
    and the unit's per-call times in the CPU traces (scaled to the measurement, per launch)."""
    doc = json.loads((analyzed / "attribution.json").read_text())
    m = json.loads((analyzed / "run" / "measurement.json").read_text())["measurement"]["variants"]
    rows = [r for r in doc["confirmation"]["hybrids"] if r.get("recovered")]
    assert rows
    ta, tb = np.median(m["pool_fusion-on"]["samples_s"]), np.median(m["pool_fusion-off"]["samples_s"])
    units = {u["unit"]: u for u in doc["units"]}
    for r in rows:
        th = np.median(m[r["name"]]["samples_s"])
        graph = (ta - th) / (ta - tb) if r["base"] == "a" else (th - tb) / (ta - tb)
        assert r["recovered_graph"]["median"] == pytest.approx(graph)
        if r["kind"] == "passes":
            assert r["recovered"]["of"] == "graph" and r["recovered"]["median"] == pytest.approx(graph)
        else:
            u = units[r["unit"]]
            ua = np.median(_unit_calls(analyzed, doc, "a", u))
            ub = np.median(_unit_calls(analyzed, doc, "b", u))
            assert r["recovered"]["of"] == "unit"
            assert r["recovered"]["median"] == pytest.approx((th - ta) / (ub - ua), rel=1e-6)
        for rec in (r["recovered"], r["recovered_graph"]):
            assert rec["low"] <= rec["median"] <= rec["high"]
        assert r["verdict"] in ("confirmed", "refuted", "inconclusive")


def test_from_run_reproduces_the_attribution(analyzed, tmp_path):
    """The split path (analysis of a run directory) gives the same document as the one-host path."""
    copy = tmp_path / "pf"
    shutil.copytree(analyzed, copy)
    for f in ("attribution.json", "report.html", "report.md"):
        (copy / f).unlink()
    rc = cli.main(["analyze", ON, OFF, "--out", str(copy), "--from-run", str(copy / "run")])
    assert rc == 0
    first = json.loads((analyzed / "attribution.json").read_text())
    again = json.loads((copy / "attribution.json").read_text())
    assert again["command"].startswith("rootcause analyze ") and f"--from-run {copy / 'run'}" in again["command"]
    for doc, root in ((first, analyzed), (again, copy)):
        for key in ("run", "command", "measurement"):
            doc.pop(key)
        doc["notes"] = [n.replace(str(root), "OUT") for n in doc["notes"]]
        for v in "ab":
            for key in ("profile", "catalog"):
                doc["variants"][v].pop(key)
    assert first == again


def _printed_command(printed: str, prefix: str, run_dir: Path) -> list[str]:
    """The argv after 'rootcause' of the printed step that starts with prefix, RUN_DIR filled in."""
    line = next(x for x in printed.splitlines() if x.startswith(prefix))
    argv = shlex.split(line.split(":", 1)[1])
    assert argv[0] == "rootcause"
    return [str(run_dir) if a == "RUN_DIR" else a for a in argv[1:]]


def test_split_across_hosts_with_a_real_run(tmp_path, capsys):
    """The three steps --bundle-only prints, run as printed: analyze --bundle-only here, a real
    `rootcause run` of OUT/bundles/* (llvm bundles on this CPU, so it records no per-kernel
    profile), then analyze --from-run, which names the variants by their spec names."""
    out, run_dir = tmp_path / "staged", tmp_path / "RUN"
    rc = cli.main(["analyze", ON, OFF, "--target", "llvm", "--out", str(out), "--bundle-only", "--no-confirm"])
    assert rc == 0
    printed = capsys.readouterr().out
    plan = json.loads((out / "plan.json").read_text())
    assert set(plan["bundles"]) == {"pool_fusion-on", "pool_fusion-off"}
    run_argv = _printed_command(printed, "next, on the target host:", run_dir)
    assert run_argv[0] == "run" and sorted(run_argv[1:3]) == sorted(str(out / p) for p in plan["bundles"].values())
    assert cli.main([*run_argv, "--budget-s", "2"]) == 0
    measured = json.loads((run_dir / "measurement.json").read_text())
    assert set(measured["measurement"]["variants"]) == {"pool_fusion-on", "pool_fusion-off"}
    assert not any(p.get("file") for p in measured["profiles"].values())  # no GPU profiler here
    capsys.readouterr()

    assert cli.main(_printed_command(printed, "then here:", run_dir)) == 0
    doc = json.loads((out / "attribution.json").read_text())
    check(doc)
    assert (doc["variants"]["a"]["label"], doc["variants"]["b"]["label"]) == ("pool_fusion-on", "pool_fusion-off")
    m = json.loads((run_dir / "measurement.json").read_text())
    assert m == measured  # --from-run wrote nothing into RUN
    for v, name in (("a", "pool_fusion-on"), ("b", "pool_fusion-off")):
        samples = m["measurement"]["variants"][name]["samples_s"]
        assert doc["whole_graph"][v]["median"] == pytest.approx(np.median(samples) * 1e9)
        trace = json.loads(Path(doc["run"]["profiles"][name]["file"]).read_text())  # taken by --from-run, in OUT
        assert Path(doc["run"]["profiles"][name]["file"]).parent == (out / "cpu-profiles").resolve()
        assert doc["variants"][v]["calls"] == trace["otherData"]["calls"]
    assert any("took the CPU profiles of A and B on this host" in n for n in doc["run"]["notes"])
    assert doc["measurement"]["file"] == str(run_dir / "measurement.json")
    md = (out / "report.md").read_text()
    assert "pool\\_fusion-off" in md.splitlines()[0] and "Counterfactual hybrids" in md


@pytest.mark.parametrize("argv, needle", [
    ([str(ROOT / "no_such.toml"), OFF], "spec file not found"),
    ([f"{CASE}#nope", OFF], "no variant 'nope'"),
    ([ON, OFF, "--target", "tpu"], "unknown target"),
    ([ON, OFF, "--budget-s", "0"], "--budget-s"),
    ([ON, ON], "same as A's"),
])
def test_bad_input_exit_2(argv, needle, capsys, tmp_path):
    rc = cli.main(["analyze", *argv, "--out", str(tmp_path / "o")])
    assert rc == 2
    assert needle in _stderr_line(capsys)


def test_from_run_without_plan_exit_2(tmp_path, capsys):
    rc = cli.main(["analyze", ON, OFF, "--out", str(tmp_path / "none"), "--from-run", str(tmp_path)])
    assert rc == 2
    assert "plan.json" in _stderr_line(capsys)


def test_outputs_differ_exit_1(tmp_path, capsys):
    """A real variant whose reference is wrong (every output + 1): verification stops analyze."""
    (tmp_path / "wrong_reference.py").write_text(
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('ref', {str(CASE.parent / 'reference.py')!r})\n"
        "mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)\n"
        "def reference(x):\n    return tuple(o + 1 for o in mod.reference(x))\n")
    text = CASE.read_text().replace('source = "graph_tvmscript.py"',
                                    f'source = "{CASE.parent / "graph_tvmscript.py"}"\nallow_outside_paths = true')
    text = text.replace('python = "reference.py:reference"', 'python = "wrong_reference.py:reference"')
    spec = tmp_path / "variants.toml"
    spec.write_text(text)
    rc = cli.main(["analyze", f"{spec}#on", f"{spec}#off", "--target", "llvm", "--no-confirm",
                   "--budget-s", "1", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 1
    last = err.strip().splitlines()[-1]
    assert last.startswith("rootcause analyze: outputs differ") and "vs reference" in last
    record = json.loads((tmp_path / "o" / "run" / "measurement.json").read_text())["verification"]
    assert record["ok"] is False


def test_iree_einsum_on_local_task(tmp_path):
    """IREE llvm-cpu end to end (the einsum_fusion case's small reproducer): local-task host-execution profile."""
    einsum = ROOT / "fixtures" / "cases" / "einsum_fusion" / "variants.toml"
    out = tmp_path / "ein"
    rc = cli.main(["analyze", f"{einsum}#fused_small", f"{einsum}#unfused_small", "--out", str(out),
                   "--budget-s", "2"])
    assert rc == 0
    doc = json.loads((out / "attribution.json").read_text())
    check(doc)
    assert doc["variants"]["a"]["source"] == ["iree-profile"]
    run = json.loads((out / "run" / "measurement.json").read_text())
    assert run["profiles"]["einsum-fused-small"]["ok"] and run["verification"]["ok"]
    # different sources: no hybrid, and the report says why
    assert doc["confirmation"]["hybrids"] == [] and any("different sources" in n
                                                        for n in doc["confirmation"]["notes"])
