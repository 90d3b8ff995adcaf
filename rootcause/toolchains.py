"""Which Python builds a variant and which runs a bundle: the installed compiler and runtime, or
a toolchain's own environment (rootcause.envs makes them). The CUDA tools (nvcc, ptxas) are
found by rootcause.cuda_tools.

A spec's `toolchain` (releases or wheels) or `python` (an existing environment) picks the build's
python (build_python); the bundle records what it was built with (toolchain_record, the
manifest's `toolchain`), and a host whose runtime differs from the bundle's loads it in an
environment that has it (runtime_python): the build's own, a cached one, or one made from the
registry or from the runtime wheels the bundle carries (carry_runtime_wheels).
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

from rootcause import envs, frontends, cuda_tools
from rootcause.artifacts.bundle import Bundle
from rootcause.errors import UsageError
from rootcause.spec import VariantSpec, pinned, toolchain_packages


def compiler_versions(spec: VariantSpec) -> dict[str, str | None]:
    """What keys a build besides its inputs: the compiler versions it gets (a toolchain's pins are
    in the key already), and nvcc for CUDA targets."""
    dists = frontends.get(spec.frontend).compiler_packages
    if spec.toolchain:
        out: dict[str, str | None] = {}  # the pins are in the key
    elif spec.python:
        out = envs.installed_versions(spec.python, tuple(dists))
    else:
        out = {dist: envs.installed_version(dist) for dist in dists}
    if spec.target.startswith("cuda"):
        out["nvcc"] = str(cuda_tools.find_tool("nvcc"))
        out["nvcc_version"] = cuda_tools.tool_version("nvcc")
    return out


def toolchain_requirements(spec: VariantSpec) -> list[str]:
    """The spec's toolchain completed with the runtime its modules need: each runtime package
    released with the compiler (frontend `versioned_with_compiler`) that it does not pin gets
    the compiler's version, or the newest release of the same major.minor below it
    (iree-base-compiler 3.7.1 has iree-base-runtime 3.7.0)."""
    compiler, _ = toolchain_packages(spec.frontend)
    named = {pinned(r)[0]: pinned(r)[1] for r in spec.toolchain}
    version = next(named[d] for d in compiler if d in named)
    out = list(spec.toolchain)
    for dist in getattr(frontends.get(spec.frontend), "versioned_with_compiler", ()):
        if dist in named:
            continue
        releases = envs.registry_versions(dist)
        if version in releases:
            out.append(f"{dist}=={version}")
            continue
        same = [v for v in releases if v.split(".")[:2] == version.split(".")[:2]
                and envs.version_key(v) <= envs.version_key(version)]
        if not same:
            raise UsageError(f"{spec.where('', 'toolchain')}: the registry has no {dist} for {version} (nor an "
                             f"earlier {'.'.join(version.split('.')[:2])}.x); name its wheel in toolchain")
        out.append(f"{dist}=={same[-1]}")
    return out


def build_python(spec: VariantSpec) -> Path | None:
    """The python a spec builds with: its `python`, its toolchain's environment, or None (this one)."""
    if spec.python:
        return spec.python
    if spec.toolchain:
        return envs.ensure(toolchain_requirements(spec))
    return None


def toolchain_record(spec: VariantSpec, python: Path | None) -> dict[str, Any]:
    """The manifest's `toolchain`: where the build ran and the compiler and runtime versions it
    used ({distribution: version}); a GPU host matches `runtime` against its own."""
    compiler, runtime = toolchain_packages(spec.frontend)
    dists = tuple(dict.fromkeys(compiler + runtime))
    if python is None:
        versions = {d: envs.installed_version(d) for d in dists}
        source, requirements = "installed", []
    else:
        versions = envs.installed_versions(python, dists)
        source = "python" if spec.python else ("wheel" if any(r.endswith(".whl") for r in spec.toolchain)
                                               else "registry")
        requirements = toolchain_requirements(spec) if spec.toolchain else []
    return {"source": source, "requirements": requirements, "python": str(python) if python else sys.executable,
            "compiler": {d: versions[d] for d in compiler}, "runtime": {d: versions[d] for d in runtime}}


def carry_runtime_wheels(spec: VariantSpec, record: dict[str, Any], bundle_dir: Path) -> None:
    """Runtime wheels the toolchain names travel in the bundle (toolchain/), so a GPU host without
    them can make the runtime-only environment (runtime_python)."""
    for req in record.get("requirements") or []:
        if req.endswith(".whl") and pinned(req) and pinned(req)[0] in record.get("runtime", {}) \
                and pinned(req)[0] not in record.get("compiler", {}):
            (bundle_dir / "toolchain").mkdir(parents=True, exist_ok=True)
            shutil.copy2(req, bundle_dir / "toolchain" / Path(req).name)


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
