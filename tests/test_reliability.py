"""What rootcause must never do, tried the way an adversary or a careless user would: touch a file
outside the output it was given, remove or replace a file it did not write, run code no spec
declares, hold a compression bomb in memory, answer with a traceback, let two writers mix one
folder, exit 0 on a failure, or pass a capture's escape codes to the terminal.

Each test runs the installed `rootcause` command (the entry point a user runs), on real specs,
real captures (fixtures/captures, edited where the test says so) and real builds, and checks a
property from outside: the bytes of the files around the output, the exit status, stderr's line
count, the peak memory the kernel accounted to the process.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROOTCAUSE = str(Path(sys.executable).parent / "rootcause")
POOL = ROOT / "fixtures" / "cases" / "pool_fusion"
RUN = ROOT / "fixtures" / "captures" / "h200-2026-12-02-run"  # pool_fusion on the H200 (PROVENANCE.md there)
ATTRIBUTION = ROOT / "gallery" / "pool_fusion_h200_cupti" / "attribution.json"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return {**os.environ, "ROOTCAUSE_CACHE": str(tmp_path_factory.mktemp("cache"))}


def rootcause(*args, env=None, cwd=None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([ROOTCAUSE, *map(str, args)], capture_output=True, text=True, env=env, cwd=cwd,
                          **kwargs)


def one_line(proc: subprocess.CompletedProcess) -> str:
    """The one error line (progress lines such as 'reused cached build' may come before it)."""
    errors = [line for line in proc.stderr.splitlines() if line.startswith("rootcause")]
    assert len(errors) == 1 and errors[0] == proc.stderr.rstrip("\n").splitlines()[-1], proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return errors[0]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ---- 1. a read command never moves a file outside its folder ----------------------------------

@pytest.mark.parametrize("record", [["../../.bashrc"], ["/tmp/elsewhere"], ["sub/../../x"], [], "",
                                    [{"name": "x"}], [".."], None])
def test_a_planted_commit_record_moves_nothing(tmp_path, record):
    """A folder someone sent holds a staging folder whose commit record names a path outside it;
    `report --out` into that folder must finish its own write and move nothing else."""
    home = tmp_path / "home"
    folder = home / "sub" / "got"
    staging = folder / ".rootcause-staging-planted"
    staging.mkdir(parents=True)
    (home / ".bashrc").write_text("the user's own\n")
    (home / "sub" / ".bashrc").write_text("planted\n")  # what staging/../../.bashrc resolves to
    (staging / "x").write_text("planted\n")
    (staging / ".commit").write_text(json.dumps(record) if record is not None else "")
    shutil.copy(ATTRIBUTION, folder / "attribution.json")
    before = snapshot(home)
    proc = rootcause("report", folder / "attribution.json", "--format", "markdown", "--out", folder / "r.md")
    assert proc.returncode == 0, proc.stderr
    after = snapshot(home)
    assert after.pop("sub/got/r.md").startswith(b"**rootcause:**")
    assert after == before


# ---- 2. outputs replace only what rootcause wrote ---------------------------------------------

def test_build_refuses_a_folder_of_the_users_files(tmp_path, env):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "manifest.json").write_text("{}\n")  # any file of that name proves nothing
    (out / "notes.txt").write_text("a week of notes\n")
    before = snapshot(out)
    proc = rootcause("build", f"{POOL / 'variants.toml'}#on", "--target", "llvm", "--out", out, env=env)
    assert proc.returncode == 2 and "refusing to replace" in one_line(proc)
    assert snapshot(out) == before
    # its own bundle it replaces: the same build into a fresh folder, then again over it
    ours = tmp_path / "ours"
    for _ in range(2):
        proc = rootcause("build", f"{POOL / 'variants.toml'}#on", "--target", "llvm", "--out", ours, env=env)
        assert proc.returncode == 0, proc.stderr
    # and a file the user added to it later makes it the user's again
    (ours / "mine.txt").write_text("added by hand\n")
    proc = rootcause("build", f"{POOL / 'variants.toml'}#on", "--target", "llvm", "--out", ours, env=env)
    assert proc.returncode == 2 and "mine.txt" in one_line(proc) and (ours / "mine.txt").is_file()


def test_an_output_that_names_an_input_is_refused(tmp_path):
    att = tmp_path / "attribution.json"
    shutil.copy(ATTRIBUTION, att)
    cubin = next((ROOT / "fixtures").rglob("*.cubin"))
    shutil.copy(cubin, tmp_path / "k.cubin")
    profile = tmp_path / "a.cupti.json"
    shutil.copy(RUN / "pool_fusion_off.cupti.json", profile)
    before = snapshot(tmp_path)
    for args in (["report", att, "--out", att], ["report", att, "--format", "markdown", "--out", tmp_path / "." / att.name],
                 ["inspect", tmp_path / "k.cubin", "--out", tmp_path / "k.cubin"],
                 ["compare", profile, RUN / "pool_fusion_on.cupti.json", "--out", tmp_path]):
        if args[0] == "compare":  # compare writes attribution.json: make the profile that name
            os.replace(profile, tmp_path / "attribution.json")
            args[1] = tmp_path / "attribution.json"
            before = snapshot(tmp_path)
        proc = rootcause(*args)
        assert proc.returncode == 2 and "is also an input" in one_line(proc), args
        assert snapshot(tmp_path) == before, args


# ---- 3. children run no code that no spec declares --------------------------------------------

def test_children_do_not_import_from_the_working_directory(tmp_path, env):
    """A numpy.py (and a sitecustomize.py) where the user runs rootcause: TVM's build child, the
    reference and the CPU profile must import the real modules, never these."""
    marker = tmp_path / "executed"
    for name in ("numpy.py", "sitecustomize.py", "tvm.py"):
        (tmp_path / name).write_text(f"open({str(marker)!r}, 'a').write({name!r} + '\\n')\n")
    proc = rootcause("build", f"{POOL / 'variants.toml'}#off", "--target", "llvm", "--no-cache",
                     "--out", tmp_path / "bundle", env={**env, "PYTHONSTARTUP": str(tmp_path / "tvm.py")}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists(), marker.read_text()


# ---- 4. compression bombs are refused, not held ---------------------------------------------------

GiB = 1 << 30


def peak(args: list, **kwargs) -> tuple[int, str, int]:
    """(exit status, stderr, peak resident bytes) of `rootcause *args`, from the kernel's own
    accounting of that one process (wait4)."""
    proc = subprocess.Popen([ROOTCAUSE, *map(str, args)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, **kwargs)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, err, usage.ru_maxrss * 1024


def _zeros(gib: int, compress) -> bytes:
    chunk = bytes(64 << 20)
    return compress(chunk for _ in range(gib * 16))


def _zstd(chunks) -> bytes:
    import zstandard
    c = zstandard.ZstdCompressor(level=1).compressobj()
    return b"".join([c.compress(x) for x in chunks] + [c.flush()])


def _gzip(chunks) -> bytes:
    import zlib
    c = zlib.compressobj(1, zlib.DEFLATED, 31)
    return b"".join([c.compress(x) for x in chunks] + [c.flush()])


def _lz4(chunks) -> bytes:
    import lz4.frame
    c = lz4.frame.LZ4FrameCompressor()
    return b"".join([c.begin()] + [c.compress(x) for x in chunks] + [c.flush()])


@pytest.mark.parametrize("codec, gib", [(_zstd, 4), (_gzip, 2), (_lz4, 3)])
def test_a_compressed_trace_bomb_is_refused_within_memory(tmp_path, codec, gib):
    """A few hundred KB that decompress to gigabytes of zeros, given as a profile: exit 2 with one
    line, and the process never holds more than 1.5 GiB (the cap is 512 MiB of decompressed text)."""
    bomb = tmp_path / "trace.json.bin"
    bomb.write_bytes(_zeros(gib, codec))
    status, err, rss = peak(["compare", bomb, bomb, "--out", tmp_path / "o"])
    assert status == 2 and "decompresses to more than" in err and err.count("\n") == 1, err
    assert rss < 1.5 * GiB, rss
    assert not (tmp_path / "o" / "attribution.json").exists()


def test_a_fatbin_whose_entries_declare_gigabytes_is_refused_within_memory(tmp_path):
    """Twelve zstd entries of 256 MiB each (each under the per-entry cap) in a file of 100 KB: the
    layout of parsers/fatbin.py's docstring (nvcc's), one container, ELF entries for sm_90."""
    import struct

    import zstandard
    frame = zstandard.ZstdCompressor(level=1, write_content_size=True).compress(bytes(256 << 20))
    payload = frame + bytes(-len(frame) % 8)
    entry = struct.pack("<HHIQI", 2, 0x0101, 64, len(payload), len(frame)) + bytes(4) + \
        struct.pack("<HHI", 0, 0, 90) + bytes(8) + struct.pack("<Q", 0x8000) + bytes(8) + \
        struct.pack("<Q", 256 << 20)
    assert len(entry) == 64
    body = (entry + payload) * 12
    (tmp_path / "bomb.fatbin").write_bytes(struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body)
    status, err, rss = peak(["inspect", tmp_path / "bomb.fatbin"])
    assert status == 2 and "declare more than" in err, err
    assert rss < 2 * GiB, rss


# ---- 5. no traceback where exit 2 is promised --------------------------------------------------

def test_deeply_nested_json_and_toml_are_one_line(tmp_path):
    deep = tmp_path / "attribution.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    proc = rootcause("report", deep, "--format", "markdown")
    assert proc.returncode == 2 and "nested too deeply" in one_line(proc)
    spec = tmp_path / "spec.toml"
    spec.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    proc = rootcause("build", spec, "--out", tmp_path / "b")
    assert proc.returncode == 2 and "nested too deeply" in one_line(proc)


@pytest.mark.parametrize("env_change", [{"HOME": "/proc/self"}, {"ROOTCAUSE_CACHE": "/proc/self/cache"}])
def test_a_cache_that_cannot_be_written_is_one_line(tmp_path, env_change):
    env = {k: v for k, v in os.environ.items() if k != "ROOTCAUSE_CACHE"} | env_change
    proc = rootcause("build", f"{POOL / 'variants.toml'}#on", "--target", "llvm", "--out", tmp_path / "b", env=env)
    assert proc.returncode == 2 and "ROOTCAUSE_CACHE" in one_line(proc)


def test_an_out_that_is_a_file_is_one_line(tmp_path):
    (tmp_path / "file").write_text("mine\n")
    proc = rootcause("compare", RUN / "pool_fusion_off.cupti.json", RUN / "pool_fusion_on.cupti.json",
                     "--out", tmp_path / "file")
    assert proc.returncode == 2 and "file" in one_line(proc)
    assert (tmp_path / "file").read_text() == "mine\n"


def test_a_terminal_that_cannot_show_a_name_gets_it_escaped(tmp_path):
    """stdout in ASCII (PYTHONIOENCODING, a C locale's pipe) and a kernel name that is not ASCII."""
    for side in ("off", "on"):
        rows = json.loads((RUN / f"pool_fusion_{side}.cupti.json").read_text())
        for row in rows:
            if row.get("name") == "add2_kernel":
                row["name"] = "add2_kernel_\u00e9t\u00e9"
        (tmp_path / f"{side}.cupti.json").write_text(json.dumps(rows))
    proc = rootcause("compare", tmp_path / "off.cupti.json", tmp_path / "on.cupti.json", "--out", tmp_path / "o",
                     env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.slow


def test_every_field_of_an_attribution_edited_is_rendered_or_refused(tmp_path, capsys):
    """Each field of a real attribution.json (the H200 CUPTI pair's), replaced by a value of
    another type: `report` renders it or refuses it in one line (exit 2); never exit 4 (a bug)
    or a traceback. In this process, through cli.main, for speed."""
    from mutation import edited, leaves
    from rootcause import cli
    doc = json.loads(ATTRIBUTION.read_text())
    tries, broken = 0, []
    for path in leaves(doc):
        for value in (None, "x", [], 1e308):
            (tmp_path / "a.json").write_text(json.dumps(edited(doc, path, value)))
            rc = cli.main(["report", str(tmp_path / "a.json"), "--format", "markdown", "--out", str(tmp_path / "r.md")])
            err = capsys.readouterr().err
            tries += 1
            if rc not in (0, 2) or err.count("\n") > 1:
                broken.append((path, value, rc, err[:200]))
    assert tries > 4000 and broken == []


@pytest.mark.parametrize("file, field, value, needle", [
    ("run/measurement.json", ("measurement", "variants"), "x", "measurement.variants"),
    ("run/measurement.json", ("profiles",), [], "profiles"),
    ("analyze/plan.json", ("bundles",), {"a": "../../elsewhere"}, "not a path inside"),
    ("analyze/plan.json", ("a",), 5, "key 'a'"),
])
def test_an_edited_run_or_plan_is_refused_in_one_line(tmp_path, file, field, value, needle):
    """A zoo capture's run directory and plan (fixtures/zoo/tvm_two_slow), one field edited, read
    the way analyze --from-run reads them."""
    from mutation import edited
    from rootcause.artifacts import plan, rundir
    from rootcause.errors import UsageError
    capture = ROOT / "fixtures" / "zoo" / "tvm_two_slow" / "capture"
    target = tmp_path / file
    target.parent.mkdir(parents=True)
    target.write_text(json.dumps(edited(json.loads((capture / file).read_text()), field, value)))
    read = rundir.read_measurement if file.startswith("run") else plan.read_plan
    with pytest.raises(UsageError) as err:
        read(target.parent)
    assert needle in str(err.value) and "\n" not in str(err.value)


# ---- 6. one writer per output folder ------------------------------------------------------------

def test_a_second_analyze_into_a_busy_folder_is_refused(tmp_path, env):
    """While a rootcause analyze holds OUT (its lock file, held here as another process would
    hold it), a second analyze into OUT stops in one line before writing anything."""
    out = tmp_path / "out"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time\n"
                               f"fd = os.open({str(out / '.rootcause-lock')!r}, os.O_RDWR | os.O_CREAT)\n"
                               "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        proc = rootcause("analyze", f"{POOL / 'variants.toml'}#on", f"{POOL / 'variants.toml'}#off",
                         "--target", "llvm", "--out", out, env=env)
        assert proc.returncode == 2 and "another rootcause analyze is writing" in one_line(proc)
        assert sorted(p.name for p in out.iterdir()) == [".rootcause-lock"]
    finally:
        holder.kill()
        holder.wait()


def test_the_output_lock_is_released_and_leaves_no_file(tmp_path):
    from rootcause.fileio import output_lock

    with output_lock(tmp_path, "analyze"):
        assert (tmp_path / ".rootcause-lock").exists()
    assert list(tmp_path.iterdir()) == []  # nothing of the lock is left in the user's folder
    with output_lock(tmp_path, "analyze"):  # and it can be taken again
        pass


def test_the_output_lock_is_released_when_its_holder_dies(tmp_path):
    holder = subprocess.run([sys.executable, "-c", "import os, sys\n"
                             "from rootcause.fileio import output_lock\n"
                             f"with output_lock({str(tmp_path)!r}, 'analyze'):\n    os._exit(9)"], cwd=ROOT)
    assert holder.returncode == 9
    fd = os.open(tmp_path / ".rootcause-lock", os.O_RDWR)  # left by the dead holder, but not held
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free again: no BlockingIOError
    os.close(fd)


# ---- 7. failures have their own exit status, numbers are checked ------------------------------

def _spec(tmp_path: Path, reference: str, name: str = '"ref"') -> Path:
    shutil.copy(POOL / "graph_tvmscript.py", tmp_path / "graph.py")
    (tmp_path / "reference.py").write_text(reference)
    spec = tmp_path / "spec.toml"
    spec.write_text((POOL / "variants.toml").read_text()
                    .replace('source = "graph_tvmscript.py"', 'source = "graph.py"')
                    .replace('name = "pool_fusion"', f"name = {name}"))
    return spec


@pytest.mark.parametrize("body, needle", [
    ("import sys\ndef reference(x):\n    sys.exit(0)\n", "called sys.exit(0)"),
    ("def reference(x):\n    raise SystemExit('bye')\n", "called sys.exit('bye')"),
    ("import numpy as np\ndef reference(x):\n    return np.full((1, 16, 32, 32), np.nan, np.float32)\n", "NaN"),
])
def test_a_reference_that_exits_or_computes_nan_is_bad_input(tmp_path, env, body, needle):
    spec = _spec(tmp_path, body)
    proc = rootcause("build", f"{spec}#on", "--target", "llvm", "--out", tmp_path / "b", env=env)
    assert proc.returncode == 2 and needle in one_line(proc)
    assert not (tmp_path / "b").exists()


def test_a_name_that_is_not_a_string_is_bad_input(tmp_path, env):
    spec = _spec(tmp_path, "def reference(x):\n    return x\n", name="5")
    proc = rootcause("build", f"{spec}#on", "--target", "llvm", "--out", tmp_path / "b", env=env)
    assert proc.returncode == 2 and "name: must be a non-empty string" in one_line(proc)


@pytest.mark.parametrize("args", [
    ["run", "B", "--out", "R", "--rtol", "nan"], ["run", "B", "--out", "R", "--rtol", "-1"],
    ["run", "B", "--out", "R", "--budget-s", "nan"], ["run", "B", "--out", "R", "--budget-s", "inf"],
    ["run", "B", "--out", "R", "--processes", "1000000"], ["run", "B", "--out", "R", "--warmup-calls", "-3"],
    ["analyze", "A", "B", "--threshold", "nan"], ["analyze", "A", "B", "--hybrids", "-1"],
    ["bisect", "S", "--good", "1", "--bad", "2", "--budget-s", "0"],
    ["compare", "A", "B", "--out", "O", "--calls", "0"], ["sweep", "S", "--max-retries", "-1"],
])
def test_numbers_are_checked_before_anything_runs(tmp_path, args):
    proc = rootcause(*args, cwd=tmp_path)
    assert proc.returncode == 2 and args[-2] in one_line(proc)
    assert list(tmp_path.iterdir()) == []


def test_a_compiler_failure_is_its_own_status_with_the_compilers_line(tmp_path, env):
    """nvcc refusing an architecture: exit 3, and the line nvcc printed, not 'RuntimeError'."""
    proc = rootcause("build", f"{POOL / 'variants.toml'}#on", "--target", "cuda:sm_999", "--no-cache",
                     "--out", tmp_path / "b", env=env)
    line = one_line(proc)
    assert proc.returncode == 3 and "Unsupported gpu architecture 'compute_999'" in line
    log = Path(line.rsplit("(log: ", 1)[1].rstrip(")"))
    assert "compute_999" in log.read_text()


UNREGISTERED = """from tvm.script import ir as I, relax as R, tirx as T


@I.ir_module
class Module:
    @R.function(pure=False)
    def main(x: R.Tensor((4, 4), "float32")) -> R.Tensor((4, 4), "float32"):
        y = R.call_packed("rootcause_test.not_registered", x, sinfo_args=R.Tensor((4, 4), "float32"))
        return y
"""


def test_a_runtime_failure_is_its_own_status(tmp_path, env):
    """A model that compiles and that the TVM runtime cannot run (it calls a function nothing
    registers): the build passes, `run` ends with exit 3 and the runtime's own message."""
    (tmp_path / "graph.py").write_text(UNREGISTERED)
    (tmp_path / "spec.toml").write_text('name = "unregistered"\nfrontend = "tvm"\nsource = "graph.py"\n'
                                        'target = "llvm"\nentry = "main"\n[[inputs]]\nshape = [4, 4]\n'
                                        'dtype = "float32"\n')
    proc = rootcause("build", tmp_path / "spec.toml", "--out", tmp_path / "b", env=env)
    assert proc.returncode == 0, proc.stderr
    proc = rootcause("run", tmp_path / "b", "--out", tmp_path / "run", "--budget-s", "0.2", "--profile", "none",
                     env=env)
    assert proc.returncode == 3 and "rootcause_test.not_registered" in one_line(proc)


# ---- 8. names from outside reach the terminal and Markdown as inert text -----------------------

HOSTILE = "add2\x1b]0;pwned\x07\x1b[31m\rkernel\n"


def test_escape_codes_in_a_captures_kernel_names_stay_inert(tmp_path):
    """The real CUPTI captures of pool_fusion with one kernel renamed (in both) to a name holding
    a title code, a colour code, a carriage return and a newline."""
    for side in ("off", "on"):
        rows = json.loads((RUN / f"pool_fusion_{side}.cupti.json").read_text())
        for row in rows:
            if row.get("name") == "add2_kernel":
                row["name"] = HOSTILE
        (tmp_path / f"{side}.cupti.json").write_text(json.dumps(rows))
    proc = rootcause("compare", tmp_path / "off.cupti.json", tmp_path / "on.cupti.json", "--out", tmp_path / "o")
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "o" / "report.md").read_text()
    for text in (proc.stdout, proc.stderr, md):
        assert not any(c in text for c in "\x1b\x07\r"), repr(text[:300])
    assert "add2" in md and "kernel" in md


def test_a_newline_in_a_path_keeps_the_error_on_one_line(tmp_path):
    proc = rootcause("report", tmp_path / "no\nsuch" / "attribution.json")
    assert proc.returncode == 2 and "no\\nsuch" in one_line(proc)


# ---- round 4: no write through a planted link, no user file replaced --------------------------

def _compare(out: Path) -> subprocess.CompletedProcess:
    from tests.captures import CAPTURE, CATALOGS

    return rootcause("compare", f"{CAPTURE}#1", f"{CAPTURE}#0", "--catalog-a", CATALOGS / "pool_fusion_off.manifest.json",
                     "--catalog-b", CATALOGS / "pool_fusion_on.manifest.json", "--out", out)


def test_compare_replaces_only_the_reports_it_wrote(tmp_path):
    """A folder of the user's notes that happens to hold a report.md is never written over; a
    folder compare wrote itself it replaces again and again."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "report.md").write_text("a week of notes\n")
    before = snapshot(notes)
    proc = _compare(notes)
    assert proc.returncode == 2 and "rootcause did not write it" in one_line(proc)
    assert snapshot(notes) == before
    ours = tmp_path / "ours"
    for _ in range(2):
        proc = _compare(ours)
        assert proc.returncode == 0, proc.stderr
    assert {"attribution.json", "report.md", "report.html"} <= {p.name for p in ours.iterdir()}


def test_a_planted_link_inside_the_output_carries_no_write_outside(tmp_path, env):
    """A `.rootcause-lock` that is a link, and a `bundles/` that is a link to a folder elsewhere:
    analyze refuses each in one line, and nothing appears where the links point."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / ".rootcause-lock").symlink_to(elsewhere / "made-by-the-link")
    spec_a, spec_b = f"{POOL / 'variants.toml'}#on", f"{POOL / 'variants.toml'}#off"
    proc = rootcause("analyze", spec_a, spec_b, "--target", "llvm", "--out", out, env=env)
    assert proc.returncode == 2 and "symbolic link" in one_line(proc)
    assert list(elsewhere.iterdir()) == []
    (out / ".rootcause-lock").unlink()
    (out / "bundles").symlink_to(elsewhere, target_is_directory=True)
    proc = rootcause("analyze", spec_a, spec_b, "--target", "llvm", "--out", out, "--bundle-only", env=env)
    assert proc.returncode == 2 and "symbolic link" in one_line(proc)
    assert list(elsewhere.iterdir()) == []


def test_run_never_replaces_a_measurement_it_did_not_write(tmp_path, env):
    bundle = tmp_path / "bundle"
    assert rootcause("build", f"{POOL / 'variants.toml'}#on", "--target", "llvm", "--out", bundle,
                     env=env).returncode == 0
    out = tmp_path / "run"
    out.mkdir()
    (out / "measurement.json").write_text('{"mine": true}\n')
    before = snapshot(out)
    proc = rootcause("run", bundle, "--out", out, "--profile", "none", "--budget-s", "0.2", env=env)
    assert proc.returncode == 2 and "rootcause did not write it" in one_line(proc)
    assert snapshot(out) == before


def test_a_bundles_module_that_is_a_link_is_not_loaded(tmp_path, env):
    bundle = tmp_path / "bundle"
    assert rootcause("build", f"{POOL / 'variants.toml'}#on", "--target", "llvm", "--out", bundle,
                     env=env).returncode == 0
    module = bundle / json.loads((bundle / "manifest.json").read_text())["module"]
    outside = tmp_path / "outside.so"
    shutil.copy(module, outside)
    module.unlink()
    module.symlink_to(outside)
    proc = rootcause("run", bundle, "--out", tmp_path / "run", "--profile", "none", "--budget-s", "0.2", env=env)
    assert proc.returncode == 2 and "symbolic link" in one_line(proc)


@pytest.mark.parametrize("flag", ["--iree-opt-splat-parameters=victim", "--iree-parameter-splat=victim",
                                  "--iree-opt-export-parameters=victim", "--iree-parameter-export=victim",
                                  "--iree-cuda-use-ptxas-from=/bin/sh", "--iree-cuda-use-ptxas-from=sh",
                                  "--iree-llvmcpu-target-cpu=../../x"])
def test_an_iree_flag_that_writes_or_runs_a_path_is_refused(tmp_path, flag):
    """Flags that would write an archive over a file or run a program: refused before anything runs."""
    from rootcause.errors import UsageError
    from rootcause.spec import load

    (tmp_path / "m.mlir").write_text("func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> { return %a : tensor<4xf32> }\n")
    (tmp_path / "v.toml").write_text(f'name = "m"\nfrontend = "iree"\nsource = "m.mlir"\ntarget = "llvm"\n'
                                     f'entry = "main"\ninputs = [{{shape = [4], dtype = "float32"}}]\n'
                                     f'[iree]\nflags = ["{flag}"]\n')
    with pytest.raises(UsageError, match="refused"):
        load(tmp_path / "v.toml")
    assert not (tmp_path / "victim").exists()


def test_string_typed_iree_options_outside_the_names_are_refused_by_the_compilers_own_types():
    """The allowlist at its kind: every option iree-compile types '=<string>' is refused unless it
    is one of the name-valued ones, read from the installed compiler's --help-hidden."""
    import re

    from rootcause.errors import UsageError
    from rootcause.frontends.iree.compile import iree_compile_path
    from rootcause.frontends.iree.options import NAME_OPTIONS, check_string_options

    text = subprocess.run([str(iree_compile_path()), "--help-hidden"], capture_output=True, text=True).stdout
    typed = sorted(set(re.findall(r"^\s+(--[\w-]+)=<string>", text, re.M)))
    assert "--iree-cuda-use-ptxas-from" in typed  # the compiler's own word, not ours
    for name in typed:
        if name in NAME_OPTIONS:
            check_string_options([f"{name}=x"], text, "[iree] flags")
        else:
            with pytest.raises(UsageError, match="free-form string"):
                check_string_options([f"{name}=x"], text, "[iree] flags")


def test_report_leaves_a_folder_that_shares_the_staging_prefix(tmp_path):
    folder = tmp_path / "got"
    mine = folder / ".rootcause-staging-mine"
    mine.mkdir(parents=True)
    (mine / "keep.txt").write_text("the user's\n")
    shutil.copy(ATTRIBUTION, folder / "attribution.json")
    proc = rootcause("report", folder / "attribution.json", "--format", "markdown", "--out", folder / "r.md")
    assert proc.returncode == 0, proc.stderr
    assert (mine / "keep.txt").read_text() == "the user's\n"


def test_a_sweep_loads_each_spec_once_however_many_pairs_name_it(tmp_path):
    """Loading is linear in the pairs: 4,000 pairs naming one spec cost about what 400 do plus the
    pairs' own rows (the spec is read, targeted and hashed once), well under the old 1.7 ms a pair."""
    import time

    from rootcause import spec as spec_mod
    from rootcause import sweep as sweeps

    shutil.copytree(POOL, tmp_path / "pool_fusion")
    times = {}
    for n in (400, 4000):
        rows = ['[sweep]\ntarget = "llvm"\n'] + [f'[[pair]]\nname = "p{i}"\na = "pool_fusion/variants.toml#on"\n'
                                                 f'b = "pool_fusion/variants.toml#off"\n' for i in range(n)]
        (tmp_path / f"s{n}.toml").write_text("".join(rows))
        start = time.process_time()
        loaded = sweeps.load(tmp_path / f"s{n}.toml", lambda t, s: spec_mod.resolve_target(t, s, False))
        times[n] = time.process_time() - start
        assert len(loaded.pairs) == n and len({p.keys["build"] for p in loaded.pairs}) == 1
    assert times[4000] < 4000 * 0.5e-3, times


def test_escape_codes_inside_a_findings_code_span_stay_inert(tmp_path):
    """A finding names a kernel between backticks; a name holding escape codes stays inert in
    `report --format markdown` on stdout and in the Markdown file."""
    doc = json.loads(ATTRIBUTION.read_text())
    unit = next(u for u in doc["units"] if u.get("findings"))
    unit["findings"][0]["sentence"] = f"`{HOSTILE}` launches more blocks than `add2`."
    att = tmp_path / "attribution.json"
    att.write_text(json.dumps(doc))
    proc = rootcause("report", att, "--format", "markdown")
    assert proc.returncode == 0, proc.stderr
    written = rootcause("report", att, "--format", "markdown", "--out", tmp_path / "r.md")
    assert written.returncode == 0, written.stderr
    for text in (proc.stdout, (tmp_path / "r.md").read_text()):
        assert "add2" in text and not any(c in text for c in "\x1b\x07\r"), repr(text[:300])


def test_inspect_csv_escapes_a_binarys_names():
    from rootcause.inspect import ROW_KEYS, render

    row = {k: None for k in ROW_KEYS}
    row.update(name=HOSTILE, file="k\x1b[2J.cubin", format="cubin", arch="sm_90")
    text = render([row], "csv")
    assert not any(c in text for c in "\x1b\x07\r") and "add2" in text


def test_a_child_ends_when_rootcause_is_killed(tmp_path):
    """A child started through rootcause.child (a build worker, a compiler) gets SIGKILL from the
    kernel when its parent dies by SIGKILL, which no handler of the parent sees."""
    import signal
    import time

    pid_file = tmp_path / "child.pid"
    parent = subprocess.Popen([sys.executable, "-c",
                               "import os, sys\nfrom rootcause import child\n"
                               f"child.run(['sh', '-c', 'echo $$ > {pid_file}; exec sleep 60'], env=dict(os.environ))"],
                              cwd=ROOT)
    deadline = time.monotonic() + 30
    while not (pid_file.is_file() and pid_file.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = int(pid_file.read_text())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        state = Path(f"/proc/{pid}/stat").read_text().split()[2] if Path(f"/proc/{pid}/stat").exists() else "X"
        if state == "Z":
            break  # dead, waiting for init to reap it
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        raise AssertionError("the child outlived its killed parent")


def test_a_child_started_while_xla_runs_here_is_tied_without_a_warning():
    """After a measurement, XLA's runtime runs its threads in rootcause's process (jax warns of a
    deadlock at any fork with a Python callback). A child started then through rootcause.child
    still has its parent-death signal set (read back in the child with PR_GET_PDEATHSIG) and the
    parent prints no warning."""
    pytest.importorskip("jax")
    script = ("import os, sys\nimport jax\nimport jax.numpy as jnp\nfrom rootcause import child\n"
              "jnp.ones(4).block_until_ready()\n"  # XLA's CPU client and its threads
              "code = 'import ctypes; v = ctypes.c_int(); ctypes.CDLL(None).prctl(2, ctypes.byref(v)); print(v.value)'\n"
              "print(child.run([sys.executable, '-c', code], env=dict(os.environ)).stdout.strip())\n")
    done = subprocess.run([sys.executable, "-W", "always", "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str(int(__import__("signal").SIGKILL)), done.stdout
    assert "fork" not in done.stderr, done.stderr


def test_a_cached_environment_changed_after_it_was_made_is_refused(tmp_path, monkeypatch):
    """A real venv recorded as rootcause records the environments it makes; a sitecustomize.py
    added to its site-packages afterwards (which Python would run on every start) is refused."""
    from rootcause import envs
    from rootcause.errors import UsageError

    monkeypatch.setenv("ROOTCAUSE_ENVS", str(tmp_path / "envs"))
    requirements = ["iree-base-compiler==3.8.0"]
    root = envs.env_dir(requirements)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    (root / envs.READY).write_text(json.dumps({"requirements": requirements, "packages": {},
                                               "digest": envs.digest(root)}))
    assert envs.cached_python(requirements) == root / "bin" / "python"
    site = next(root.glob("lib/python*/site-packages"))
    (site / "sitecustomize.py").write_text("import os\nos.system('echo pwned')\n")
    (root / envs.READY).touch()  # a new check, as a new process would make
    with pytest.raises(UsageError, match="changed since rootcause made it"):
        envs.cached_python(requirements)


def test_a_toolchain_folder_that_cannot_be_made_is_one_line(tmp_path):
    proc = rootcause("build", f"{ROOT / 'fixtures' / 'cases' / 'iree_versions' / 'variants.toml'}#v3_8_0", "--out",
                     tmp_path / "b", env={**os.environ, "ROOTCAUSE_ENVS": "/proc/no-such-folder",
                                          "ROOTCAUSE_CACHE": str(tmp_path / "cache")})
    assert proc.returncode == 2 and "ROOTCAUSE_ENVS" in one_line(proc)


def test_a_missing_tvm_is_bad_input_with_the_install_line(tmp_path):
    """As a missing IREE is: exit 2 and the line to install it, not a bug's exit 4. The process sees
    no tvm: importlib's finder is told there is none, as on a machine without apache-tvm."""
    code = ("import importlib.util, sys\nfind = importlib.util.find_spec\n"
            "importlib.util.find_spec = lambda name, *a: None if name == 'tvm' else find(name, *a)\n"
            "from rootcause import cli\nsys.exit(cli.main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", code, "build", f"{POOL / 'variants.toml'}#on", "--target", "llvm",
                           "--out", str(tmp_path / "b")], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "ROOTCAUSE_CACHE": str(tmp_path / "cache")})
    assert proc.returncode == 2 and "pip install 'rootcause[compilers]'" in proc.stderr, proc.stderr


def test_a_tampered_sweep_result_is_done_again_not_a_crash(tmp_path):
    """A pair's result.json edited by hand (a ratio that is text): the resume takes it for no record
    (its stage is done again) instead of failing in the summary with exit 4."""
    from rootcause.artifacts import sweep as records

    row = {"id": "p", "a": "a", "b": "b", "target": "llvm", "report": "p/report.html", "status": "ok",
           "stage": "attribute", "error": None, "verdict": "B slower", "ratio": 1.5, "units": [], "cause": []}
    records.write_record(tmp_path / records.RESULT, "k", row=row)
    assert records.read_result(tmp_path)["row"]["ratio"] == 1.5
    records.write_record(tmp_path / records.RESULT, "k", row={**row, "ratio": "1.5x"})
    assert records.read_result(tmp_path) is None


def test_a_run_excludes_a_variant_that_computes_other_outputs_and_measures_the_rest(tmp_path, env):
    """Three IREE builds of one signature: A = 2x, B = x + x (the same outputs), H = 3x (not
    equivalent, as a bad hybrid is). `rootcause run A B H` measures A and B, records H as excluded
    with why, and exits 0; the pair itself differing still stops the run (exit 1)."""
    bodies = {"a": "%r = arith.mulf %x, %two : tensor<64xf32>", "b": "%r = arith.addf %x, %x : tensor<64xf32>",
              "h": "%r = arith.mulf %x, %three : tensor<64xf32>"}
    bundles = {}
    for name, body in bodies.items():
        (tmp_path / f"{name}.mlir").write_text(
            "func.func @main(%x: tensor<64xf32>) -> tensor<64xf32> {\n"
            "  %two = arith.constant dense<2.0> : tensor<64xf32>\n  %three = arith.constant dense<3.0> : tensor<64xf32>\n"
            f"  {body}\n  return %r : tensor<64xf32>\n}}\n")
        (tmp_path / f"{name}.toml").write_text(f'name = "{name}"\nfrontend = "iree"\nsource = "{name}.mlir"\n'
                                               'target = "llvm"\nentry = "main"\n'
                                               'inputs = [{shape = [64], dtype = "float32"}]\n')
        bundles[name] = tmp_path / "bundles" / name
        assert rootcause("build", tmp_path / f"{name}.toml", "--out", bundles[name], env=env).returncode == 0
    run = tmp_path / "run"
    proc = rootcause("run", bundles["a"], bundles["b"], bundles["h"], "--out", run, "--profile", "none",
                     "--budget-s", "0.3", env=env)
    assert proc.returncode == 0, proc.stderr
    measurement = json.loads((run / "measurement.json").read_text())
    assert set(measurement["measurement"]["variants"]) == {"a", "b"} and "h" in measurement["excluded"]
    proc = rootcause("run", bundles["a"], bundles["h"], "--out", tmp_path / "run2", "--profile", "none",
                     "--budget-s", "0.3", env=env)
    assert proc.returncode == 1


def _processes_in(netns: str) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and os.readlink(entry / "ns" / "net") == netns:
                out.append(int(entry.name))
        except OSError:
            pass
    return out


def _local_cluster(out: Path, kill_outer: bool) -> dict:
    """`sweep --ray local` on one pair, watched from outside while its cluster runs: the GCS's
    network namespace, that namespace's interfaces, this host's listeners of the cluster's
    processes, the private folder; then what is left after the command (or its SIGKILL)."""
    import signal
    import time

    pytest.importorskip("ray")
    proc = subprocess.Popen([ROOTCAUSE, "sweep", str(ROOT / "fixtures" / "cases" / "sweep-one-llvm.toml"),
                             "--ray", "local", "--out", str(out)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: dict = {}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None and not seen:
        for entry in Path("/proc").iterdir():
            try:
                cmd = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmd and cmd[0].endswith(b"gcs_server") and any(b"rootcause-ray-" in c for c in cmd):
                folder = next(Path(c.decode().split("=", 1)[-1]) for c in cmd if b"rootcause-ray-" in c)
                while folder.name and not folder.name.startswith("rootcause-ray-"):
                    folder = folder.parent
                netns = os.readlink(entry / "ns" / "net")
                pids = _processes_in(netns)
                listening = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
                seen = {"netns": netns, "folder": folder, "pids": pids,
                        "interfaces": [line.split(":")[0].strip() for line in
                                       (entry / "net" / "dev").read_text().splitlines()[2:]],
                        "host_listeners": [line for line in listening.splitlines()
                                           if any(f"pid={p}," in line for p in pids)],
                        "folder_mode": folder.stat().st_mode & 0o777,
                        "token_mode": (folder / "auth_token").stat().st_mode & 0o777}
                break
        time.sleep(0.1)
    if kill_outer and seen:
        os.kill(proc.pid, signal.SIGKILL)
    output = proc.communicate(timeout=300)[0]
    assert seen, f"no cluster was seen: {output}"
    # after a SIGKILL of the command its child shuts the cluster down on its own (SIGTERM from the
    # kernel): given a while, nothing of it may stay
    deadline = time.monotonic() + (30 if kill_outer else 0)
    while time.monotonic() < deadline and (_processes_in(seen["netns"]) or seen["folder"].exists()):
        time.sleep(0.2)
    seen.update(returncode=proc.returncode, output=output, left=_processes_in(seen["netns"]),
                folder_left=seen["folder"].exists())
    return seen


@pytest.mark.skipif(not shutil.which("ss"), reason="needs ss (iproute2)")
@pytest.mark.slow
def test_a_local_ray_cluster_is_reachable_only_from_its_own_loopback(tmp_path):
    """Kind 5: Ray binds every address; the cluster's namespace has no interface but loopback,
    this host lists no listener of its processes, its token is private, nothing stays after it."""
    seen = _local_cluster(tmp_path / "sweep", kill_outer=False)
    assert seen["returncode"] == 0, seen["output"]
    assert seen["netns"] != os.readlink("/proc/self/ns/net")
    assert seen["interfaces"] == ["lo"]
    assert seen["pids"] and seen["host_listeners"] == []
    assert (seen["folder_mode"], seen["token_mode"]) == (0o700, 0o600)
    assert seen["left"] == [] and not seen["folder_left"], seen["output"]


@pytest.mark.skipif(not shutil.which("ss"), reason="needs ss (iproute2)")
@pytest.mark.slow
def test_a_local_ray_cluster_ends_with_rootcause_killed(tmp_path):
    seen = _local_cluster(tmp_path / "sweep", kill_outer=True)
    assert seen["left"] == [] and not seen["folder_left"], seen["output"]


def test_a_file_name_that_is_not_utf8_is_reported_and_leaves_no_staging(tmp_path):
    """Kind 8: a trace whose file name holds bytes that are not UTF-8: the reports are written
    (the name escaped), the exit status is 0, and no staging folder stays in the output."""
    from tests.captures import CAPTURE

    odd = Path(os.fsdecode(bytes(tmp_path) + b"/trace\xff.json"))
    shutil.copy(CAPTURE, odd)
    out = Path(os.fsdecode(bytes(tmp_path) + b"/out\xfe"))
    proc = subprocess.run([ROOTCAUSE, "compare", f"{odd}#1", f"{odd}#0", "--out", out],
                          capture_output=True, text=True, errors="backslashreplace")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == [".rootcause-owned", "attribution.json", "report.html", "report.md"]
    doc = json.loads((out / "attribution.json").read_text(encoding="utf-8"))
    assert os.fsdecode(b"trace\xff.json") in json.dumps(doc, ensure_ascii=False)


@pytest.mark.skipif(subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0,
                    reason="needs a user and mount namespace (unshare -rm) for a small tmpfs")
def test_a_full_cache_disk_is_one_line_and_status_2(tmp_path):
    """Kind 8: the build cache on a disk that fills during the build (a 256 KiB tmpfs, mounted in a
    namespace of the test's own): exit 2, one line naming the file, no staging folder left."""
    cache, out = tmp_path / "cache", tmp_path / "out"
    cache.mkdir()
    spec = ROOT / "fixtures" / "cases" / "einsum_fusion" / "variants.toml"
    script = (f"mount -t tmpfs -o size=256k tmpfs {cache} && ROOTCAUSE_CACHE={cache} {ROOTCAUSE} analyze "
              f"{spec}#fused_small {spec}#unfused_small --target llvm --budget-s 1 --out {out}; "
              f"echo status=$?; find {cache} -name '.*' >&2")
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert "status=2" in proc.stdout, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("rootcause analyze:")]
    assert len(errors) == 1 and "No space left on device" in errors[0] and str(cache) in errors[0]
    assert not [line for line in proc.stderr.splitlines() if line.startswith(str(cache))]  # no staging


@pytest.mark.slow


def test_an_environment_records_the_registrys_hash_of_what_it_installed(tmp_path, monkeypatch):
    """Kind 6: a toolchain environment's record holds, for each archive pip installed, the sha256
    the registry gave with it: checked here against the wheel pip downloads again, hashed here."""
    import hashlib

    from rootcause import envs

    monkeypatch.setenv("ROOTCAUSE_ENVS", str(tmp_path / "envs"))
    python = envs.ensure(["six==1.16.0"])
    record = json.loads((python.parents[1] / envs.READY).read_text())
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                    "-d", str(tmp_path / "wheel"), "six==1.16.0"], check=True)
    wheel = next((tmp_path / "wheel").glob("six-1.16.0-*.whl"))
    assert record["hashes"]["six==1.16.0"] == {"sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()}
    assert set(record["hashes"]) >= {f"{name}=={version}" for name, version in record["packages"].items()
                                     if name in ("six", "numpy")}
