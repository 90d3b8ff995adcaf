"""Stage a pair built by two compiler releases for the GPU host, with a runtime wheel per side.

    python gpu/stage_versions.py ANALYZE_OUT CARRY [--spec-a A --spec-b B --target T]

Run here (the CPU build machine, with network): builds the pair with
`rootcause analyze A B --bundle-only --no-confirm --target T --out ANALYZE_OUT` (defaults: the
iree_versions case, 3.8.0 against 3.12.0, cuda:sm_80: IREE 3.13 and earlier have no sm_90),
then writes CARRY/payload.tar.xz holding
  bundles/NAME/             each bundle, with the cp312 wheel of the runtime its manifest names
                            in toolchain/ (the H200 host has Python 3.12 and no registry);
  whl/                      cupti-python and pyelftools, which the host lacks;
  code/                     rootcause/, parsers/ and pyproject.toml of this checkout;
and CARRY/host.sh (gpu/host_versions.sh). The wheels are rewritten uncompressed, and without
IREE's Tracy build, by gpu/strip_wheel.py, so that xz packs them small (the device call carries
little). On the host, ROOTCAUSE_OFFLINE=1 makes each bundle's runtime environment from its
carried wheel (rootcause.envs); afterwards `analyze A B --out ANALYZE_OUT --from-run RUN` here.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CASE = ROOT / "fixtures" / "cases" / "iree_versions" / "variants.toml"
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
             "manylinux_2_17_x86_64", "manylinux2014_x86_64"]
HOST_TOOLS = ["cupti-python==13.4.0", "pyelftools==0.33"]
DROP = {"iree-base-runtime": ["iree/_runtime_libs_tracy/"]}  # loaded only with IREE_PY_RUNTIME=tracy


def _run(cmd: list[str]) -> None:
    print("+", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, cwd=ROOT)


def cp312_wheel(requirement: str, folder: Path) -> Path:
    """The cp312 manylinux wheel of one pinned requirement, rewritten uncompressed (and stripped)."""
    dist = requirement.split("==")[0]
    raw = folder / "raw" / dist
    shutil.rmtree(raw, ignore_errors=True)
    raw.mkdir(parents=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
           "3.12", "--implementation", "cp", "-d", str(raw), requirement]
    for plat in PLATFORMS:
        cmd += ["--platform", plat]
    _run(cmd)
    (wheel,) = raw.glob("*.whl")
    drops = [f"--drop={d}" for d in DROP.get(dist, [])]
    _run([sys.executable, str(HERE / "strip_wheel.py"), str(wheel), str(folder), "--store", *drops])
    return folder / wheel.name


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="gpu/stage_versions.py")
    p.add_argument("analyze_out", type=Path)
    p.add_argument("carry", type=Path)
    p.add_argument("--spec-a", default=f"{CASE}#v3_8_0")
    p.add_argument("--spec-b", default=f"{CASE}#v3_12_0")
    p.add_argument("--target", default="cuda:sm_80")
    args = p.parse_args(argv)
    _run([sys.executable, "-m", "rootcause", "analyze", args.spec_a, args.spec_b, "--bundle-only", "--no-confirm",
          "--target", args.target, "--out", str(args.analyze_out)])
    plan = json.loads((args.analyze_out / "plan.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        stage, wheels = Path(tmp) / "stage", Path(tmp) / "wheels"
        for name, rel in plan["bundles"].items():
            bundle = args.analyze_out / rel
            dest = stage / "bundles" / bundle.name
            shutil.copytree(bundle, dest)
            runtime = json.loads((bundle / "manifest.json").read_text())["toolchain"]["runtime"]
            (dest / "toolchain").mkdir(exist_ok=True)
            for dist, version in runtime.items():
                wheel = cp312_wheel(f"{dist}=={version}", wheels / name)
                shutil.copy2(wheel, dest / "toolchain" / wheel.name)
        for req in HOST_TOOLS:
            shutil.copy2(cp312_wheel(req, wheels / "host"), _mkdir(stage / "whl"))
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        for part in ("rootcause", "parsers"):
            shutil.copytree(ROOT / part, stage / "code" / part, ignore=ignore)
        shutil.copy2(ROOT / "pyproject.toml", stage / "code" / "pyproject.toml")
        args.carry.mkdir(parents=True, exist_ok=True)
        _run(["tar", "cJf", str(args.carry / "payload.tar.xz"), "-C", str(stage), "."])
    shutil.copy2(HERE / "host_versions.sh", args.carry / "host.sh")
    (args.carry / "host.sh").chmod(0o755)
    size = sum(f.stat().st_size for f in args.carry.rglob("*") if f.is_file())
    print(f"{args.carry}: {size / 2**20:.1f} MiB")
    return 0


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
