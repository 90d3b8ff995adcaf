"""A bundle loaded with its frontend's runtime, on this host's device (no compiler imported).

A bundle records the runtime its module needs (manifest `toolchain.runtime`, e.g. an IREE module
of compiler 3.3.0 needs iree-base-runtime 3.3.0). When this process has another version, the
bundle is loaded in a child process of an environment that has it (`runtime_python`): the build's
own environment when it is here, else one made from the registry or from the runtime wheels
carried in the bundle (rootcause.envs). A RemoteSession drives the child over pipes; the child
makes the calls and times them itself, so the interleaved protocol measures the same thing as
in process, with no pipe in the timed region.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

from rootcause import envs, frontends
from rootcause.artifacts.bundle import MANIFEST, Bundle, read_bundle
from rootcause.errors import UsageError
from rootcause.frontends.base import Session
from rootcause.inputs import to_dtype


def load_session(bundle: Bundle | Any, device: str | None = None) -> Session:
    """Load a bundle (a Bundle or its directory) with its frontend's runtime on `device`
    (default: the device its target runs on); in a child of another environment when the
    bundle needs another runtime version than this process has."""
    if not isinstance(bundle, Bundle):
        bundle = read_bundle(bundle)
    if bundle.frontend not in frontends.names():
        raise UsageError(f"{bundle.path / MANIFEST}: frontend: unknown {bundle.frontend!r} "
                         f"({'|'.join(frontends.names())})")
    device = device or frontends.default_device(bundle.target)
    python = runtime_python(bundle)
    if python is not None:
        return RemoteSession(bundle, device, python)
    return frontends.get(bundle.frontend).load_session(bundle, device)


def runtime_mismatch(bundle: Bundle) -> dict[str, tuple[str, str | None]]:
    """{distribution: (the bundle's version, this process's)} for each runtime package that differs.
    A bundle built by the installed compiler, on a host whose runtime pip does not know (a
    runtime-only copy, gpu/README.md), is taken as matching: nothing says otherwise."""
    record = bundle.toolchain
    want = record.get("runtime") or {}
    out = {d: (v, envs.installed_version(d)) for d, v in want.items() if v and envs.installed_version(d) != v}
    if record.get("source") == "installed" and all(have is None for _, have in out.values()):
        return {}
    return out


def runtime_python(bundle: Bundle) -> Path | None:
    """None when this process has the bundle's runtime; else the python of an environment that
    has it (made when needed). UsageError when none can be had."""
    differ = runtime_mismatch(bundle)
    if not differ:
        return None
    record = bundle.toolchain
    want = {d: v for d, (v, _) in differ.items()}
    built = Path(record.get("python") or "")
    if built.is_file() and _has(built, want):
        return built
    if record.get("requirements") and not any(r.endswith(".whl") for r in record["requirements"]):
        found = envs.cached_python(record["requirements"])
        if found is not None:
            return found
    requirements = [_carried_wheel(bundle, d) or f"{d}=={v}" for d, v in (record.get("runtime") or {}).items()]
    wants = ", ".join(f"{d} {v} (here: {have or 'none'})" for d, (v, have) in differ.items())
    try:
        python = envs.ensure(requirements, progress=f" to run {bundle.name}")
    except UsageError as err:
        raise UsageError(f"{bundle.path}: needs {wants} and no environment with it can be made: {err}") from None
    if not _has(python, want):  # e.g. a carried wheel of another version
        raise UsageError(f"{bundle.path}: needs {wants}; the environment made from "
                         f"{', '.join(Path(r).name for r in requirements)} has "
                         f"{envs.installed_versions(python, tuple(want))}")
    return python


def _has(python: Path, want: dict[str, str]) -> bool:
    try:
        return envs.installed_versions(python, tuple(want)) == want
    except UsageError:
        return False


def _carried_wheel(bundle: Bundle, dist: str) -> str | None:
    """A runtime wheel the bundle carries (toolchain/NAME-VERSION-*.whl), as an absolute path."""
    for wheel in sorted((bundle.path / "toolchain").glob("*.whl")):
        if envs.normalize(wheel.name.split("-", 1)[0]) == dist:
            return str(wheel.resolve())
    return None


def cpu_profile(bundle: Bundle, out_dir: Path, calls: int) -> dict[str, Any]:
    """The frontend's CPU profile of a bundle, taken with the bundle's runtime (its tools are the
    runtime's): in this process, or in a child of the environment runtime_python names."""
    python = runtime_python(bundle)
    if python is None:
        return frontends.get(bundle.frontend).cpu_profile(bundle.path, out_dir, calls)
    proc = subprocess.run([str(python), "-m", "rootcause.sessions", "--cpu-profile", str(bundle.path), str(out_dir),
                           str(calls)], capture_output=True, text=True, env=envs.checkout_env())
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = [x for x in proc.stderr.splitlines() if x.strip()] or ["no output"]
        raise UsageError(f"{bundle.path}: CPU profile with {python} failed: {tail[-1].strip()}")
    return json.loads(lines[-1])


def _cpu_profile_child(argv: list[str]) -> int:
    bundle = read_bundle(argv[0])
    try:
        record = frontends.get(bundle.frontend).cpu_profile(bundle.path, Path(argv[1]), int(argv[2]))
    except UsageError as err:
        print(err, file=sys.stderr)
        return 2
    print(json.dumps(record))
    return 0


# ---- a session in another environment ------------------------------------------------------

def _save_array(array: np.ndarray, path: Path) -> dict[str, Any]:
    np.ascontiguousarray(array).tofile(path)  # raw bytes: bfloat16/fp8 survive (no .npy header)
    return {"file": str(path), "dtype": array.dtype.name, "shape": list(array.shape)}


def _load_array(row: dict[str, Any]) -> np.ndarray:
    return np.fromfile(row["file"], dtype=to_dtype(row["dtype"])).reshape(row["shape"])


class RemoteSession:
    """A Session whose bundle is loaded by `python -m rootcause.sessions --serve` in another
    environment; arrays cross as raw files in a private folder, requests as JSON lines."""

    def __init__(self, bundle: Bundle, device: str, python: Path):
        self.bundle, self.python = bundle, python
        self._dir = Path(tempfile.mkdtemp(prefix="rootcause-session-"))
        self._log = open(self._dir / "stderr.log", "w+")
        self._proc = subprocess.Popen([str(python), "-m", "rootcause.sessions", "--serve", str(bundle.path),
                                       "--device", device], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._log, text=True, env=envs.checkout_env())
        hello = self._request(None)
        self.device = hello["device"]
        self.timer_includes = f"{hello['timer_includes']} (in a child process of {python})"

    def _request(self, request: dict[str, Any] | None) -> dict[str, Any]:
        if request is not None:
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            self._log.seek(0)
            lines = [x for x in self._log.read().splitlines() if x.strip()] or ["no output"]
            raise UsageError(f"{self.bundle.path}: the runtime child ({self.python}) ended: {lines[-1].strip()}")
        reply = json.loads(line)
        if "error" in reply:
            raise UsageError(reply["error"])
        return reply

    def set_inputs(self, arrays: list[np.ndarray]) -> None:
        rows = [_save_array(a, self._dir / f"in{i}.bin") for i, a in enumerate(arrays)]
        self._request({"op": "set_inputs", "arrays": rows})
        for row in rows:
            Path(row["file"]).unlink()

    def call(self) -> None:
        self._request({"op": "call"})

    def outputs(self) -> list[np.ndarray]:
        rows = self._request({"op": "outputs", "dir": str(self._dir)})["arrays"]
        out = [_load_array(row) for row in rows]
        for row in rows:
            Path(row["file"]).unlink()
        return out

    def timer(self, number: int = 10) -> Callable[[], float]:
        def sample() -> float:
            return float(self._request({"op": "time", "number": number})["seconds"])
        return sample

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                self._proc.stdin.write(json.dumps({"op": "close"}) + "\n")
                self._proc.stdin.close()
                self._proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
        self._log.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the child ends with its stdin
            pass


def _serve(argv: list[str]) -> int:
    """RemoteSession's child: load the bundle here, answer one JSON line per request line."""
    p = argparse.ArgumentParser(prog="python -m rootcause.sessions --serve")
    p.add_argument("--serve", required=True, type=Path)
    p.add_argument("--device", required=True)
    args = p.parse_args(argv)
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything the runtime prints goes to stderr, not into the replies

    def reply(obj: dict[str, Any]) -> None:
        replies.write(json.dumps(obj) + "\n")
        replies.flush()

    try:
        session = frontends.get((bundle := read_bundle(args.serve)).frontend).load_session(bundle, args.device)
    except UsageError as err:
        reply({"error": str(err)})
        return 2
    reply({"device": session.device, "timer_includes": getattr(session, "timer_includes", "not recorded")})
    samplers: dict[int, Callable[[], float]] = {}
    for line in sys.stdin:
        request = json.loads(line)
        op = request["op"]
        try:
            if op == "close":
                break
            if op == "set_inputs":
                session.set_inputs([_load_array(row) for row in request["arrays"]])
                reply({})
            elif op == "call":
                session.call()
                reply({})
            elif op == "outputs":
                folder = Path(request["dir"])
                reply({"arrays": [_save_array(a, folder / f"out{i}.bin") for i, a in enumerate(session.outputs())]})
            elif op == "time":
                number = int(request["number"])
                sampler = samplers.setdefault(number, session.timer(number))
                reply({"seconds": sampler()})
            else:
                reply({"error": f"unknown request {op!r}"})
        except UsageError as err:
            reply({"error": str(err)})
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--cpu-profile"]:
        sys.exit(_cpu_profile_child(sys.argv[2:]))
    sys.exit(_serve(sys.argv[1:]))
