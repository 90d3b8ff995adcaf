"""Isolated Python environments, one per toolchain, in which a variant builds and runs.

A toolchain is a list of requirements, each 'PKG==VERSION' (a release from the package
registry) or the absolute path of a wheel file. Its environment is a venv under
<cache>/envs/<key> ($ROOTCAUSE_ENVS/<key> when set), the key hashing the requirements (a wheel by its bytes) and this
interpreter's version, made in a staging folder and renamed into place, so a half-made
environment is never used; `toolchain.json` inside it (written last) records what it holds.

The venv gets the toolchain's packages (with their own dependencies) and the dependencies
rootcause declares in pyproject.toml; rootcause itself is imported from this checkout
(PYTHONPATH), so a child run there is the same code as its parent. pip is this interpreter's
(`pip --python VENV`), so the venv needs none of its own.

Offline ($ROOTCAUSE_OFFLINE=1, a host with no package registry, such as the GPU host): only wheel
files install, without their dependencies (`--no-index --no-deps`), into a venv that also sees
this interpreter's packages (a .pth file adds its site-packages and $PYTHONPATH folders, after the
venv's own), so a runtime-only environment needs nothing but the runtime's wheel.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import site
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from rootcause.child import tied
from rootcause.errors import UsageError
from rootcause.fileio import cache_dir, read_json, write_json

ROOT = Path(__file__).resolve().parents[1]  # the checkout: rootcause/ and parsers/
READY = "toolchain.json"
INSTALL_REPORT = "pip-report.json"
# set for a toolchain environment's children: the python the user started rootcause with
USER_PYTHON_VAR = "ROOTCAUSE_USER_PYTHON"


def user_python() -> str:
    """The python the user started rootcause with, also inside a toolchain environment's child: a
    model's export runs there, where its framework (torch, jax) is installed; a toolchain
    environment holds the compiler and runtime alone."""
    return os.environ.get(USER_PYTHON_VAR) or sys.executable


def checkout_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a child that imports rootcause from this checkout and nothing else from
    the parent's path (its own site-packages decide the compiler and runtime)."""
    from rootcause.child import python_env

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    return python_env({"PYTHONPATH": str(ROOT), **(extra or {})}, base=env)


def wheel_sha(path: Path) -> str:
    return _file_sha(str(path), path.stat().st_size, path.stat().st_mtime_ns)


@functools.cache
def _file_sha(path: str, size: int, mtime: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def env_key(requirements: list[str]) -> str:
    """The cache key of a toolchain: its requirements (wheels by content), this Python's version."""
    parts = [f"wheel:{wheel_sha(Path(r))}" if r.endswith(".whl") else r for r in requirements]
    parts.append(f"python:{sys.version_info.major}.{sys.version_info.minor}")
    if offline():  # its packages come partly from this interpreter's
        parts.append(f"offline:{sys.prefix}:{os.environ.get('PYTHONPATH', '')}")
    return hashlib.sha256(json.dumps(sorted(parts)).encode()).hexdigest()[:16]


def offline() -> bool:
    """True when $ROOTCAUSE_OFFLINE asks for environments made from wheel files alone."""
    return os.environ.get("ROOTCAUSE_OFFLINE", "") not in ("", "0")


def envs_root() -> Path:
    """Where environments live: $ROOTCAUSE_ENVS, else <cache>/envs (they are large and slow to
    make, so a test session that gives builds a fresh cache can keep sharing them)."""
    return Path(os.environ["ROOTCAUSE_ENVS"]) if os.environ.get("ROOTCAUSE_ENVS") else cache_dir() / "envs"


def env_dir(requirements: list[str]) -> Path:
    return envs_root() / env_key(requirements)


def cached_python(requirements: list[str]) -> Path | None:
    """The python of the toolchain's environment when it is already made here, else None. An
    environment whose files changed since rootcause made it (a sitecustomize.py added, a module
    edited) is refused in one line: every build and run there would execute what was put in."""
    root = env_dir(requirements)
    if not (root / READY).is_file():
        return None
    check_unchanged(root)
    return root / "bin" / "python"


def digest(venv: Path) -> str:
    """sha256 over every file of the environment's lib/ (its site-packages; bytecode caches left
    out, Python rewrites them), by relative path and content."""
    h = hashlib.sha256()
    lib = venv / "lib"
    for path in sorted(p for p in lib.rglob("*") if p.is_file() or p.is_symlink()):
        if "__pycache__" in path.parts or path.suffix == ".pyc":
            continue
        h.update(str(path.relative_to(lib)).encode() + b"\0")
        h.update(os.readlink(path).encode() if path.is_symlink() else _content_sha(path).encode())
    return h.hexdigest()


def _content_sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def _checked(root: str, ready_mtime_ns: int) -> None:
    record = read_json(Path(root) / READY, "no record")
    expected = record.get("digest") if isinstance(record, dict) else None
    if expected is None:
        return  # made by an earlier rootcause, before environments recorded their digest
    if digest(Path(root)) != expected:
        raise UsageError(f"{root}: the cached environment changed since rootcause made it (its files differ from "
                         f"the digest in {READY}); remove the folder and it is made again")


def check_unchanged(root: Path) -> None:
    """UsageError when the environment at root no longer holds what it held when it was made."""
    _checked(str(root), (root / READY).stat().st_mtime_ns)


def ensure(requirements: list[str], progress: str = "") -> Path:
    """The python of the toolchain's environment, made (and cached) when it is not there yet."""
    found = cached_python(requirements)
    if found is not None:
        return found
    from rootcause import localcluster

    if localcluster.asks_outside():  # inside `--ray local`'s namespace: the registry is outside
        return Path(str(localcluster.ask_outside("ensure", requirements, progress)))
    missing = [r for r in requirements if not r.endswith(".whl")]
    if offline() and missing:
        raise UsageError(f"ROOTCAUSE_OFFLINE: {', '.join(missing)}: offline only wheel files install; carry "
                         "the wheel (a bundle's toolchain/ folder, or name it in the spec's toolchain)")
    root = env_dir(requirements)
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
    except OSError as err:
        raise UsageError(f"{root.parent}: cannot make toolchain environments here: {err.strerror or err}; set "
                         "ROOTCAUSE_ENVS (or ROOTCAUSE_CACHE) to a writable folder") from None
    try:
        print(f"rootcause: making the environment for {' '.join(_label(r) for r in requirements)}"
              f"{progress} ({root})", file=sys.stderr)
        _make(staging, requirements)
        _relocate_scripts(staging, root)
        write_json(staging / READY, {"requirements": requirements,
                                     "packages": installed_versions(staging / "bin" / "python"),
                                     "hashes": installed_hashes(staging),
                                     "digest": digest(staging)})
        try:
            os.replace(staging, root)  # atomic; fails when another process made it first
        except OSError:
            if cached_python(requirements) is None:
                raise
        else:
            root.chmod(0o755)  # mkdtemp made it private; other users of the cache run it too
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return root / "bin" / "python"


def _label(requirement: str) -> str:
    return Path(requirement).name if requirement.endswith(".whl") else requirement


def _make(staging: Path, requirements: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(staging)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise UsageError(f"cannot make a venv with {sys.executable}: {_last(proc.stderr)}")
    cmd = [sys.executable, "-m", "pip", "--python", str(staging / "bin" / "python"), "install", "--no-input",
           "--disable-pip-version-check", "-q"]
    if offline():
        _see_parent_packages(staging)
        cmd += ["--no-index", "--no-deps", *requirements]
    else:
        cmd += [*requirements, *rootcause_dependencies()]
    # pip checks each download against the sha256 the registry's index gives with it; the report
    # keeps those hashes (installed_hashes reads them into the environment's record)
    cmd += ["--report", str(staging / INSTALL_REPORT)]
    proc = subprocess.run(cmd, capture_output=True, text=True, **tied())
    if proc.returncode != 0:
        raise UsageError(f"pip cannot install {' '.join(_label(r) for r in requirements)} for Python "
                         f"{sys.version_info.major}.{sys.version_info.minor}: {_pip_error(proc.stderr)}")


def installed_hashes(venv: Path) -> dict[str, dict[str, str]]:
    """{name==version: {algorithm: hash}} of every archive pip installed into venv, as the
    registry's index gave them (pip --report); {} for what came from files (offline wheels)."""
    try:
        report = json.loads((venv / INSTALL_REPORT).read_text())
    except (OSError, ValueError):
        return {}
    out = {}
    for item in report.get("install") or []:
        meta, info = item.get("metadata") or {}, (item.get("download_info") or {}).get("archive_info") or {}
        if info.get("hashes"):
            out[f"{meta.get('name')}=={meta.get('version')}"] = dict(info["hashes"])
    return out


def _see_parent_packages(venv: Path) -> None:
    """A .pth in the venv's site-packages that adds this interpreter's site-packages and
    $PYTHONPATH folders after the venv's own (--system-site-packages would give the base
    interpreter's, not those of the venv this process may run in)."""
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = subprocess.run([str(venv / "bin" / "python"), "-I", "-c", code], capture_output=True, text=True,
                             check=True).stdout.strip()
    user = [site.getusersitepackages()] if site.ENABLE_USER_SITE else []
    pythonpath = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    folders = [p for p in dict.fromkeys([*pythonpath, *site.getsitepackages(), *user])
               if Path(p).is_dir() and Path(p).resolve() != ROOT]
    lines = [f"import site; site.addsitedir({p!r})" for p in folders]
    Path(purelib, "rootcause-parent.pth").write_text("\n".join(lines) + "\n")


def _relocate_scripts(staging: Path, final: Path) -> None:
    """Scripts pip wrote into bin/ name the staging python in their '#!' line: name the final one."""
    old, new = str(staging).encode(), str(final).encode()
    for script in (staging / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            data = script.read_bytes()
            if data.startswith(b"#!") and old in data.split(b"\n", 1)[0]:
                first, _, rest = data.partition(b"\n")
                script.write_bytes(first.replace(old, new) + b"\n" + rest)


@functools.cache
def rootcause_dependencies() -> tuple[str, ...]:
    """What pyproject.toml declares rootcause needs (a child imports rootcause from the checkout)."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return tuple(data["project"]["dependencies"])


def installed_version(dist: str) -> str | None:
    """The version of `dist` in this process's environment; None when it is not installed."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def installed_versions(python: Path, dists: tuple[str, ...] | None = None) -> dict[str, str | None]:
    """{distribution: version} of an environment's packages (all of them when dists is None);
    None for a named one it lacks."""
    code = ("import importlib.metadata as m, json, re, sys\n"
            "names = json.loads(sys.argv[1])\n"
            "if names is None:\n"
            "    found = {}\n"
            "    for d in m.distributions():  # in sys.path order: the first is what imports\n"
            "        found.setdefault(re.sub(r'[-_.]+', '-', d.metadata['Name']).lower(), d.version)\n"
            "    print(json.dumps(found))\n"
            "else:\n"
            "    def v(n):\n"
            "        try:\n"
            "            return m.version(n)\n"
            "        except m.PackageNotFoundError:\n"
            "            return None\n"
            "    print(json.dumps({n: v(n) for n in names}))\n")
    proc = subprocess.run([str(python), "-I", "-c", code, json.dumps(list(dists) if dists is not None else None)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise UsageError(f"{python}: cannot list its packages: {_last(proc.stderr)}")
    found = json.loads(proc.stdout)
    return {normalize(k): v for k, v in found.items()} if dists is None else found


def normalize(name: str) -> str:
    """A distribution name as the registry compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def outside_calls() -> dict[str, Callable[..., object]]:
    """What a `--ray local` child, whose namespace has no route to the registry, asks of the
    rootcause outside it (localcluster.run_private) by name; values as JSON."""
    return {"ensure": lambda requirements, progress: str(ensure(list(requirements), str(progress))),
            "versions": lambda dist: list(registry_versions(str(dist)))}


@functools.cache
def registry_versions(dist: str) -> tuple[str, ...]:
    """The released versions of a distribution that install on this Python, oldest first
    (`pip index versions`: the registry pip is configured with)."""
    from rootcause import localcluster

    if localcluster.asks_outside():  # inside `--ray local`'s namespace: the registry is outside
        return tuple(str(v) for v in localcluster.ask_outside("versions", dist))  # type: ignore[union-attr]
    proc = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "--disable-pip-version-check", dist],
                          capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("Available versions:"):
            return tuple(sorted((v.strip() for v in line.split(":", 1)[1].split(",") if v.strip()),
                                key=version_key))
    raise UsageError(f"{dist}: the package registry lists no versions for Python "
                     f"{sys.version_info.major}.{sys.version_info.minor}: {_pip_error(proc.stderr)}")


_PRE = {"a": 0, "b": 1, "rc": 2}


def version_key(version: str) -> tuple[Any, ...]:
    """Sort key of a PEP 440 version (release, pre-release, post, dev; local parts ignored)."""
    m = re.match(r"^v?([0-9]+(?:\.[0-9]+)*)(?:(a|b|rc)([0-9]+))?(?:\.post([0-9]+))?(?:\.dev([0-9]+))?",
                 version.strip())
    if m is None:
        return ((), (9, 0), -1, (1, 0), version)
    release = tuple(int(x) for x in m.group(1).split("."))
    release += (0,) * (6 - len(release))
    pre = (_PRE[m.group(2)], int(m.group(3))) if m.group(2) else (9, 0)
    post = int(m.group(4)) if m.group(4) else -1
    dev = (0, int(m.group(5))) if m.group(5) else (1, 0)
    if m.group(5) and not m.group(2) and not m.group(4):
        pre = (-1, 0)  # 1.0.dev1 sorts before 1.0a1
    return (release, pre, post, dev, "")


def is_prerelease(version: str) -> bool:
    return bool(re.search(r"(a|b|rc|\.dev)[0-9]+", version))


def _last(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no output"


def _pip_error(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines()
             if line.strip() and not line.startswith("WARNING: Location")]
    errors = [line for line in lines if line.startswith("ERROR")]
    return (errors or lines or ["no output"])[0]
