"""The real captures and builds that the align, attribute, diagnose and report tests check
against, loaded one way: the H200 CUPTI capture of the pool_fusion case (fixtures/captures/h200-2026-12-02/,
20 calls of FuseOps ON then 20 of OFF, PROVENANCE.md there), the `rootcause run` directories
beside it, and the prefill_dedup case's IREE builds."""
from __future__ import annotations

import copy
import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CAPTURE = ROOT / "fixtures/captures/h200-2026-12-02/tvm_pool_fusion.cupti.json"
RUN = ROOT / "fixtures/captures/h200-2026-12-02-run"
NCU_RUN = RUN / "ncu"  # the same bundles under ncu, one profiled call per variant
CATALOGS = ROOT / "gallery/inputs"
PREFILL = ROOT / "fixtures/cases/prefill_dedup/variants.toml"


def pool_segments():
    """(OFF, ON) events of the shared capture: its two call segments (split_calls), told apart
    by the fused kernel."""
    from rootcause.profilers import load, split_calls

    ev = split_calls(load(CAPTURE))
    segs = [g.reset_index(drop=True) for _, g in ev.groupby("segment")]
    on = next(g for g in segs if (g.kernel == "fused_pool2d_add2_kernel").any())
    off = next(g for g in segs if not (g.kernel == "fused_pool2d_add2_kernel").any())
    return off, on


def raw_records() -> list[dict[str, Any]]:
    return json.loads(CAPTURE.read_text())


def raw_calls() -> tuple[list[list[dict]], list[list[dict]]]:
    """(OFF calls, ON calls) as record lists straight from the JSON, by start time: the first 60
    records are 20 ON calls of 3, the next 380 are 20 OFF calls of 19 (PROVENANCE.md)."""
    recs = sorted(raw_records(), key=lambda r: r["start"])
    on, off = recs[:60], recs[60:]
    return [off[i:i + 19] for i in range(0, 380, 19)], [on[i:i + 3] for i in range(0, 60, 3)]


def call_interval(calls: list[list[dict]]) -> float:
    """Median time from one call's first record to the next call's: what a call costs a loop,
    host included (how compare times calls it finds itself)."""
    import statistics

    starts = [min(x["start"] for x in c) for c in calls]
    return statistics.median(b - a for a, b in zip(starts, starts[1:]))


def rootcause_cli(*args: Any) -> subprocess.CompletedProcess:
    """`python -m rootcause ARGS` from the repository root, output captured."""
    return subprocess.run([sys.executable, "-m", "rootcause", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT)


def compare_shared(out: Path, *extra: Any) -> Path:
    """`rootcause compare` of the shared capture, OFF (#1) against ON (#0), with the committed
    catalogs; returns attribution.json."""
    r = rootcause_cli("compare", f"{CAPTURE}#1", f"{CAPTURE}#0",
                      "--catalog-a", CATALOGS / "pool_fusion_off.manifest.json",
                      "--catalog-b", CATALOGS / "pool_fusion_on.manifest.json",
                      "--label-a", "OFF", "--label-b", "ON", *extra, "--out", out)
    assert r.returncode == 0, r.stderr
    return Path(out) / "attribution.json"


def many_units(doc: dict[str, Any], n: int) -> dict[str, Any]:
    """A large attribution: the real units replicated n times under new kernel names."""
    out = copy.deepcopy(doc)
    base = out["units"]
    units = []
    for i in range(n):
        u = copy.deepcopy(base[i % len(base)])
        u["unit"] = i
        u["kernels_a"] = [f"{k}_{i}" for k in u["kernels_a"]]
        u["kernels_b"] = [f"{k}_{i}" for k in u["kernels_b"]]
        units.append(u)
    out["units"] = units
    return out


def build_prefill(tmp_path_factory) -> dict[str, tuple[Any, Path]]:
    """the prefill_dedup case built for real (IREE 3.13): prefill_bs8 alone and in the module with prefill_bs2;
    variant -> (BuildOutput, build directory)."""
    from rootcause import spec
    from rootcause.frontends.iree import build as iree

    out = {}
    for v in ("alone", "dedup"):
        d = tmp_path_factory.mktemp(v)
        out[v] = (iree.build(spec.load(f"{PREFILL}#{v}"), d), d)
    return out


def ncu_rows(name: str, run: Path = NCU_RUN) -> list[tuple[str, float]]:
    """(kernel, duration ns) per kernel row of RUN/<name>.ncu.csv, read with the csv module."""
    rows = [r for r in csv.reader((run / f"{name}.ncu.csv").open()) if r and not r[0].startswith("==")]
    head, units = rows[0], rows[1]
    col = head.index("gpu__time_duration.sum")
    assert units[col] == "ns"
    return [(r[head.index("Kernel Name")], float(r[col].replace(",", ""))) for r in rows[2:]]


def run_launches(run: Path, variant: str) -> tuple[int, list[tuple[int, str, int, int]]]:
    """(profiled calls, rows) of a `rootcause run` directory's CUPTI records of `variant`, a row being
    (call, kernel, ordinal of the launch among that kernel's launches in its call, duration ns); the call
    is the last of the run's call_starts_ns at or before the record's start."""
    import bisect
    from collections import Counter

    info = json.loads((run / "measurement.json").read_text())["profiles"][variant]
    starts = sorted(info["call_starts_ns"])
    seen: Counter = Counter()
    rows = []
    for r in sorted(json.loads((run / info["file"]).read_text()), key=lambda r: r["start"]):
        call = bisect.bisect_right(starts, r["start"]) - 1
        assert call >= 0, (variant, r)
        seen[call, r["name"]] += 1
        rows.append((call, r["name"], seen[call, r["name"]] - 1, r["end"] - r["start"]))
    return len(starts), rows


def launch_nodes(calls: int, rows: list[tuple[int, str, int, int]],
                 catalog: list[dict[str, Any]]) -> dict[tuple[str, int | None], tuple[str, ...]]:
    """(kernel, ordinal) -> the source ops those launches compute, from the catalog and the raw
    launches: a kernel whose catalog entry lists n > 1 distinct ops and that every call launches
    exactly n times is n nodes, its i-th launch in a call computing the i-th op (the VM runs the
    bindings in order); any other kernel is one node (kernel, None) covering all its ops."""
    from collections import Counter

    counts = Counter((c, k) for c, k, _, _ in rows)
    nodes: dict[tuple[str, int | None], tuple[str, ...]] = {}
    for k in catalog:
        ops = tuple(k["source_ops"])
        if len(ops) > 1 and len(set(ops)) == len(ops) and all(counts[c, k["name"]] == len(ops) for c in range(calls)):
            nodes.update({(k["name"], i): (op,) for i, op in enumerate(ops)})
        else:
            nodes[(k["name"], None)] = ops
    return nodes


def node_call_ns(calls: int, rows: list[tuple[int, str, int, int]], nodes: set) -> Any:
    """ns per call of the launches of `nodes` ((kernel, ordinal) or (kernel, None): every launch)."""
    import numpy as np

    out = np.zeros(calls)
    for call, kernel, i, dur in rows:
        if (kernel, i) in nodes or (kernel, None) in nodes:
            out[call] += dur
    return out


def unit_launches(doc: dict[str, Any], v: str, unit: dict[str, Any],
                  nodes: dict[tuple[str, int | None], tuple[str, ...]]) -> set:
    """The launch nodes (launch_nodes) of `unit` on side `v` of an attribution: a kernel the unit
    alone lists, every launch; a kernel several units list, the launches of the ops this unit covers."""
    mine = set()
    for k in unit[f"kernels_{v}"]:
        if sum(k in u[f"kernels_{v}"] for u in doc["units"]) == 1:
            mine.add((k, None))
        else:
            mine |= {(n, i) for n, i in nodes if n == k and i is not None and nodes[n, i][0] in unit["source_ops"]}
    return mine


def cpu_profile_rows(out: Path, doc: dict[str, Any], v: str, repeat: bool = False
                     ) -> tuple[float, float, int, list[tuple[int, str, int, int]]]:
    """(measured median ns, scale, calls, rows as run_launches gives them) of side `v` of an llvm
    `rootcause analyze` folder: the CPU profile's Chrome trace, each duration scaled (and rounded to
    the ns, as attribute does) by the measured median (run/measurement.json samples) over the median
    of the profile session's own timed calls (cpu-profiles/profiles.json 'timed_ns'). repeat: the
    second profile of that side (the record's 'repeat', in cpu-profiles/repeat/)."""
    from collections import Counter

    import numpy as np

    name = doc["variants"][v]["label"]
    record = json.loads((out / "cpu-profiles" / "profiles.json").read_text())["records"][name]
    record = record["repeat"] if repeat else record
    trace = json.loads((out / "cpu-profiles" / record["file"]).read_text())["traceEvents"]
    samples = json.loads((out / "run" / "measurement.json").read_text())["measurement"]["variants"][name]["samples_s"]
    whole = float(np.median(samples)) * 1e9
    scale = whole / float(np.median(record["timed_ns"]))
    seen: Counter = Counter()
    rows = []
    for e in sorted(trace, key=lambda e: e["ts"]):
        call = e["args"]["call"]
        seen[call, e["name"]] += 1
        rows.append((call, e["name"], seen[call, e["name"]] - 1, round(round(e["dur"] * 1000) * scale)))
    return whole, scale, record["calls"], rows
