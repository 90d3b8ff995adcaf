"""Outputs written as a set (fileio.write_set): a compare or analyze that dies or cannot write
leaves the previous attribution.json, report.html and report.md whole and consistent, with one
line and exit status 2 for a write it could not make.

The runs are real `rootcause compare`s of the shared H200 capture (tests/captures.py) in child
processes: one under RLIMIT_FSIZE (the kernel refuses the 4.8 MB report.html with EFBIG), and
ones killed with SIGKILL the moment their staging folder appears (inotify), or a little later.
A set is consistent when its three files carry one title: compare records --title in
attribution.json's command line and renders it into both reports."""
from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import json
import os
import resource
import select
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rootcause.fileio import COMMIT, OWNED, STAGING, WRITER, settle, write_set
from tests.captures import CAPTURE, CATALOGS, ROOT, compare_shared

SET = ("attribution.json", "report.html", "report.md")


def _compare_argv(out: Path, title: str) -> list[str]:
    return [sys.executable, "-m", "rootcause", "compare", f"{CAPTURE}#1", f"{CAPTURE}#0",
            "--catalog-a", str(CATALOGS / "pool_fusion_off.manifest.json"),
            "--catalog-b", str(CATALOGS / "pool_fusion_on.manifest.json"), "--title", title, "--out", str(out)]


def _digests(out: Path) -> dict[str, str]:
    return {name: hashlib.sha256((out / name).read_bytes()).hexdigest() for name in SET}


def _titles(out: Path, allow_mixed: bool = False) -> set[str]:
    """The titles each file of the set carries (OLD-SET / NEW-SET)."""
    found = set()
    for name in SET:
        text = (out / name).read_text(encoding="utf-8")
        here = {t for t in ("OLD-SET", "NEW-SET") if t in text}
        assert len(here) == 1, f"{name}: titles {here}"
        found |= here
    assert allow_mixed or len(found) == 1, f"a mixed set: {found}"
    return found


@pytest.fixture()
def previous(tmp_path) -> tuple[Path, dict[str, str]]:
    out = tmp_path / "out"
    compare_shared(out, "--title", "OLD-SET")
    return out, _digests(out)


def _limit_file_size(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_file_size_limit_keeps_the_previous_set(previous):
    out, before = previous
    assert (out / "report.html").stat().st_size > 1 << 20  # the limit below cuts this file
    r = subprocess.run(_compare_argv(out, "NEW-SET"), capture_output=True, text=True, cwd=ROOT,
                       preexec_fn=_limit_file_size(1 << 20))
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "report.html" in lines[0] and "File too large" in lines[0], r.stderr
    assert _digests(out) == before
    assert sorted(p.name for p in out.iterdir()) == sorted((*SET, OWNED))  # no staging folder left


def test_out_naming_a_file_is_one_line(tmp_path):
    target = tmp_path / "file"
    target.write_text("keep me\n")
    r = subprocess.run(_compare_argv(target, "NEW-SET"), capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert str(target) in r.stderr and target.read_text() == "keep me\n"


def test_report_out_naming_a_folder_is_one_line(previous, tmp_path):
    out, before = previous
    r = subprocess.run([sys.executable, "-m", "rootcause", "report", str(out / "attribution.json"),
                        "--format", "markdown", "--out", str(out)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "is a directory" in r.stderr and _digests(out) == before


IN_CREATE = 0x100


def _watch(folder: Path) -> int:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    assert fd >= 0 and libc.inotify_add_watch(fd, str(folder).encode(), IN_CREATE) >= 0
    return fd


def _wait_created(fd: int, prefix: str, deadline: float) -> bool:
    """Block until an entry starting with prefix is created in the watched folder."""
    while time.monotonic() < deadline:
        if not select.select([fd], [], [], 0.05)[0]:
            continue
        buf = os.read(fd, 65536)
        i = 0
        while i < len(buf):
            _, _, _, size = struct.unpack_from("iIII", buf, i)
            name = buf[i + 16:i + 16 + size].rstrip(b"\0").decode()
            if name.startswith(prefix):
                return True
            i += 16 + size
    return False


@pytest.mark.parametrize("delay_ms", [0, 0.5, 1, 2, 4, 8])
def test_sigkill_while_writing_leaves_one_whole_set(previous, delay_ms):
    """Killed as it stages the new set: the folder holds the previous set or, if the kill came
    after the commit, the new one once settled; never files of both. A kill between two renames
    (no program can block SIGKILL) leaves a committed staging folder, and the next reader
    finishes the set: here `rootcause report`, as a user would run it."""
    out, before = previous
    fd = _watch(out)
    try:
        proc = subprocess.Popen(_compare_argv(out, "NEW-SET"), cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seen = _wait_created(fd, STAGING, time.monotonic() + 60)
        time.sleep(delay_ms / 1000)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        os.close(fd)
    assert seen
    staged = [p for p in out.iterdir() if p.name.startswith(STAGING)]
    committed = [p for p in staged if (p / COMMIT).is_file()]
    mixed = _titles(out, allow_mixed=True) == {"OLD-SET", "NEW-SET"}
    assert not mixed or committed, "a mixed set with nothing to finish it"
    r = subprocess.run([sys.executable, "-m", "rootcause", "report", str(out / "attribution.json"),
                        "--format", "json"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    titles = _titles(out)
    assert len(titles) == 1, f"a mixed set after settling: {titles}"
    assert not [p for p in out.iterdir() if p.name.startswith(STAGING)]
    if titles == {"OLD-SET"}:
        assert _digests(out) == before
    print(f"delay {delay_ms} ms: set {titles.pop()}, staging left by the kill: {bool(staged)}, "
          f"committed: {bool(committed)}, mixed before settling: {mixed}")


def test_settle_finishes_a_committed_set(previous):
    """A writer killed between its renames, made exactly: a committed staging folder holding the
    two files not yet renamed. The next write_set into the folder finishes it before its own."""
    out, _ = previous
    staging = out / (STAGING + "dead")
    staging.mkdir()
    (staging / WRITER).write_text("1")
    for name in SET[1:]:
        (staging / name).write_text((out / name).read_text().replace("OLD-SET", "NEW-SET"))
    (out / SET[0]).write_text((out / SET[0]).read_text().replace("OLD-SET", "NEW-SET"))
    (staging / COMMIT).write_text(json.dumps(list(SET)))
    assert _titles(out, allow_mixed=True) == {"OLD-SET", "NEW-SET"}
    write_set(out, {"other.txt": "x\n"})
    assert _titles(out) == {"NEW-SET"} and not staging.exists()
    (out / "other.txt").unlink()


def test_settle_drops_an_uncommitted_staging_folder(previous):
    out, before = previous
    staging = out / (STAGING + "dead")
    staging.mkdir()
    (staging / WRITER).write_text("1")
    (staging / SET[0]).write_text("half")
    settle(out)
    assert not staging.exists() and _digests(out) == before


def test_settle_leaves_a_folder_write_set_did_not_make(previous):
    """A folder of the user's that only shares the staging prefix holds no writer record: a
    reader's settle (report) and a writer's leave it and everything in it."""
    out, before = previous
    mine = out / (STAGING + "mine")
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    settle(out)
    write_set(out, {"other.txt": "x\n"})
    assert (mine / "notes.txt").read_text() == "keep"
    (out / "other.txt").unlink()


def test_exchange_swaps_two_folders_in_one_step(tmp_path):
    """fileio.exchange, which publishes a bundle over the previous one: after it each name holds
    the other's files (where the system has no atomic exchange it says so, and nothing moved)."""
    from rootcause.fileio import exchange

    a, b = tmp_path / "a", tmp_path / "b"
    (a / "sub").mkdir(parents=True)
    (a / "sub" / "x").write_text("from a")
    b.mkdir()
    (b / "manifest.json").write_text("from b")
    if not exchange(a, b):
        assert (a / "sub" / "x").read_text() == "from a" and (b / "manifest.json").read_text() == "from b"
        pytest.skip("no atomic exchange on this system")
    assert sorted(p.name for p in a.iterdir()) == ["manifest.json"] and (a / "manifest.json").read_text() == "from b"
    assert (b / "sub" / "x").read_text() == "from a"
    with pytest.raises(OSError):
        exchange(a, tmp_path / "missing")  # both names must exist


def test_what_a_process_finished_is_kept_bounded(tmp_path, monkeypatch):
    """A long sweep writes many sets: the record an interrupted command reads keeps the first
    FINISHED_KEPT paths and counts the rest, and the interrupt line counts them all."""
    from rootcause import cli, fileio

    monkeypatch.setattr(fileio, "_finished", {})
    monkeypatch.setattr(fileio, "_finished_more", 0)
    sets = fileio.FINISHED_KEPT + 7
    for i in range(sets):
        write_set(tmp_path / f"set{i}", {"a.json": "{}"})
    write_set(tmp_path / "set0", {"a.json": "{}"})  # written again: one path, counted once
    paths, more = fileio.finished()
    assert len(paths) == fileio.FINISHED_KEPT and more == 7
    assert paths[0] == tmp_path / "set0" / "a.json"
    line = cli._interrupted()
    assert line.startswith(f"interrupted; kept {tmp_path / 'set0' / 'a.json'}, ")
    assert f" and {sets - 4} more (each whole;" in line


def test_settle_removes_an_empty_staging_folder_of_a_writer_killed_before_marking_it(previous):
    """A writer killed between making its staging folder and writing its mark leaves the folder
    empty (the kill at 0 ms above, under load): settle removes it. A folder of the same prefix that
    holds anything, or whose name mkdtemp would not make, is left."""
    import tempfile

    out, before = previous
    empty = Path(tempfile.mkdtemp(prefix=STAGING, dir=out))
    named = out / (STAGING + "mine")
    named.mkdir()
    holding = Path(tempfile.mkdtemp(prefix=STAGING, dir=out))
    (holding / "notes.txt").write_text("keep")
    settle(out)
    assert not empty.exists() and named.is_dir()
    assert (holding / "notes.txt").read_text() == "keep"
    assert _digests(out) == before


def test_text_is_written_as_its_utf8_a_piece_at_a_time(tmp_path):
    """Text longer than one piece, with a character of two bytes and an undecodable name's escape
    on the pieces' boundary, is the file's bytes exactly as one encode of the whole gives them."""
    from rootcause import fileio

    piece = fileio._PIECE
    text = "a" * (piece - 1) + "\u00e9\udcff" + "\u00fc" * piece + "z"
    write_set(tmp_path, {"t.txt": text, "b.bin": b"\x00\xff"})
    assert (tmp_path / "t.txt").read_bytes() == text.encode("utf-8", errors="backslashreplace")
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\xff"


def test_json_text_reads_back_as_written():
    """A real attribution reads back equal (the standard library's reader), NumPy scalars as their
    values, a path as its text, a name as UTF-8, and NaN as null (JSON has no NaN)."""
    import numpy as np

    from rootcause.fileio import json_text

    doc = json.loads((ROOT / "gallery" / "pool_fusion_h200_cupti" / "attribution.json").read_text(encoding="utf-8"))
    assert json.loads(json_text(doc)) == doc
    odd = {"f": np.float64(0.1), "i": np.int64(3), "b": np.bool_(False), "p": Path("a/b"), "name": "caf\u00e9",
           "nan": float("nan"), "inf": float("inf"), "small": 1e-7}
    text = json_text(odd)
    assert json.loads(text) == {"f": 0.1, "i": 3, "b": False, "p": "a/b", "name": "caf\u00e9", "nan": None,
                                "inf": None, "small": 1e-7}
    assert text.endswith("}\n") and '\n  "f": 0.1,\n' in text
    # an undecodable byte of a file name (a lone surrogate) is written as its \udcXX escape
    odd["name"] = os.fsdecode(b"trace\xff.json")
    assert json.loads(json_text(odd))["name"] == odd["name"] and json.loads(json_text(odd))["nan"] is None
