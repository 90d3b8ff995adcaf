"""The H200 capture of the two cross-version pairs (fixtures/captures/h200-2026-12-03-versions):
IREE 3.8.0 against 3.12.0 (cuda sm_80) and TVM 0.26.0 against 0.27.0.post1 (cuda sm_90), each
bundle run with its own runtime release, made on the host from the wheels it carried.

The truths are outside the run: the PTX each IREE release wrote (its `.entry` symbols), the
launch grids the GPU reported to CUPTI, the runtime versions the bundles' manifests ask for, and
the NumPy reference stored at build time (the verification)."""
import json
import re
import tarfile
from pathlib import Path

import pytest

from rootcause import envs

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = ROOT / "fixtures" / "captures" / "h200-2026-12-03-versions"
PAIRS = {"iree": ("iree_matmul512-v3_8_0", "iree_matmul512-v3_12_0"),
         "tvm": ("tvm_sort-v0_26_0", "tvm_sort-v0_27_0")}


def _member(name: str) -> bytes:
    with tarfile.open(CAPTURE / "run.tar.gz") as tar:
        return tar.extractfile(name).read()


def _manifest(bundle: str) -> dict:
    return json.loads((CAPTURE / "bundles" / bundle / "manifest.json").read_text())


def _records(pair: str, bundle: str) -> list[dict]:
    return json.loads(_member(f"run/{pair}/{bundle}.cupti.json"))


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_both_releases_verified_on_the_h200(pair: str) -> None:
    m = json.loads(_member(f"run/{pair}/measurement.json"))
    assert set(m["bundles"]) == set(PAIRS[pair])
    checks = m["verification"]["checks"]
    against = sorted(c["against"] for c in checks)
    # each side against the NumPy reference, and one side against the other (either way round)
    assert against.count("reference") == 2 and len(against) == 3 and set(against) - {"reference"} <= set(PAIRS[pair])
    assert all(o["ok"] for c in checks for o in c["outputs"])
    assert "H200" in json.dumps(json.loads(_member(f"run/{pair}/env.json")))
    timers = m["measurement"]["timers"]
    assert all("child process of" in timers[b] for b in PAIRS[pair])  # neither runtime is the host's


def test_each_bundle_ran_with_the_runtime_its_manifest_names() -> None:
    """envs.json lists the environments the host made from carried wheels; their runtime versions
    are exactly the ones the four manifests ask for."""
    made = json.loads((CAPTURE / "envs.json").read_text())
    dists = [{envs.normalize(Path(r).name.split("-")[0]) for r in row["requirements"]} for row in made.values()]
    got = sorted(tuple(sorted((d, row["packages"][d]) for d in names)) for row, names in zip(made.values(), dists))
    want = sorted(tuple(sorted(_manifest(b)["toolchain"]["runtime"].items())) for p in PAIRS.values() for b in p)
    assert got == want


@pytest.mark.parametrize("bundle", PAIRS["iree"])
def test_iree_kernels_are_the_dispatches_the_release_wrote(bundle: str) -> None:
    """CUPTI's kernel names on the H200 are the `.entry` symbols of the PTX that release emitted,
    one dispatch per call (the catalog's count)."""
    ptx = "".join(p.read_text() for p in (CAPTURE / "bundles" / bundle).glob("*.ptx"))
    entries = set(re.findall(r"\.entry\s+([A-Za-z_][A-Za-z0-9_]*)", ptx))
    records = _records("iree", bundle)
    calls = json.loads(_member("run/iree/measurement.json"))["profiles"][bundle]["calls"]
    assert records and {r["name"] for r in records} <= entries
    assert len(entries) == len(_manifest(bundle)["kernels"]) == 1
    assert len(records) == calls * len(entries)


def test_tvm_grids_on_the_gpu_are_each_releases_own() -> None:
    """The grid the H200 launched for each sort kernel is the one that release's catalog records:
    0.27 puts the 64 rows on x, 0.26 on y."""
    seen = {}
    for bundle in PAIRS["tvm"]:
        catalog = {k["name"]: k["launch"]["grid"] for k in _manifest(bundle)["kernels"]}
        grids = {}
        for r in _records("tvm", bundle):
            grids.setdefault(r["name"], set()).add((r["grid_x"], r["grid_y"], r["grid_z"]))
        assert set(grids) == set(catalog)
        for name, grid in catalog.items():
            if all(isinstance(d, int) for d in grid):
                assert grids[name] == {tuple(grid)}
        seen[bundle] = grids["sort_kernel"]
    assert seen == {"tvm_sort-v0_26_0": {(4, 64, 1)}, "tvm_sort-v0_27_0": {(64, 4, 1)}}
