"""`rootcause sweep --ray ADDRESS` on a real multi-node Ray cluster in one machine (Ray's own
cluster utilities: a head that runs no task and worker nodes with their own object stores, CPU
counts, build caches and temporary folders), and a node lost in the middle of a sweep.

The pairs are the npgraph plug-in's (tests/plugins: NumPy stages, unfused against fused), so
stages take a second and the test measures Ray's placement, not a compiler. One worker
advertises a GPU and the resource 'cuda:sm_90'; CI has no GPU, so that pair's run stage is the
stand-in: npgraph's runtime is NumPy, the stage records the node it ran on, its CUPTI profile
fails (no cupti-python) and the pair stops at attribution with that one line, as it does in a
sequential run. Which node ran each stage comes from the stages' own records (ran_on.ray_node).
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from plugin_site import activate, install, write_case  # noqa: E402
from rootcause import cli  # noqa: E402
from rootcause.artifacts import sweep as records  # noqa: E402

pytestmark = pytest.mark.slow  # the slow tier (README): minutes of builds and analyses

STORE = 100 * 2**20  # each node's object store: the smallest Ray takes
GPU = {"num_gpus": 1, "resources": {"cuda:sm_90": 1}}


def _sweep_file(root: Path, targets: list[str]) -> Path:
    for k in range(len(targets)):
        write_case(root / f"c{k}", shape=(128 + 64 * k, 256), seed=k)
    pairs = "".join(f'\n[[pair]]\na = "c{k}/variants.toml#unfused"\nb = "c{k}/variants.toml#fused"\n'
                    f'target = "{t}"\n' for k, t in enumerate(targets))
    path = root / "sweep.toml"
    path.write_text('[sweep]\nname = "cluster"\nbudget_s = 0.3\nhybrids = 0\nprofile_calls = 3\n' + pairs)
    return path


@pytest.fixture
def plugin_env(tmp_path, monkeypatch):
    """The plug-in on every process's path; the environment every node is started with."""
    activate(install(tmp_path / "site"), monkeypatch)
    monkeypatch.setenv("ROOTCAUSE_CACHE", str(tmp_path / "cache-driver"))
    return tmp_path


def _add_node(cluster: Cluster, root: Path, name: str, monkeypatch, **resources):
    """A worker node with its own build cache and temporary folder (its processes inherit the
    environment the node starts with): nothing it does can rely on another node's files."""
    for var, folder in (("ROOTCAUSE_CACHE", root / f"cache-{name}"), ("TMPDIR", root / f"tmp-{name}")):
        folder.mkdir()
        monkeypatch.setenv(var, str(folder))
    node = cluster.add_node(object_store_memory=STORE, **resources)
    monkeypatch.setenv("ROOTCAUSE_CACHE", str(root / "cache-driver"))
    monkeypatch.delenv("TMPDIR")
    return node


@pytest.fixture
def cluster():
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "object_store_memory": STORE})
    yield c
    ray.shutdown()
    c.shutdown()


def _stage_nodes(out: Path) -> dict[str, dict[str, str | None]]:
    """pair id -> {stage: the Ray node its record says it ran on}."""
    found = {}
    for folder in (out / "pairs").iterdir():
        nodes = {}
        for stage, path in (("build", folder / records.BUILD_RECORD), ("run", folder / "run" / records.RUN_RECORD),
                            ("attribute", folder / records.RESULT)):
            doc = json.loads(path.read_text()) if path.is_file() else {}
            if "ran_on" in doc:  # a failed pair's result is the driver's record, not a stage's
                nodes[stage] = doc["ran_on"]["ray_node"]
        found[folder.name] = nodes
    return found


def _rows(out: Path) -> dict[str, dict]:
    return {r["id"]: r for r in json.loads((out / "sweep.json").read_text())["rows"]}


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def test_stages_spread_over_nodes_and_runs_go_where_the_target_is(plugin_env, cluster, monkeypatch, capsys):
    root = plugin_env
    cpu_a = _add_node(cluster, root, "a", monkeypatch, num_cpus=2)
    cpu_b = _add_node(cluster, root, "b", monkeypatch, num_cpus=1)
    gpu = _add_node(cluster, root, "gpu", monkeypatch, num_cpus=1, **GPU)
    cluster.wait_for_nodes()
    sweep = _sweep_file(root / "case", ["llvm", "llvm", "llvm", "llvm", "cuda:sm_90"])
    out_ray, out_seq = root / "ray", root / "seq"
    assert cli.main(["sweep", str(sweep), "--ray", cluster.address, "--out", str(out_ray)]) == 0
    assert not list((root / "cache-driver").glob("builds/*"))  # the driver built nothing
    assert cli.main(["sweep", str(sweep), "--out", str(out_seq)]) == 0

    nodes = _stage_nodes(out_ray)
    workers = {cpu_a.node_id, cpu_b.node_id, gpu.node_id}
    ran = [n for stages in nodes.values() for n in stages.values()]
    assert set(ran) <= workers and None not in ran  # every stage a task on a worker node, none on the head
    assert len({stages["build"] for stages in nodes.values()}) >= 2, nodes  # builds on several nodes
    for pid, stages in nodes.items():
        if pid.endswith("cuda_sm_90"):
            assert stages["run"] == gpu.node_id, stages  # only the node with the target's resource
    # each node built with its own cache: a build it ran left its entry there, none elsewhere
    for name, node in (("a", cpu_a), ("b", cpu_b), ("gpu", gpu)):
        built_here = sum(stages["build"] == node.node_id for stages in nodes.values())
        entries = list((root / f"cache-{name}" / "builds").glob("*")) if (root / f"cache-{name}").is_dir() else []
        assert (len(entries) > 0) == (built_here > 0), (name, built_here, entries)

    # the published folders are a sequential run's: the same files, the same rows
    seq_rows, ray_rows = _rows(out_seq), _rows(out_ray)
    assert seq_rows.keys() == ray_rows.keys()
    for pid, row in seq_rows.items():
        got = ray_rows[pid]
        assert (got["status"], got["stage"]) == (row["status"], row["stage"]), pid
        # the same error, naming the pair's published folder (not a worker's copy)
        assert (got["error"] or "").replace(str(out_ray), "OUT") == (row["error"] or "").replace(str(out_seq), "OUT")
        assert _files(out_ray / "pairs" / pid) == _files(out_seq / "pairs" / pid), pid
        for bundle in (out_seq / "pairs" / pid / "bundles").iterdir():
            mine = json.loads((out_ray / "pairs" / pid / "bundles" / bundle.name / "manifest.json").read_text())
            theirs = json.loads((bundle / "manifest.json").read_text())
            assert mine["kernels"] == theirs["kernels"] and mine["cache_key"] == theirs["cache_key"]
    gpu_row = ray_rows[next(p for p in ray_rows if p.endswith("cuda_sm_90"))]
    assert gpu_row["stage"] == "attribute" and "cupti-python is not installed" in gpu_row["error"]


def test_a_node_lost_mid_sweep(plugin_env, cluster, monkeypatch):
    """The only worker, which is also the only GPU node, is killed once the first pair's build
    is published, just after a CPU node joins. The tasks in flight on the lost node are retried
    where they can run, the sweep completes, every pair folder is whole and of one pair, and the
    GPU pair, whose only capable node is gone, fails with one line that says so."""
    root = plugin_env
    first = _add_node(cluster, root, "gpu", monkeypatch, num_cpus=1, **GPU)
    cluster.wait_for_nodes()
    sweep = _sweep_file(root / "case", ["cuda:sm_90", "llvm", "llvm", "llvm"])
    out = root / "ray"
    # the driver is a process of its own, as a user's is: Ray adds and removes nodes only from
    # the main thread of this one
    driver = subprocess.Popen([sys.executable, "-m", "rootcause", "sweep", str(sweep), "--ray", cluster.address,
                               "--out", str(out), "--max-in-flight", "2", "--max-retries", "3"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list((out / "pairs").glob(f"*/{records.BUILD_RECORD}")):
        time.sleep(0.05)
    later = _add_node(cluster, root, "a", monkeypatch, num_cpus=1)
    cluster.remove_node(first, allow_graceful=False)
    output, _ = driver.communicate(timeout=300)
    assert driver.returncode == 0, output[-3000:]  # a failed pair is a row of the sweep, not its failure
    rows = _rows(out)
    cpu = {pid: row for pid, row in rows.items() if pid.endswith("llvm")}
    assert len(cpu) == 3 and all(row["status"] == "ok" for row in cpu.values()), cpu
    (gpu_row,) = [row for pid, row in rows.items() if pid.endswith("cuda_sm_90")]
    assert (gpu_row["status"], gpu_row["stage"]) == ("failed", "run"), gpu_row
    assert "no node of the Ray cluster offers 'cuda:sm_90' any more" in gpu_row["error"]
    assert "\n" not in gpu_row["error"]
    nodes = _stage_nodes(out)
    assert any(first.node_id in stages.values() for stages in nodes.values())  # work before the loss
    assert all(set(nodes[pid].values()) - {first.node_id} <= {later.node_id} for pid in cpu)
    assert any(later.node_id in stages.values() for stages in nodes.values())  # and after it
    for pid in cpu:  # each folder whole and its own: every record of this pair, every bundle there
        folder = out / "pairs" / pid
        for path in (folder / records.BUILD_RECORD, folder / "run" / records.RUN_RECORD):
            assert json.loads(path.read_text())["pair"] == pid
        assert json.loads((folder / records.RESULT).read_text())["row"]["id"] == pid
        plan = json.loads((folder / "plan.json").read_text())
        assert all((folder / rel / "manifest.json").is_file() for rel in plan["bundles"].values())
