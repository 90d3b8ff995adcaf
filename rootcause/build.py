"""The build stage: one variant spec into a bundle (`rootcause build`), reusing cached builds.

The cache key hashes the resolved spec, the bytes of every file it names (source, overrides,
reference, input files), the compiler versions and the rootcause version, so an edited source
or a new compiler never reuses a stale build. Cache: $ROOTCAUSE_CACHE or ~/.cache/rootcause.

A spec that names a toolchain (`toolchain` pins or wheels, or `python`) builds in a child of that
environment (`python -m rootcause.build --child REQUEST OUT`, rootcause.envs makes it); the key
then holds the pins (wheels by content) or the named environment's versions. Every manifest
records the compiler and runtime that built it (`toolchain`), which `rootcause run` matches.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import rootcause
from rootcause import child, cuda_tools, envs, frontends, toolchains
from rootcause.artifacts import handoff
from rootcause.artifacts.bundle import is_bundle, write_bundle
from rootcause.errors import InternalError, ToolFailed, UsageError
from rootcause.fileio import (cache_dir, check_replaceable, exchange, locked, make_folder, mark_owned, note_finished,
                              write_atomic)
from rootcause.model import BuildOutput, CatalogKernel
from rootcause.spec import InputSpec, VariantSpec
from rootcause.terminal import ticker
from rootcause.verify import reference_outputs


def cache_key(spec: VariantSpec) -> str:
    """Hash of everything that decides the build's output. Computed once per process for a spec
    whose files are unchanged (the check before building and the build both ask)."""
    resolved = spec.to_dict()
    resolved.pop("spec_file")
    resolved_json = json.dumps(resolved, sort_keys=True)
    frontend = frontends.get(spec.frontend)
    files = [spec.source, *frontend.input_files(spec), *(i.file for i in spec.inputs if i.file)]
    if spec.reference:
        files.append(spec.reference.file)
    stats = [(str(p), os.stat(p)) for p in files]
    stamp = (resolved_json, tuple((p, st.st_mtime_ns, st.st_size) for p, st in stats))
    if stamp not in _KEYS:
        _KEYS[stamp] = _hash_build_inputs(spec, resolved_json, files)
    return _KEYS[stamp]


_KEYS: dict[tuple, str] = {}  # cache_key's answers in this process, by spec and file stamps


def _hash_build_inputs(spec: VariantSpec, resolved_json: str, files: list) -> str:
    h = hashlib.sha256()
    h.update(resolved_json.encode())
    for path in files:
        h.update(str(path).encode() + b"\0" + Path(path).read_bytes())
    h.update(json.dumps(toolchains.compiler_versions(spec), sort_keys=True).encode())
    h.update(json.dumps([f"wheel:{envs.wheel_sha(Path(r))}" if r.endswith(".whl") else r
                         for r in spec.toolchain]).encode())
    h.update(rootcause.__version__.encode())
    origin = Path(importlib.util.find_spec(frontends.module_of(spec.frontend)).origin)
    sources = sorted(origin.parent.rglob("*.py")) if origin.name == "__init__.py" else [origin]
    # a change to the frontend, or to what writes a bundle's catalog and inputs (the readers of
    # compiler output, the exporters, the bundle writer), invalidates the builds
    here = Path(__file__).parent
    sources += sorted((here.parent / "parsers").glob("*.py")) + sorted((here / "exporters").glob("*.py"))
    sources += [here / "artifacts" / "bundle.py", here / "inputs.py"]
    for path in sources:
        if path.is_file():
            h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def check_before_build(specs: list[VariantSpec]) -> None:
    """What each frontend checks with its installed compiler (pass and option names), for every
    variant before the first build starts: a typo in B is one line, not a line after building A.
    A variant with its own toolchain or python is checked by its build, in that environment, and
    one already in the build cache (or checked before in this process) passed."""
    for spec in specs:
        check = getattr(frontends.get(spec.frontend), "check_with_compiler", None)
        if check is None or spec.toolchain or spec.python is not None:
            continue
        key = cache_key(spec)
        if key not in _CHECKED and not is_bundle(cache_dir() / "builds" / key):
            check(spec)
        _CHECKED.add(key)


_CHECKED: set[str] = set()  # cache keys of the specs check_before_build passed in this process


def build_bundle(spec: VariantSpec, out: Path, use_cache: bool = True) -> Path:
    """Build (or reuse) the variant, then publish the bundle at `out`.

    Concurrent builds take turns: one lock per cache entry (a second build of the same spec
    waits, then reuses the first's), and one per output folder."""
    key = cache_key(spec)
    cached = cache_dir() / "builds" / key
    out = Path(out)
    with locked(cache_dir() / "locks" / f"{key}.lock"):
        if use_cache and is_bundle(cached):
            print(f"reused cached build {key}", file=sys.stderr)
        else:
            _build_into(spec, key, cached)
        out_key = hashlib.sha256(str(out.absolute()).encode()).hexdigest()[:16]
        with locked(cache_dir() / "locks" / f"out-{out_key}.lock"):
            _publish(cached, out)
    return out


def _build_into(spec: VariantSpec, key: str, cached: Path) -> None:
    staging = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=_mkdir(cache_dir() / "builds")))
    try:
        python = toolchains.build_python(spec)
        with ticker(f"building {spec.name}", lambda: handoff.read_step(staging / "build")):
            if python is None:
                built = frontends.get(spec.frontend).build(spec, staging / "build")
            else:
                built = build_in(python, spec, staging / "build")
        record = toolchains.toolchain_record(spec, python)
        toolchains.carry_runtime_wheels(spec, record, staging / "bundle")
        write_bundle(spec, built, staging / "build", staging / "bundle", key, reference_outputs, record)
        shutil.rmtree(cached, ignore_errors=True)
        os.replace(staging / "bundle", cached)  # atomic: a half build is never 'cached'
    except (UsageError, ToolFailed, InternalError) as err:
        raise _keep_logs(err, staging / "build", key) from None
    finally:  # also on SIGTERM (cli turns it into an exception) and ^C
        shutil.rmtree(staging, ignore_errors=True)





def build_in(python: Path, spec: VariantSpec, out_dir: Path) -> BuildOutput:
    """frontend.build run by another environment's python; its BuildOutput read back."""
    out_dir.mkdir(parents=True, exist_ok=True)
    request = handoff.write_spec_request(out_dir, "toolchain", spec)
    extra = {envs.USER_PYTHON_VAR: envs.user_python()}
    cuda = cuda_tools.cuda_root() if spec.target.startswith("cuda") else None
    if cuda is not None:
        extra[cuda_tools.CUDA_ROOT_VAR] = str(cuda)
    proc = child.run([str(python), "-m", "rootcause.build", "--child", str(request), str(out_dir)],
                     env=child.python_env(base=envs.checkout_env(extra)))
    request.unlink()
    log = write_atomic(handoff.log_file(out_dir, "toolchain"), proc.stdout + proc.stderr)
    result = child.result(proc, handoff.result_file(out_dir, "toolchain"),
                          f"the build of '{spec.name}' with {python}", log)
    inputs = result.get("inputs")
    return BuildOutput(module_path=out_dir / result["module_path"],
                       kernels=[CatalogKernel.from_dict(k) for k in result["kernels"]],
                       ir_files=[out_dir / p for p in result["ir_files"]],
                       binary_files=[out_dir / p for p in result["binary_files"]],
                       versions=result["versions"], notes=result["notes"],
                       inputs=None if inputs is None else [InputSpec.from_dict(i) for i in inputs])


def _child(request: Path, out_dir: Path) -> int:
    """build_in's child: build in this environment; the BuildOutput (paths relative) as its result."""
    def work() -> dict[str, Any]:
        spec = handoff.read_spec_request(request)
        built = frontends.get(spec.frontend).build(spec, out_dir)

        def rel(p: Path) -> str:
            return str(Path(p).relative_to(out_dir))

        return {"module_path": rel(built.module_path), "kernels": [k.to_dict() for k in built.kernels],
                "ir_files": [rel(p) for p in built.ir_files], "binary_files": [rel(p) for p in built.binary_files],
                "versions": built.versions, "notes": built.notes,
                "inputs": None if built.inputs is None else [dataclasses.asdict(i) for i in built.inputs]}

    return child.serve(work, handoff.result_file(out_dir, "toolchain"))


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _publish(cached: Path, out: Path) -> None:
    """Copy the cached bundle to a hidden folder beside out, then swap it into place (fileio.exchange):
    an interrupted copy never leaves `out` half a bundle (or a bundle without its manifest), nor,
    where the swap is atomic, without a bundle."""
    check_replaceable(out, "bundle")
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=make_folder(out.parent)))
    except OSError as err:
        raise UsageError(f"{out.parent}: cannot write the bundle here: {err.strerror or err}") from None
    try:
        shutil.copytree(cached, staging / "bundle")
        mark_owned(staging / "bundle")
        if not out.exists():
            os.replace(staging / "bundle", out)
        elif not exchange(staging / "bundle", out):  # atomic where it can: out is always a whole bundle
            os.replace(out, staging / "old")  # else a kill between the renames leaves no bundle, never half of one
            os.replace(staging / "bundle", out)
        note_finished([out])
    except OSError as err:
        raise UsageError(f"{out}: cannot write the bundle: {err.strerror or err}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _keep_logs(err: Exception, build_dir: Path, key: str) -> Exception:
    """The failed build's logs copied out of the staging folder (which is removed), and the
    error, of the same type, with its message pointing at the copies."""
    text = str(err)
    logs = _mkdir(cache_dir() / "logs")
    for log in sorted(build_dir.glob("*.log")):
        kept = logs / f"{key}.{log.name}"
        shutil.copy2(log, kept)
        text = text.replace(str(log), str(kept))
    if isinstance(err, InternalError):
        return InternalError(text, err.log and err.log.replace(str(build_dir), str(logs)))
    return type(err)(text)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        sys.exit(_child(Path(sys.argv[2]), Path(sys.argv[3])))
    print("usage: python -m rootcause.build --child REQUEST OUT_DIR", file=sys.stderr)
    sys.exit(2)
