"""Command-line conventions a new user expects: `report` does not print a page of HTML into a
terminal (it does into a pipe or a file)."""
from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
ATTRIBUTION = ROOT / "gallery" / "pool_fusion_h200_cupti" / "attribution.json"


def test_report_refuses_html_to_a_terminal():
    leader, follower = pty.openpty()
    try:
        done = subprocess.run([sys.executable, "-m", "rootcause", "report", str(ATTRIBUTION)], stdout=follower,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(follower)
        os.close(leader)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--out" in lines[0], done.stderr


def test_report_writes_html_into_a_pipe():
    done = subprocess.run([sys.executable, "-m", "rootcause", "report", str(ATTRIBUTION)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.lstrip().lower().startswith("<!doctype html")


def test_compare_output_into_a_pipe_is_whole(tmp_path):
    """What `compare` prints reaches a block-buffered pipe whole: the command ends its process
    without the interpreter's teardown, after flushing its output (a few KB, less than the
    buffer: unflushed, it would be lost whole)."""
    import json

    from rootcause.artifacts.attribution import REPORT_FILES
    from rootcause.report import render_text

    traces = ROOT / "fixtures" / "captures" / "published-traces" / "tracelens"
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    done = subprocess.run([sys.executable, "-m", "rootcause", "compare",
                           str(traces / "h100.gaunernst_bert-small-uncased__1016001.json.gz"),
                           str(traces / "mi300.gaunernst_bert-small-uncased__1016001.json.gz"), "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    wrote = "wrote " + ", ".join(str(out / name) for name in REPORT_FILES)
    assert done.stdout == render_text(json.loads((out / "attribution.json").read_text())) + "\n\n" + wrote + "\n"


def test_help_imports_no_analysis_or_runtime():
    """`rootcause COMMAND --help` builds one parser: it must not import pandas, a compiler or a
    runtime (they made `analyze --help` take 0.6 s; benchmarks/README.md has the times). Read
    from the interpreter's own import log, so the test does not depend on the machine's load."""
    from rootcause.cli import COMMANDS

    heavy = ("pandas", "tvm", "iree", "torch", "jax", "ray", "plotly")
    for command in ["", *COMMANDS]:
        argv = [sys.executable, "-X", "importtime", "-m", "rootcause", *([command] if command else []), "--help"]
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr[-500:]
        imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in proc.stderr.splitlines()
                    if line.startswith("import time:")}
        assert not imported & set(heavy), (command, sorted(imported & set(heavy)))


def test_sniffing_imports_no_other_formats_dependencies():
    """Reading a Chrome trace asks every format before it whether the bytes are its own (the
    Nsight Systems reader first): asking must not import that reader's dependencies (sqlite3 is
    about a MiB of a small compare's peak memory). Read in a fresh interpreter's sys.modules."""
    trace = ROOT / "fixtures" / "captures" / "published-traces" / "tracelens" / "h100.gaunernst_bert-small-uncased__1016001.json.gz"
    script = ("import sys; from rootcause.profilers import load_capture; print(load_capture(sys.argv[1]).format, "
              "'parsers.nsys_sqlite' in sys.modules, 'sqlite3' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", script, str(trace)], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-500:]
    assert proc.stdout.split() == ["chrome", "True", "False"]  # the reader was asked; sqlite3 not imported


def _complete(*words: str, shell: str = "bash") -> list[str]:
    """What the completion script offers for `rootcause WORDS...` (the last word being typed), in
    a real bash."""
    script = subprocess.run([sys.executable, "-m", "rootcause", "completion", shell], capture_output=True,
                            text=True, check=True, cwd=ROOT).stdout
    line = " ".join(repr(w) for w in ("rootcause", *words))
    program = f'{script}\nCOMP_WORDS=({line}); COMP_CWORD={len(words)}; _rootcause; printf "%s\\n" "${{COMPREPLY[@]}}"'
    proc = subprocess.run(["bash", "-c", program], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return [w for w in proc.stdout.splitlines() if w]


@pytest.mark.slow


def test_completion_offers_what_the_parsers_accept(tmp_path):
    """Commands, each command's flags and a flag's choices, as argparse itself reads them; files
    elsewhere. The old names of renamed flags work but are not offered."""
    import argparse
    import importlib

    from rootcause.commands import COMMANDS

    assert _complete("an") == ["analyze"] and "completion" in _complete("")
    for name, (module, _) in COMMANDS.items():
        parser = argparse.ArgumentParser()
        importlib.import_module(module).add_arguments(parser)
        for action in parser._actions:
            for flag in [s for s in action.option_strings if s.startswith("--")][:1]:
                assert flag in _complete(name, flag[:4]), (name, flag)
            if action.choices and action.option_strings:
                assert _complete(name, action.option_strings[0], "") == [str(c) for c in action.choices]
    assert "--device" not in _complete("analyze", "--dev") and "--device" in _complete("run", "--dev")
    (tmp_path / "spec.toml").write_text("")
    assert _complete("analyze", str(tmp_path / "sp")) == [str(tmp_path / "spec.toml")]


_TIMING = ("import time\nfrom rootcause.measure import measure_interleaved\n"
           "def timer(n):\n    return lambda: (time.sleep(0.002), 0.001)[1]\n"
           "r = measure_interleaved({'a': timer, 'b': timer}, 1.5)\nprint(r['blocks_run'] > 0)\n")


def _timing_stderr(terminal: bool) -> str:
    """stderr of a 1.5 s interleaved timing loop, written to a terminal (a pty) or a pipe."""
    if not terminal:
        done = subprocess.run([sys.executable, "-c", _TIMING], capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert done.stdout.strip() == "True", done.stderr
        return done.stderr
    import fcntl
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal of 100 columns
    try:
        done = subprocess.run([sys.executable, "-c", _TIMING], stdout=subprocess.PIPE, stderr=follower, text=True,
                              timeout=60, cwd=ROOT)
        os.close(follower)
        chunks = []
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the pty's other end is closed: everything was read
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(leader)
    assert done.stdout.strip() == "True"
    return b"".join(chunks).decode(errors="replace")


def test_timing_shows_a_progress_bar_on_a_terminal_only():
    """The timing loop, the longest step of a run, draws a bar of its budget's seconds on a
    terminal; a log or a pipe gets nothing of it."""
    assert "timing a, b" in _timing_stderr(terminal=True)
    assert _timing_stderr(terminal=False) == ""
