"""Import speed: N events of every profile format into KernelEvents, judged on CPU time.

Formats: CUPTI JSON, Kineto/Chrome JSON (plain and .json.gz), ncu raw and details CSV,
rocprofv3 CSV, iree-profile JSONL and nsys SQLite. The large inputs replicate real captured
records (fixtures/captures/), shifting timestamps and renumbering ids so the copies follow each
other; no field is invented. Where no capture of a format exists here (nsys, ncu details) the
rows are the real CUPTI / ncu raw records laid out in the documented schema (tests/mutation.py
builds the same small ones for the tests). N counts trace events: for Chrome that is
N/3 launches (cpu_op, cudaLaunchKernel, kernel, as the HTA excerpt has them), for ncu details
N/6 kernels of 6 metric rows.

Each import runs in a fresh process, so its peak RSS (ru_maxrss) and CPU time (user + system)
are its own. The goal is <= 10 s CPU and <= 2 GB peak RSS per reader; on a shared machine wall
time moves with the other load, so CPU time is what is judged (wall is printed beside it).

    .venv/bin/python benchmarks/bench_import.py [--n 1000000] [--formats cupti,chrome,...] [--keep DIR]
        [--root TREE] [--repeat K]

With --keep, inputs already in DIR are reused (not regenerated). --repeat K imports each input
K times and reports the least CPU time (the run least disturbed by other load). --root imports rootcause and
parsers from another checkout (to measure a baseline: `git worktree` or `git archive` of it).
A tree's compiled modules (parsers/_ncu_cut for ncu raw) count only where built in that tree.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "fixtures" / "captures"
CUPTI = CAPTURES / "h200-2026-12-02" / "tvm_pool_fusion.cupti.json"
NCU = CAPTURES / "h200-2026-12-02" / "tvm_pool_fusion.ncu-raw.csv"
ROCPROF = CAPTURES / "rocprofv3" / "kernel_trace.sdk-481f7ff.csv"
CHROME = CAPTURES / "chrome" / "hta_backward_thread.json"
IREE = CAPTURES / "iree-3.13-local-task" / "two_matmuls.dispatch.jsonl"
RUN_CUPTI = CAPTURES / "h200-2026-12-02-run" / "pool_fusion_on.cupti.json"


def make_cupti(path: Path, n: int) -> None:
    """The 440 real records repeated; start/end/completed shifted by the capture's span."""
    records = json.loads(CUPTI.read_text())
    base = min(r["start"] for r in records)
    span = max(r["end"] for r in records) - base + 1000
    templates = []  # (text pieces, original values of the placeholders between them)
    for r in records:
        body = json.dumps({**r, "start": "@start", "end": "@end", "completed": "@completed"})
        parts = re.split(r'"@(start|end|completed)"', body)
        templates.append((parts[0::2], [r[k] for k in parts[1::2]]))
    with open(path, "w") as f:
        f.write("[")
        for i in range(n):
            pieces, values = templates[i % len(templates)]
            shift = (i // len(templates)) * span
            text = pieces[0] + "".join(f"{v + shift}{p}" for v, p in zip(values, pieces[1:]))
            f.write(("," if i else "") + text)
        f.write("]")


def make_ncu(path: Path, n: int) -> None:
    """The real ==PROF== lines, header and units rows, then the 66 kernel rows repeated with
    renumbered IDs (ncu has no timestamps to shift)."""
    lines = NCU.read_text().splitlines(keepends=True)
    head = next(i for i, line in enumerate(lines) if line.startswith('"ID",'))
    rows = lines[head + 2:]
    tails = [row[row.index(",") :] for row in rows]
    with open(path, "w") as f:
        f.writelines(lines[:head + 2])
        for i in range(n):
            f.write(f'"{i}"{tails[i % len(tails)]}')


def make_rocprof(path: Path, n: int) -> None:
    rows = list(csv.reader(ROCPROF.open()))
    header, body = rows[0], rows[1:]
    si, ei = header.index("Start_Timestamp"), header.index("End_Timestamp")
    base = min(int(r[si]) for r in body)
    span = max(int(r[ei]) for r in body) - base + 1000
    out = io.StringIO()
    w = csv.writer(out, quoting=csv.QUOTE_NONNUMERIC)
    with open(path, "w") as f:
        f.write(",".join(f'"{h}"' for h in header) + "\n")
        for i in range(n):
            r = list(body[i % len(body)])
            shift = (i // len(body)) * span
            r[si], r[ei] = str(int(r[si]) + shift), str(int(r[ei]) + shift)
            f.write(",".join(v if v.lstrip("-").isdigit() else f'"{v}"' for v in r) + "\n")
    del w, out


def make_chrome(path: Path, n: int) -> None:
    """A Kineto trace: the HTA excerpt's header keys and deviceProperties, then its aten::mm
    cpu_op, cudaLaunchKernel and CUTLASS kernel repeated (ts shifted, External id and
    correlation renumbered), a ProfilerStep#N user_annotation every 1000 launches."""
    events = json.loads(CHROME.read_text())["traceEvents"]
    op = next(e for e in events if e["name"] == "aten::mm")
    launch = next(e for e in events if e["name"] == "cudaLaunchKernel")
    kernel = next(e for e in events if e["cat"] == "kernel")
    step = next(e for e in events if e["name"].startswith("ProfilerStep#"))
    gap = 50  # us between launches
    with open(path, "w") as f:
        f.write('{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", '
                '"computeMajor": 8, "computeMinor": 0}], "distributedInfo": {"backend": "nccl", "rank": 0, '
                '"world_size": 1}, "traceEvents": [')
        first = True
        for i in range(n // 3):
            shift = i * gap
            ext, corr = op["args"]["External id"] + i, kernel["args"]["correlation"] + i
            rows = [{**op, "ts": op["ts"] + shift, "args": {**op["args"], "External id": ext}},
                    {**launch, "ts": launch["ts"] + shift, "args": {**launch["args"], "External id": corr, "correlation": corr}},
                    {**kernel, "ts": kernel["ts"] + shift, "args": {**kernel["args"], "External id": corr, "correlation": corr}}]
            if i % 1000 == 0:
                rows.append({**step, "name": f"ProfilerStep#{i // 1000}", "ts": step["ts"] + shift, "dur": 1000 * gap})
            f.write(("" if first else ",") + ",".join(json.dumps(r) for r in rows))
            first = False
        f.write('], "traceName": "bench.pt.trace.json"}')


def make_chrome_gz(path: Path, n: int) -> None:
    import gzip

    plain = path.with_suffix("")
    make_chrome(plain, n)
    with open(plain, "rb") as src, gzip.open(path, "wb", compresslevel=6) as dst:
        while chunk := src.read(1 << 24):
            dst.write(chunk)
    plain.unlink()


def make_iree(path: Path, n: int) -> None:
    """The 24 real host_dispatch_event rows repeated, times shifted by the capture's span."""
    rows = [json.loads(line) for line in IREE.read_text().splitlines()]
    rows = [r for r in rows if r.get("type") == "host_dispatch_event"]
    base = min(r["start_host_time_ns"] for r in rows)
    span = max(r["end_host_time_ns"] for r in rows) - base + 1000
    with open(path, "w") as f:
        for i in range(n):
            r, shift = rows[i % len(rows)], (i // len(rows)) * span
            f.write(json.dumps({**r, "event_id": i, "start_host_time_ns": r["start_host_time_ns"] + shift,
                                "end_host_time_ns": r["end_host_time_ns"] + shift}, separators=(",", ":")) + "\n")


def make_nsys(path: Path, n: int) -> None:
    """The real CUPTI records of the H200 run in the nsys export schema, repeated n rows."""
    sys.path.insert(0, str(ROOT / "tests"))
    from mutation import nsys_db

    records = json.loads(RUN_CUPTI.read_text())
    base = min(r["start"] for r in records)
    span = max(r["end"] for r in records) - base + 1000
    many = []
    for i in range(n):
        r, shift = records[i % len(records)], (i // len(records)) * span
        many.append({**r, "start": r["start"] + shift, "end": r["end"] + shift, "correlation_id": i})
    if path.exists():
        path.unlink()
    nsys_db(path, many)


def make_ncu_details(path: Path, n: int) -> None:
    """The real raw page's kernels as a details page (tests/mutation.ncu_details), n rows."""
    sys.path.insert(0, str(ROOT / "tests"))
    from mutation import ncu_details

    small = ncu_details(NCU.read_text()).splitlines(keepends=True)
    head = next(i for i, line in enumerate(small) if line.startswith('"ID",'))
    rows = small[head + 1:]
    per_kernel = sum(1 for r in rows if r.startswith(rows[0].split(",", 1)[0] + ","))
    with open(path, "w") as f:
        f.writelines(small[:head + 1])
        for i in range(n):
            row = rows[i % len(rows)]
            kernel = (i // len(rows)) * (len(rows) // per_kernel) + (i % len(rows)) // per_kernel
            f.write(f'"{kernel}"{row[row.index(","):]}')


MAKERS = {"cupti": (make_cupti, ".json"), "chrome": (make_chrome, ".json"), "chrome-gz": (make_chrome_gz, ".json.gz"),
          "ncu": (make_ncu, ".csv"), "ncu-details": (make_ncu_details, ".csv"), "rocprof": (make_rocprof, ".csv"),
          "iree-profile": (make_iree, ".jsonl"), "nsys": (make_nsys, ".sqlite")}
# the loader's format name for each input
FORMAT = {"chrome-gz": "auto", "ncu-details": "ncu"}


def import_once(path: str, fmt: str, root: str) -> None:
    """Child process: one import, then seconds and peak RSS as JSON on stdout."""
    sys.path.insert(0, root)
    from rootcause.profilers import load

    def cpu() -> float:
        use = resource.getrusage(resource.RUSAGE_SELF)
        return use.ru_utime + use.ru_stime

    t0, c0 = time.perf_counter(), cpu()
    ev = load(path, format=FORMAT.get(fmt, fmt))
    seconds, cpu_s = time.perf_counter() - t0, cpu() - c0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"format": fmt, "rows": len(ev), "seconds": seconds, "cpu_s": cpu_s, "peak_rss_mb": rss_mb}))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--formats", default=",".join(MAKERS))
    p.add_argument("--root", default=str(ROOT), help="checkout whose rootcause/parsers are measured")
    p.add_argument("--repeat", type=int, default=1,
                   help="imports per format (fresh processes); the least CPU time is reported, as the "
                        "figure least disturbed by other load")
    p.add_argument("--keep", type=Path, help="write the generated inputs here (default: a temp dir, deleted)")
    p.add_argument("--child", nargs=3, metavar=("PATH", "FORMAT", "ROOT"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        import_once(*args.child)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        out = args.keep or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        for fmt in args.formats.split(","):
            make, ext = MAKERS[fmt]
            path = out / f"bench_{fmt}_{args.n}{ext}"
            t0 = time.perf_counter()
            if not (args.keep and path.exists()):
                make(path, args.n)
            gen = time.perf_counter() - t0
            runs = []
            for _ in range(args.repeat):
                res = subprocess.run([sys.executable, __file__, "--child", str(path), fmt, args.root],
                                     capture_output=True, text=True)
                if res.returncode:
                    break
                runs.append(json.loads(res.stdout))
            if res.returncode:
                print(f"{fmt}: import failed: {res.stderr.strip().splitlines()[-1]}")
                continue
            r = min(runs, key=lambda run: run["cpu_s"])
            if r["peak_rss_mb"] >= 2048 or r["cpu_s"] >= 10:
                ok = "OVER GOAL (10 s, 2 GB)"
            else:  # wall time over the goal with CPU time under it: the machine is shared
                ok = "ok" if r["seconds"] < 10 else "ok on CPU time, wall over 10 s (machine busy)"
            print(f"{fmt:12s} {r['rows']:>9,d} rows  {path.stat().st_size / 2**20:8.0f} MiB input  "
                  f"{r['seconds']:6.2f} s wall {r['cpu_s']:6.2f} s CPU  peak RSS {r['peak_rss_mb']:7.0f} MiB  {ok}  (generated in {gen:.1f} s)")
            if not args.keep:
                path.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
