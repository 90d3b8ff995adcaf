"""The build stage: one variant spec into a bundle (`rootcause build`), reusing cached builds.

The cache key hashes the resolved spec, the bytes of every file it names (source, overrides,
reference, input files), the compiler versions and the rootcause version, so an edited source
or a new compiler never reuses a stale build. Cache: $ROOTCAUSE_CACHE or ~/.cache/rootcause.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from importlib import metadata
from pathlib import Path

import rootcause
from rootcause import frontends
from rootcause.artifacts.bundle import write_bundle
from rootcause.errors import UsageError
from rootcause.fileio import locked
from rootcause.spec import VariantSpec
from rootcause.verify import reference_outputs


def cache_dir() -> Path:
    return Path(os.environ.get("ROOTCAUSE_CACHE", Path.home() / ".cache" / "rootcause"))


def cache_key(spec: VariantSpec) -> str:
    """Hash of everything that decides the build's output."""
    h = hashlib.sha256()
    resolved = spec.to_dict()
    resolved.pop("spec_file")
    h.update(json.dumps(resolved, sort_keys=True).encode())
    frontend = frontends.get(spec.frontend)
    files = [spec.source, *frontend.input_files(spec), *(i.file for i in spec.inputs if i.file)]
    if spec.reference:
        files.append(spec.reference.file)
    for path in files:
        h.update(str(path).encode() + b"\0" + Path(path).read_bytes())
    h.update(json.dumps(_compiler_versions(spec), sort_keys=True).encode())
    h.update(rootcause.__version__.encode())
    origin = Path(importlib.util.find_spec(frontends.FRONTENDS[spec.frontend]).origin)
    sources = sorted(origin.parent.rglob("*.py")) if origin.name == "__init__.py" else [origin]
    for path in sources:  # a frontend change invalidates its builds
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def _compiler_versions(spec: VariantSpec) -> dict[str, str | None]:
    from rootcause import toolchain

    out: dict[str, str | None] = {}
    for dist in frontends.get(spec.frontend).compiler_packages:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    if spec.target.startswith("cuda"):
        out["nvcc"] = str(toolchain.find_tool("nvcc"))
        out["nvcc_version"] = toolchain.tool_version("nvcc")
    return out


def build_bundle(spec: VariantSpec, out: Path, use_cache: bool = True) -> Path:
    """Build (or reuse) the variant, then publish the bundle at `out`.

    Concurrent builds take turns: one lock per cache entry (a second build of the same spec
    waits, then reuses the first's), and one per output folder."""
    key = cache_key(spec)
    cached = cache_dir() / "builds" / key
    out = Path(out)
    with locked(cache_dir() / "locks" / f"{key}.lock"):
        if use_cache and (cached / "manifest.json").is_file():
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
        built = frontends.get(spec.frontend).build(spec, staging / "build")
        write_bundle(spec, built, staging / "build", staging / "bundle", key, reference_outputs)
        shutil.rmtree(cached, ignore_errors=True)
        os.replace(staging / "bundle", cached)  # atomic: a half build is never 'cached'
    except UsageError as err:
        raise _keep_logs(err, staging / "build", key) from None
    finally:  # also on SIGTERM (cli turns it into an exception) and ^C
        shutil.rmtree(staging, ignore_errors=True)


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _publish(cached: Path, out: Path) -> None:
    """Copy the cached bundle to a hidden folder beside out, then rename it into place: an
    interrupted copy never leaves `out` half a bundle (or a bundle without its manifest)."""
    if out.exists() and not (out / "manifest.json").is_file() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out}: exists and is not a bundle; refusing to overwrite it")
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=_mkdir(out.parent)))
    except OSError as err:
        raise UsageError(f"{out.parent}: cannot write the bundle here: {err.strerror or err}") from None
    try:
        shutil.copytree(cached, staging / "bundle")
        if out.exists():
            os.replace(out, staging / "old")  # a kill between the renames leaves no bundle, never half of one
        os.replace(staging / "bundle", out)
    except OSError as err:
        raise UsageError(f"{out}: cannot write the bundle: {err.strerror or err}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _keep_logs(err: UsageError, build_dir: Path, key: str) -> UsageError:
    """The failed build's logs copied out of the staging folder (which is removed), and the
    error's message pointing at the copies."""
    text = str(err)
    logs = _mkdir(cache_dir() / "logs")
    for log in sorted(build_dir.glob("*.log")):
        kept = logs / f"{key}.{log.name}"
        shutil.copy2(log, kept)
        text = text.replace(str(log), str(kept))
    return UsageError(text)
