"""A bundle loaded with its frontend's runtime, on this host's device (no compiler imported).

A bundle records the runtime its module needs (manifest `toolchain.runtime`, e.g. an IREE module
of compiler 3.3.0 needs iree-base-runtime 3.3.0). When this process has another version, the
bundle is loaded in a child process of an environment that has it (rootcause.toolchains.
runtime_python: the build's own environment when it is here, else one made from the registry or
from the runtime wheels carried in the bundle). A RemoteSession drives the child over pipes; the child
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

from rootcause import child, envs, frontends, toolchains
from rootcause.artifacts import handoff
from rootcause.artifacts.bundle import MANIFEST, Bundle, read_bundle
from rootcause.errors import InternalError, ToolFailed, UsageError
from rootcause.fileio import write_atomic
from rootcause.frontends.base import Session, profile_name
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
    python = toolchains.runtime_python(bundle)
    if python is not None:
        return RemoteSession(bundle, device, python)
    return frontends.get(bundle.frontend).load_session(bundle, device)


def cpu_profile(bundle: Bundle, out_dir: Path, calls: int) -> dict[str, Any]:
    """The frontend's CPU profile of a bundle, taken with the bundle's runtime (its tools are the
    runtime's): in this process, or in a child of the environment runtime_python names."""
    python = toolchains.runtime_python(bundle)
    if python is None:
        return frontends.get(bundle.frontend).cpu_profile(bundle.path, out_dir, calls)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    kind = profile_name(bundle.name, ".cpu-profile")
    envelope = handoff.result_file(out_dir, kind)
    proc = child.run([str(python), "-m", "rootcause.sessions", "--cpu-profile", str(bundle.path), str(out_dir),
                      str(calls), str(envelope)], env=envs.checkout_env())
    log = write_atomic(handoff.log_file(out_dir, kind), proc.stdout + proc.stderr)
    return child.result(proc, envelope, f"the CPU profile of {bundle.name} with {python}", log)


def _cpu_profile_child(argv: list[str]) -> int:
    bundle_dir, out_dir, calls, envelope = argv

    def work() -> dict[str, Any]:
        bundle = read_bundle(bundle_dir)
        return frontends.get(bundle.frontend).cpu_profile(bundle.path, Path(out_dir), int(calls))

    return child.serve(work, Path(envelope))


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
                                      stderr=self._log, text=True, env=envs.checkout_env(),
                                      **child.tied())
        hello = self._request(None)
        self.device = hello["device"]
        self.timer_includes = f"{hello['timer_includes']} (in a child process of {python})"

    def _request(self, request: dict[str, Any] | None) -> dict[str, Any]:
        line = ""
        try:
            if request is not None:
                self._proc.stdin.write(json.dumps(request) + "\n")
                self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        except BrokenPipeError:  # it ended before this request: the same failure as below
            pass
        if not line:  # the runtime took the child down (a crash, an abort): the tool's failure
            self._log.seek(0)
            raise ToolFailed(f"{self.bundle.name}: the runtime child ({self.python}) ended: "
                             f"{child.first_error_line(self._log.read())} (log: {self._log.name})")
        reply = json.loads(line)
        if reply.get("ok") is False:
            child.raise_failure(reply, f"the runtime of {self.bundle.name} ({self.python})")
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
    except Exception as err:  # noqa: BLE001  the parent raises it typed (child.raise_failure)
        reply(child.failure(_as_runtime_failure(err)))
        return 2 if isinstance(err, UsageError) else 3
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
                reply(child.failure(InternalError(f"unknown request {op!r}")))
        except Exception as err:  # noqa: BLE001  the runtime's failure, typed for the parent
            reply(child.failure(_as_runtime_failure(err)))
    return 0


def _as_runtime_failure(err: Exception) -> Exception:
    """This child only drives the bundle's runtime: what it raises, short of bad input, is the
    runtime's failure (exit 3 in the parent), its first error line quoted."""
    if isinstance(err, (UsageError, ToolFailed, InternalError)):
        return err
    return ToolFailed(f"{type(err).__name__}: {child.first_error_line(str(err) or type(err).__name__)}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--cpu-profile"]:
        sys.exit(_cpu_profile_child(sys.argv[2:]))
    sys.exit(_serve(sys.argv[1:]))
