"""Fuzz campaign through the CLI: mutants of real inputs, every profile format through
`rootcause compare MUTANT REAL` and every binary format through `rootcause inspect MUTANT`.

The README's contract for bad input: exit status 2 and one line on stderr, never a traceback;
exit 0 when the mutant still reads. Counted per format: exit codes, tracebacks (with their last
frame and exception, grouped), exits other than 0 and 2, and exit-2 messages longer than one
line. Mutants come from tests/mutation.py (token swaps for NaN, infinities, past-int64 numbers
and wrong types; bit flips, truncations, overwrites, spliced and deleted spans; SQL-level
changes of an nsys export; compressed inputs), seeded, so a run can be repeated.

Each mutant runs in its own process. By default that process is forked from a parent that has
imported rootcause once (the child calls rootcause.cli.main as `python -m rootcause` does, and
an uncaught exception prints its traceback and exits 1 as the interpreter would); --exec runs
`python -m rootcause` itself for every mutant (slower: interpreter start and imports each time).

    .venv/bin/python tools/fuzz_cli.py [--n 300] [--formats cupti,nsys,cubin,...] [--seed 0]
        [--jobs 2] [--exec] [--keep DIR]

With --keep, each mutant that broke the contract is kept in DIR with its stderr. Exit status
1 when anything broke the contract.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # forked children must not inherit BLAS threads

BINARIES = ROOT / "fixtures" / "binaries"
# binary format -> real inputs `rootcause inspect` reads (fixtures/binaries/, PROVENANCE.md there)
BINARY_SAMPLES = {
    "cubin": ["cuda/kernels_sm90.cubin", "cuda/tvm_pool_fusion_on_sm90.cubin", "cuda/bounds_sm90a_ptxas12.cubin"],
    "fatbin": ["cuda/multiarch.fatbin", "cuda/multiarch_lz4.fatbin", "cuda/multiarch_zstd.fatbin"],
    "ptx": ["cuda/kernels_sm90.ptx", "cuda/bounds.ptx"],
    "hsaco": ["amdgpu/scale_v4.hsaco", "amdgpu/scale_v3.hsaco", "amdgpu/mm_gfx942.hsaco"],
    "host-elf": ["host/mm_embedded_elf_x86_64.so"],
    "tvm-so": ["tvm/mm_cuda_sm90.so", "tvm/mm_llvm.so"],
    "vmfb": ["iree/mm_cuda_sm80.vmfb", "iree/mm_hip_gfx942.vmfb", "iree/mm_hip_gfx942_nozip.vmfb", "iree/mm_llvm_cpu.vmfb"],
}
PROFILE_FORMATS = ("cupti", "chrome", "iree-profile", "ncu-raw", "ncu-details", "rocprof", "nsys", "compressed")
DIALECT = {"ncu-raw": "csv", "ncu-details": "csv", "rocprof": "csv"}
_LAST_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


@dataclass
class Tally:
    runs: int = 0
    codes: Counter = field(default_factory=Counter)
    tracebacks: int = 0
    multiline: int = 0
    broken: int = 0  # runs that broke the contract (a traceback, another exit, a multi-line error)
    signatures: Counter = field(default_factory=Counter)


def samples(tmp: Path) -> dict[str, list[Path]]:
    from mutation import profile_samples

    found = profile_samples(tmp / "samples")
    found["compressed"] = [*found["cupti"], *found["chrome"], *found["rocprof"], *found["iree-profile"]]
    for fmt, names in BINARY_SAMPLES.items():
        found[fmt] = [BINARIES / n for n in names]
    return found


def make_mutant(rng: random.Random, fmt: str, source: Path, out: Path) -> Path:
    from mutation import compressed_mutant, sqlite_mutant, text_mutant

    out = out.with_name(out.name + source.suffix)
    if fmt == "nsys":
        return sqlite_mutant(rng, source, out)
    blob = source.read_bytes()
    if fmt == "compressed":
        out.write_bytes(compressed_mutant(rng, blob, "csv" if source.suffix == ".csv" else "json"))
    else:  # binary formats get the byte-level and digit-swap mutations too
        out.write_bytes(text_mutant(rng, blob, DIALECT.get(fmt, "json")))
    return out


def argv_for(fmt: str, mutant: Path, real: Path, out_dir: Path) -> list[str]:
    if fmt in BINARY_SAMPLES:
        return ["inspect", str(mutant), "--format", "json"]
    return ["compare", str(mutant), str(real), "--out", str(out_dir)]


def run_exec(argv: list[str], timeout: float) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        res = subprocess.run([sys.executable, "-m", "rootcause", *argv], capture_output=True, text=True,
                             errors="replace", timeout=timeout, env=env, cwd=str(ROOT))
    except subprocess.TimeoutExpired:
        return -1, "timeout"
    return res.returncode, res.stderr


def run_fork(argv: list[str], timeout: float, scratch: Path) -> tuple[int, str]:
    """rootcause.cli.main(argv) in a forked child, stdout to /dev/null and stderr to a file."""
    err_path = scratch / "stderr.txt"
    pid = os.fork()
    if pid == 0:  # child: as `python -m rootcause ARGV` would run it
        code = 1
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            err = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(null, 1)
            os.dup2(err, 2)
            sys.stdout = open(1, "w", closefd=False)
            sys.stderr = open(2, "w", closefd=False)
            from rootcause.cli import main

            sys.argv = ["rootcause", *argv]
            code = int(main(argv) or 0)
        except SystemExit as exc:  # argparse
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # noqa: BLE001 - what the interpreter does with an uncaught exception
            import traceback

            traceback.print_exc()
            code = 1
        finally:
            try:
                sys.stderr.flush()
                sys.stdout.flush()
            finally:
                os._exit(code)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            return -1, "timeout"
        time.sleep(0.01)
    code = os.waitstatus_to_exitcode(status)
    return code, err_path.read_text(errors="replace") if err_path.exists() else ""


def judge(tally: Tally, code: int, stderr: str) -> bool:
    """Count one run; True when it broke the contract."""
    broke = _judge(tally, code, stderr)
    tally.broken += broke
    return broke


def _judge(tally: Tally, code: int, stderr: str) -> bool:
    tally.runs += 1
    tally.codes[code] += 1
    # notes (": note: ") say what a command did with the good parts; the contract is on errors
    lines = [line for line in stderr.splitlines() if line.strip() and ": note: " not in line]
    if "Traceback (most recent call last)" in stderr:
        tally.tracebacks += 1
        frames = _LAST_FRAME.findall(stderr)
        where = f"{os.path.relpath(frames[-1][0], ROOT)}:{frames[-1][1]} in {frames[-1][2]}" if frames else "?"
        tally.signatures[f"{where}: {lines[-1][:160] if lines else ''}"] += 1
        return True
    if code == 2 and len(lines) > 1:
        tally.multiline += 1
        tally.signatures[f"multi-line error: {lines[0][:120]}"] += 1
        return True
    if code not in (0, 2):
        tally.signatures[f"exit {code}: {lines[-1][:160] if lines else ''}"] += 1
        return True
    return False


def campaign(formats: list[str], n: int, seed: int, use_exec: bool = False, keep: Path | None = None,
             timeout: float = 120.0, log=print) -> dict[str, Tally]:
    """n mutants per format; returns the tally per format."""
    if not use_exec:  # import once in the parent, so each forked child starts warm
        import rootcause.cli  # noqa: F401
        import rootcause.commands.compare  # noqa: F401
        import rootcause.inspect  # noqa: F401
    tallies: dict[str, Tally] = defaultdict(Tally)
    with tempfile.TemporaryDirectory(prefix="fuzz_cli_") as tmp_name:
        tmp = Path(tmp_name)
        found = samples(tmp)
        for fmt in formats:
            rng = random.Random(f"{seed}:{fmt}")
            t0 = time.perf_counter()
            for i in range(n):
                scratch = tmp / f"{fmt}-{i}"
                scratch.mkdir()
                source = rng.choice(found[fmt])
                mutant = make_mutant(rng, fmt, source, scratch / "mutant")
                real = found[fmt if fmt != "compressed" else "cupti"][0]
                argv = argv_for(fmt, mutant, real if fmt != "compressed" else source, scratch / "out")
                code, stderr = run_exec(argv, timeout) if use_exec else run_fork(argv, timeout, scratch)
                if judge(tallies[fmt], code, stderr) and keep is not None:
                    dest = keep / f"{fmt}-{i}"
                    dest.mkdir(parents=True, exist_ok=True)
                    shutil.copy(mutant, dest / mutant.name)
                    (dest / "stderr.txt").write_text(f"rootcause {' '.join(argv)}\nexit {code}\n{stderr}")
                shutil.rmtree(scratch, ignore_errors=True)
            t = tallies[fmt]
            log(f"{fmt:13s} {t.runs:4d} mutants  exit codes {dict(sorted(t.codes.items()))}  tracebacks {t.tracebacks}  "
                f"multi-line {t.multiline}  broke {t.broken}  ({time.perf_counter() - t0:.0f} s)")
            for sig, count in t.signatures.most_common(8):
                log(f"    {count:4d} x {sig}")
    return tallies


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=300, help="mutants per format")
    p.add_argument("--formats", default=",".join([*PROFILE_FORMATS, *BINARY_SAMPLES]))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--exec", action="store_true", help="run `python -m rootcause` for every mutant (no fork)")
    p.add_argument("--keep", type=Path, help="keep the mutants that broke the contract here")
    p.add_argument("--json", type=Path, help="write the tallies here as JSON")
    args = p.parse_args()
    formats = args.formats.split(",")
    unknown = [f for f in formats if f not in PROFILE_FORMATS and f not in BINARY_SAMPLES]
    if unknown:
        p.error(f"unknown format(s): {', '.join(unknown)}")
    tallies = campaign(formats, args.n, args.seed, args.exec, args.keep)
    total = sum(t.runs for t in tallies.values())
    broken = sum(t.broken for t in tallies.values())
    print(f"total {total} mutants, {broken} broke the contract "
          f"({sum(t.tracebacks for t in tallies.values())} tracebacks)")
    if args.json:
        args.json.write_text(json.dumps({f: {"runs": t.runs, "codes": dict(t.codes), "tracebacks": t.tracebacks,
                                             "multiline": t.multiline, "broken": t.broken, "signatures": dict(t.signatures)}
                                         for f, t in tallies.items()}, indent=1))
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
