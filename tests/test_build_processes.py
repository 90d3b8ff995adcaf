"""`rootcause build` as processes: a signal ends the TVM build child and removes the staging
folder; builds racing into one --out each finish and leave one whole bundle.

Real TVM builds of the pool_fusion case for llvm (fixtures/cases/pool_fusion), in their own
cache folder. A bundle is whole when its files are, byte for byte, those of the cache entry its
manifest names (the build publishes copies of that entry)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.procs import alive, children, cmdline

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "fixtures" / "cases" / "pool_fusion" / "variants.toml"
WORKER = "rootcause.frontends.tvm.build"


def _env(cache: Path) -> dict[str, str]:
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, "ROOTCAUSE_CACHE": str(cache), "PYTHONPATH": path}


def _build(cache: Path, variant: str, out: Path, *extra: str) -> subprocess.Popen:
    # A child inherits an ignored SIGINT, and something earlier in the suite leaves this process
    # ignoring it (the SIGINT test passed alone and failed in the whole suite, the build running to
    # its end); a handled one is reset at exec to the default, as a terminal's Ctrl-C finds it.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen([sys.executable, "-m", "rootcause", "build", f"{SPEC}#{variant}", "--target", "llvm",
                                 "--out", str(out), *extra], env=_env(cache), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("sig,status", [(signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGINT, 130)])
def test_signal_ends_the_tvm_build_child_and_cleans_staging(tmp_path, sig, status):
    cache, out = tmp_path / "cache", tmp_path / "bundle"
    proc = _build(cache, "on", out, "--no-cache")
    deadline = time.monotonic() + 120
    worker = None
    while worker is None and time.monotonic() < deadline and proc.poll() is None:
        worker = next((c for c in children(proc.pid) if WORKER in cmdline(c)), None)
        time.sleep(0.05)
    assert worker is not None, "the TVM build child never started"
    staging = [p for p in (cache / "builds").iterdir() if p.name.startswith(".")]
    assert staging and (staging[0] / "build" / "build_request.json").is_file()
    time.sleep(1.0)  # into the build: TVM imported, passes running
    assert alive(worker)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == status, err
    assert "Traceback" not in err
    assert err.splitlines()[-1] == "rootcause build: interrupted; nothing was written (what was being written is removed)"
    assert not alive(worker), f"TVM build child {worker} still running"
    assert [p.name for p in (cache / "builds").iterdir()] == []  # no staging, no half entry
    assert not out.exists()


@pytest.mark.slow


def test_an_interrupted_analyze_says_it_kept_as_bundle_and_keeps_it_whole(tmp_path):
    """^C while B builds: the line names A's published bundle, which is whole, and nothing else."""
    cache, out = tmp_path / "cache", tmp_path / "out"
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "rootcause", "analyze", f"{SPEC}#on", f"{SPEC}#off",
                                 "--target", "llvm", "--no-confirm", "--out", str(out)], env=_env(cache),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    bundle = out / "bundles" / "pool_fusion-on"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if (bundle / "manifest.json").is_file() and any(WORKER in cmdline(c) for c in children(proc.pid)):
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[1]
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.splitlines()[-1].startswith(f"rootcause analyze: interrupted; kept {bundle} (each whole;"), err
    assert _whole(bundle, cache) == "pool_fusion-on"
    assert sorted(p.name for p in (out / "bundles").iterdir()) == ["pool_fusion-on"]


def test_a_build_on_a_terminal_shows_its_step_and_the_seconds_so_far(tmp_path):
    """On a terminal (a pty here), `rootcause build` redraws one line: the variant, the TVM pass it
    is in and the seconds so far; the line is erased at the end. Through a pipe nothing is drawn."""
    import pty

    primary, secondary = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "rootcause", "build", f"{SPEC}#off", "--target", "llvm",
                             "--no-cache", "--out", str(tmp_path / "bundle")], env=_env(tmp_path / "cache"),
                            stdout=subprocess.PIPE, stderr=secondary, text=True)
    os.close(secondary)
    seen = b""
    while True:
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    proc.wait(timeout=600)
    os.close(primary)
    text = seen.decode(errors="replace")
    assert proc.returncode == 0, text
    assert "building pool_fusion-off for llvm" in text
    drawn = [part for part in text.split("\r\x1b[K") if part.startswith("building pool_fusion-off: ")]
    steps = {part.split(": ", 1)[1].rsplit(" (", 1)[0] for part in drawn if ": " in part}
    assert {"starting the TVM build child (importing TVM)", "TVM relax.build (code generation)"} <= steps, text
    assert all(part.rstrip().endswith(" s)") for part in drawn), drawn
    assert not any("FuseOps (" in part for part in drawn), "a skipped pass was shown as running"
    piped = _build(tmp_path / "cache", "off", tmp_path / "again", "--no-cache")
    _, err = piped.communicate(timeout=600)
    assert piped.returncode == 0 and "\x1b[K" not in err and "TVM pass" not in err, err


def _whole(out: Path, cache: Path) -> str:
    """The bundle's name, after checking that out holds exactly its cache entry's files, plus the
    record of what rootcause wrote there, which lists exactly those."""
    manifest = json.loads((out / "manifest.json").read_text())
    entry = cache / "builds" / manifest["cache_key"]
    files = lambda root: {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    published = files(out)
    owned = json.loads(published.pop(".rootcause-owned"))
    assert published == files(entry) and sorted(owned) == sorted(published)
    return manifest["name"]


@pytest.mark.parametrize("variants,extra", [(("on", "on"), ()), (("on", "off"), ()), (("off", "on"), ()),
                                           (("on", "on"), ("--no-cache",))])
@pytest.mark.slow
def test_two_builds_into_one_out(tmp_path_factory, variants, extra):
    cache = tmp_path_factory.getbasetemp() / "race-cache"  # shared: the first pair builds, later ones also reuse
    out = tmp_path_factory.mktemp("race") / "bundle"
    procs = [_build(cache, v, out, *extra) for v in variants]
    results = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, results):
        assert p.returncode == 0, err
    assert _whole(out, cache) in {f"pool_fusion-{v}" for v in variants} | set(variants)
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no publishing leftovers
    assert not [p for p in (cache / "builds").iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("delay_ms", [0, 1, 3])
def test_sigkill_while_publishing_leaves_a_whole_bundle(tmp_path_factory, delay_ms):
    """Killed as it copies the cached bundle next to --out: out stays the previous bundle (or,
    after the renames, the new one), never a folder without its manifest."""
    from tests.test_write_sets import _wait_created, _watch

    cache = tmp_path_factory.getbasetemp() / "race-cache"
    out = tmp_path_factory.mktemp("publish") / "bundle"
    for variant in ("off", "on"):  # both cached; the previous result is 'on'
        proc = _build(cache, variant, out)
        assert proc.wait(timeout=600) == 0, proc.stderr.read()
    fd = _watch(out.parent)
    try:
        proc = _build(cache, "off", out)
        seen = _wait_created(fd, ".bundle.", time.monotonic() + 60)
        time.sleep(delay_ms / 1000)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        os.close(fd)
    assert seen
    assert _whole(out, cache) in {"pool_fusion-on", "pool_fusion-off"}
