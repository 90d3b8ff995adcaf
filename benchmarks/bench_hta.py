"""Benchmark: `rootcause compare` against Holistic Trace Analysis' TraceDiff on a ladder of trace
sizes, side by side, each as a user runs it (a whole process: imports, parsing, the comparison;
rootcause also writes its three reports). CPU seconds (user + system, median of --repeat runs,
the two tools interleaved) and peak RSS, read per child with os.wait4.

Both tools build pandas tables, so neither runs in less than a Python that imports pandas (with
NumPy). That floor is timed in the same rounds (a third child, in rootcause's environment), and
"best" is HTA's CPU over it: the most HTA / rootcause could be for a compare that did no work
past that import. Where best is under 2, no compare built on pandas is 2x HTA's speed at that rung.
"past floor" compares the two tools' own work: HTA's CPU past that import over rootcause's.

The pairs are published traces (fixtures/captures/published-traces, PROVENANCE.md there), one
model on two GPUs or two configurations, about 1, 3, 10 and 34 MB of JSON a trace; the largest
rung is the 2021 TensorBoard-plugin pair made longer (benchmarks/bench_traces.enlarge, in a child,
so that this process stays small: a child's peak RSS starts from its parent's) to about 60 MB a
trace. Each tool runs once untimed per pair, with bytecode writing allowed, so the timed runs
load compiled modules as an installed tool does after its first run (an editable install
compiles its sources at first import, and PYTHONDONTWRITEBYTECODE=1 would make it do so at every
run: a third of a small compare). HTA runs in an environment of its own (its pins are not
rootcause's):

    python3 -m venv /tmp/hta && /tmp/hta/bin/pip install HolisticTraceAnalysis
    python benchmarks/bench_hta.py --hta-python /tmp/hta/bin/python --work /tmp/bench_hta
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "fixtures" / "captures" / "published-traces"
LADDER = {
    "bert h100/mi300": (PUBLISHED / "tracelens/h100.gaunernst_bert-small-uncased__1016001.json.gz",
                        PUBLISHED / "tracelens/mi300.gaunernst_bert-small-uncased__1016001.json.gz"),
    "vit h100/mi300": (PUBLISHED / "tracelens/h100.Falconsai_nsfw_image_detection__1016002.json.gz",
                       PUBLISHED / "tracelens/mi300.Falconsai_nsfw_image_detection__1016002.json.gz"),
    "qwen h100/mi300": (PUBLISHED / "tracelens/h100.Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
                        PUBLISHED / "tracelens/mi300.Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"),
    "hta trace_diff": (PUBLISHED / "hta/trace_diff.control.json.gz", PUBLISHED / "hta/trace_diff.test.json.gz"),
}
ENLARGED = ("resnet50 workers 0/4, longer",
            (ROOT / "fixtures/captures/kineto-2021-tb-plugin/resnet50_num_workers_0.worker0.1623143089861.pt.trace.json.gz",
             ROOT / "fixtures/captures/kineto-2021-tb-plugin/resnet50_num_workers_4.worker0.1623212756351.pt.trace.json.gz"))

HTA_DIFF = """
import os, sys
from hta.common.trace import Trace
from hta.trace_diff import TraceDiff

def load(path):
    trace = Trace(trace_files={0: os.path.abspath(path)}, trace_dir=os.path.dirname(os.path.abspath(path)))
    trace.parse_traces()
    return trace

TraceDiff.compare_traces(load(sys.argv[1]), load(sys.argv[2]))
"""
PANDAS_FLOOR = "import pandas"


# the children's environment: bytecode is written and read as on a user's machine
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def child(cmd: list[str], log: Path) -> tuple[float, float, int]:
    """(CPU s, wall s, peak RSS MiB) of one child process, from its own rusage; its stderr in log."""
    t0 = time.perf_counter()
    with open(log, "wb") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=ENV)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip()[-400:]
        raise SystemExit(f"{' '.join(cmd[:3])} failed ({proc.returncode}): {tail}")
    return usage.ru_utime + usage.ru_stime, wall, usage.ru_maxrss // 1024


def pairs(work: Path, mb: float) -> list[tuple[str, Path, Path]]:
    out = [(label, a, b) for label, (a, b) in LADDER.items()]
    label, (a, b) = ENLARGED
    big = [work / f"enlarged-{i}.json" for i in (0, 1)]
    for src, dst in zip((a, b), big):
        if not dst.is_file():  # in a child: this process stays small, so a child's peak RSS is its own
            subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                            "from bench_traces import enlarge; enlarge(*map(__import__('pathlib').Path, "
                            "sys.argv[2:4]), float(sys.argv[4]))", str(Path(__file__).parent), str(src), str(dst),
                            repr(mb)], check=True)
    return out + [(label, *big)]


def json_mb(path: Path) -> float:
    if path.suffix != ".gz":
        return path.stat().st_size / 1e6
    import gzip

    with gzip.open(path, "rb") as f:
        return sum(len(chunk) for chunk in iter(lambda: f.read(1 << 20), b"")) / 1e6


def _past(hta: float, rc: float, floor: float) -> str:
    """HTA's CPU past the pandas floor over rootcause's; 'n/a' where rootcause's is not above it."""
    return f"{(hta - floor) / (rc - floor):.2f}" if rc > floor else "n/a"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hta-python", required=True, help="a python with HolisticTraceAnalysis installed")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--mb", type=float, default=60.0, help="JSON size of each trace of the enlarged pair")
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    exe = shutil.which("rootcause") or str(Path(sys.executable).parent / "rootcause")
    python = Path(exe).parent / "python"  # rootcause's environment: its pandas
    print(f"{'pair':32} {'MB a side':>11} {'rootcause CPU s':>16} {'HTA CPU s':>10} {'HTA/rc':>7} "
          f"{'pandas import s':>16} {'best':>5} {'past floor':>10} {'rc MiB':>7} {'HTA MiB':>8}")
    for label, a, b in pairs(args.work, args.mb):
        out = args.work / "out"
        commands = ([exe, "compare", str(a), str(b), "--out", str(out)], args.work / "rootcause.log"), \
                   ([args.hta_python, "-c", HTA_DIFF, str(a), str(b)], args.work / "hta.log"), \
                   ([str(python if python.is_file() else sys.executable), "-c", PANDAS_FLOOR],
                    args.work / "floor.log")
        runs: list[list[tuple[float, float, int]]] = [[] for _ in commands]
        for cmd, log in commands:  # untimed: bytecode written, the files in the page cache
            shutil.rmtree(out, ignore_errors=True)
            child(cmd, log)
        for _ in range(args.repeat):  # interleaved: a drift of the machine moves all three alike
            for times, command in zip(runs, commands):
                shutil.rmtree(out, ignore_errors=True)
                times.append(child(*command))
        cpu_rc, cpu_hta, cpu_floor = (statistics.median(r[0] for r in times) for times in runs)
        print(f"{label:32} {json_mb(a):5.1f}/{json_mb(b):<5.1f} {cpu_rc:16.2f} {cpu_hta:10.2f} "
              f"{cpu_hta / cpu_rc:7.2f} {cpu_floor:16.2f} {cpu_hta / cpu_floor:5.1f} {_past(cpu_hta, cpu_rc, cpu_floor):>10} "
              f"{max(r[2] for r in runs[0]):7d} {max(r[2] for r in runs[1]):8d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
