"""`rootcause build SPEC --out DIR`: build one variant spec into a bundle, reusing cached builds.

The cache key hashes the resolved spec, the bytes of every file it names (source, overrides,
reference, input files), the compiler versions and the rootcause version, so an edited source
or a new compiler never reuses a stale build. Cache: $ROOTCAUSE_CACHE or ~/.cache/rootcause.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from importlib import metadata
from pathlib import Path

import rootcause
from rootcause import bundle, spec as spec_mod
from rootcause.errors import UsageError
from rootcause.frontends import frontend
from rootcause.spec import VariantSpec


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", help="variant spec: file.toml or file.toml#NAME")
    parser.add_argument("--out", required=True, type=Path, help="bundle directory to write")
    parser.add_argument("--target", help="override the spec's target (e.g. llvm, cuda:sm_90)")
    parser.add_argument("--no-cache", action="store_true", help="build even if a cached build exists")


def run(args: argparse.Namespace) -> int:
    spec = spec_mod.load(args.spec)
    if args.target:
        spec = spec_mod.with_target(spec, args.target)
    out = build_bundle(spec, args.out, use_cache=not args.no_cache)
    print(out)
    return 0


def cache_dir() -> Path:
    return Path(os.environ.get("ROOTCAUSE_CACHE", Path.home() / ".cache" / "rootcause"))


def cache_key(spec: VariantSpec) -> str:
    """Hash of everything that decides the build's output."""
    h = hashlib.sha256()
    resolved = spec.to_dict()
    resolved.pop("spec_file")
    h.update(json.dumps(resolved, sort_keys=True).encode())
    files = [spec.source, *spec.tvm.schedule_overrides.values(), *(i.file for i in spec.inputs if i.file),
             *spec.iree.substitute_configurations.values()]
    if spec.reference:
        files.append(spec.reference.file)
    for path in files:
        h.update(str(path).encode() + b"\0" + Path(path).read_bytes())
    h.update(json.dumps(_compiler_versions(spec), sort_keys=True).encode())
    h.update(rootcause.__version__.encode())
    h.update(Path(frontend(spec.frontend).__file__).read_bytes())  # a frontend change invalidates its builds
    return h.hexdigest()[:16]


def _compiler_versions(spec: VariantSpec) -> dict[str, str | None]:
    from rootcause import toolchain

    names = {"tvm": ("apache-tvm",), "iree": ("iree-base-compiler",)}[spec.frontend]
    out: dict[str, str | None] = {}
    for dist in names:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    if spec.target.startswith("cuda"):
        out["nvcc"] = str(toolchain.find_tool("nvcc"))
        out["nvcc_version"] = toolchain.tool_version("nvcc")
    return out


def build_bundle(spec: VariantSpec, out: Path, use_cache: bool = True) -> Path:
    """Build (or reuse) the variant, then write the bundle at `out`."""
    key = cache_key(spec)
    cached = cache_dir() / "builds" / key
    if use_cache and (cached / "manifest.json").is_file():
        print(f"reused cached build {key}", file=sys.stderr)
    else:
        staging = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=_mkdir(cache_dir() / "builds")))
        try:
            built = frontend(spec.frontend).build(spec, staging / "build")
            bundle.write_bundle(spec, built, staging / "build", staging / "bundle", key)
            shutil.rmtree(cached, ignore_errors=True)
            os.replace(staging / "bundle", cached)  # atomic: a half build is never 'cached'
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    _publish(cached, Path(out))
    return Path(out)


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _publish(cached: Path, out: Path) -> None:
    if out.exists():
        if not (out / "manifest.json").is_file() and any(out.iterdir()):
            raise UsageError(f"{out}: exists and is not a bundle; refusing to overwrite it")
        shutil.rmtree(out)
    shutil.copytree(cached, out)
