"""Stage a pair built by two compiler releases for the GPU host, with a runtime wheel per side.

    python gpu/stage_versions.py ANALYZE_OUT CARRY [--pair NAME SPEC_A SPEC_B TARGET]...

Run here (the CPU build machine, with network): builds each pair with
`rootcause analyze A B --bundle-only --no-confirm --target T --out ANALYZE_OUT/NAME` (default
pairs: iree_versions 3.8.0 against 3.12.0 for cuda:sm_80, as IREE 3.13 and earlier have no
sm_90; tvm_versions 0.26.0 against 0.27.0.post1 for cuda:sm_90), then writes
CARRY/payload.tar.xz holding
  bundles/NAME/BUNDLE/      each bundle, with cp312 wheels of the runtime its manifest names in
                            toolchain/ (the H200 host has Python 3.12 and no registry);
  whl/                      cupti-python and pyelftools, which the host lacks;
  code/                     rootcause/, parsers/ and pyproject.toml of this checkout;
and CARRY/host.sh (gpu/host_versions.sh). The wheels are rewritten uncompressed by
gpu/strip_wheel.py, without what a GPU run never loads (DROP: IREE's Tracy build and tools, TVM's
compiler library and sources), so that xz packs them small (the device call carries little). On the host, ROOTCAUSE_OFFLINE=1 makes each bundle's runtime environment from its
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
CASES = ROOT / "fixtures" / "cases"
PAIRS = [("iree", f"{CASES}/iree_versions/variants.toml#v3_8_0", f"{CASES}/iree_versions/variants.toml#v3_12_0",
          "cuda:sm_80"),
         ("tvm", f"{CASES}/tvm_versions/variants.toml#v0_26_0", f"{CASES}/tvm_versions/variants.toml#v0_27_0",
          "cuda:sm_90")]
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
             "manylinux_2_17_x86_64", "manylinux2014_x86_64"]
HOST_TOOLS = ["cupti-python==13.4.0", "pyelftools==0.33"]
# What a GPU run never loads: IREE's Tracy build (IREE_PY_RUNTIME=tracy) and command-line tools (the
# runner uses iree.runtime), TVM's compiler library, headers and sources (TVM_USE_RUNTIME_LIB=1).
IREE_TOOLS = ["benchmark-module", "benchmark-replay", "benchmark-executable", "run-replay", "run-module",
              "dump-module", "flatcc-cli", "as-module", "dump-replay"]
DROP = {"iree-base-runtime": ["iree/_runtime_libs_tracy/", *(f"iree/_runtime_libs/iree-{t}" for t in IREE_TOOLS)],
        "apache-tvm": ["tvm/lib/libtvm_compiler.so", "tvm/3rdparty/", "tvm/src/", "tvm/include/"],
        "apache-tvm-ffi": ["tvm_ffi/3rdparty/"]}


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
    p.add_argument("--pair", nargs=4, action="append", metavar=("NAME", "SPEC_A", "SPEC_B", "TARGET"))
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        stage, wheels = Path(tmp) / "stage", Path(tmp) / "wheels"
        for name, spec_a, spec_b, target in args.pair or PAIRS:
            out = args.analyze_out / name
            _run([sys.executable, "-m", "rootcause", "analyze", spec_a, spec_b, "--bundle-only", "--no-confirm",
                  "--target", target, "--out", str(out)])
            plan = json.loads((out / "plan.json").read_text())
            for variant, rel in plan["bundles"].items():
                bundle = out / rel
                dest = stage / "bundles" / name / bundle.name
                shutil.copytree(bundle, dest)
                record = json.loads((bundle / "manifest.json").read_text())["toolchain"]
                # a bundle of the installed compiler runs in the host's python: its runtime goes
                # with the host's wheels; a registry release's in its own toolchain/
                where = _mkdir(stage / "whl") if record["source"] == "installed" else _mkdir(dest / "toolchain")
                for dist, version in record["runtime"].items():
                    wheel = cp312_wheel(f"{dist}=={version}", wheels / variant)
                    shutil.copy2(wheel, where / wheel.name)
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
