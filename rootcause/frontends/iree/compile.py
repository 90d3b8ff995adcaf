"""iree-compile: where it is, its version, and the command line a spec compiles with."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from rootcause.child import first_error_line
from rootcause.errors import ToolFailed, UsageError

DEDUP_PASS = "iree-flow-deduplicate-executables"
# Phases kept in the bundle; executable-targets and vm repeat the binaries and are large.
KEEP_PHASES = ("input", "global-optimization", "dispatch-creation", "flow", "stream", "hal")


def iree_compile_path() -> Path:
    """The iree-compile of the installed iree-base-compiler wheel."""
    try:
        from iree.compiler.tools import binaries
        found = binaries.find_tool("iree-compile")
    except Exception:  # the package absent or its lookup failing: try next to python
        found = None
    if found:
        return Path(found)
    beside = Path(sys.executable).parent / "iree-compile"
    if beside.is_file():
        return beside
    raise UsageError("iree-compile not found: install iree-base-compiler (rootcause[compilers])")


def compiler_version() -> str:
    try:
        from iree.compiler import version
        return f"{version.VERSION} ({version.REVISIONS.get('IREE', '?')[:12]})"
    except Exception:
        out = subprocess.run([str(iree_compile_path()), "--version"], capture_output=True, text=True)
        return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "unknown"


def target_flags(target: str, where: str = "target") -> list[str]:
    """iree-compile flags for a spec target: 'cuda:sm_80', 'rocm:gfx942' or 'llvm'."""
    kind, _, arch = target.partition(":")
    if kind == "cuda" and arch:
        return ["--iree-hal-target-device=cuda", f"--iree-cuda-target={arch}"]
    if kind == "rocm" and arch:
        return ["--iree-hal-target-device=hip", f"--iree-rocm-target={arch}"]
    if target == "llvm":
        # generic x86-64, so the module runs on any CI host (local-task driver)
        return ["--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
                "--iree-llvmcpu-target-cpu=generic"]
    raise UsageError(f"{where}: the IREE frontend needs 'cuda:sm_XX', 'rocm:gfxNNN' or 'llvm', "
                     f"got {target!r}")


def check_flags(spec: Any) -> None:
    """The spec's checked flags against the options this iree-compile has (--help-hidden): a name
    it does not know (a typo) and a free-form string option (options.check_string_options) are
    refused before anything compiles; unchecked_flags are the user's call."""
    from rootcause.frontends.iree.options import check_string_options

    checked = spec.options.flags[:len(spec.options.flags) - len(spec.options.unchecked_flags)]
    if not checked:
        return
    proc = subprocess.run([str(iree_compile_path()), "--help-hidden"], capture_output=True, text=True)
    where = spec.where("iree", "flags") if hasattr(spec, "where") else "[iree] flags"
    check_option_names(checked, proc.stdout, where)
    check_string_options(checked, proc.stdout, where)


def check_option_names(flags: list[str], help_text: str, where: str) -> None:
    """UsageError for a flag whose name is not one of the options help_text (iree-compile's
    --help-hidden) lists, with the closest name it does list. An empty help text checks nothing."""
    import re

    from rootcause.names import did_you_mean

    known = set(re.findall(r"^\s+(--[\w.-]+)", help_text, re.M))
    if not known:
        return
    for n, flag in enumerate(flags):
        name = flag.split("=", 1)[0]
        if name not in known:
            raise UsageError(f"{where}[{n}]: {name} is not an option of this iree-compile{did_you_mean(name, known)}")


def compile_command(spec: Any, out_dir: Path, substitutions: dict[str, Path] | None = None) -> list[str]:
    ir, binaries = out_dir / "ir", out_dir / "binaries"
    cmd = [str(iree_compile_path()), str(spec.source)]
    if spec.options.input_type:
        cmd.append(f"--iree-input-type={spec.options.input_type}")
    cmd += target_flags(spec.target, spec.where("", "target") if hasattr(spec, "where") else "target")
    cmd += [f"--iree-hal-dump-executable-configurations-to={ir}",
            f"--iree-hal-dump-executable-sources-to={ir}",
            f"--iree-hal-dump-executable-binaries-to={binaries}",
            f"--dump-compilation-phases-to={ir / 'phases'}",
            f"--mlir-print-ir-before={DEDUP_PASS}", "--mlir-elide-elementsattrs-if-larger=16"]
    cmd += [f"--iree-hal-substitute-executable-configuration={exe}={path}"
            for exe, path in (substitutions or {}).items()]
    cmd += list(spec.options.flags)
    cmd += ["-o", str(out_dir / "module.vmfb")]
    return cmd


def locations_command(spec: Any, out_file: Path) -> list[str]:
    """iree-compile up to the flow phase with MLIR locations printed: the same input, target and
    flags as the build, so its dispatches are the build's (catalog source_locs)."""
    cmd = [str(iree_compile_path()), str(spec.source)]
    if spec.options.input_type:
        cmd.append(f"--iree-input-type={spec.options.input_type}")
    cmd += target_flags(spec.target, spec.where("", "target") if hasattr(spec, "where") else "target")
    cmd += ["--compile-to=flow", "--mlir-print-debuginfo", "--mlir-elide-elementsattrs-if-larger=16",
            "--mlir-elide-resource-strings-if-larger=16", *spec.options.flags, "-o", str(out_file)]
    return cmd


def compile_error(source: Path, stderr: str, log: Path) -> ToolFailed:
    """iree-compile refused or failed: its first error line (with the MLIR location it names),
    and the log where the rest is kept."""
    return ToolFailed(f"{source}: iree-compile failed: {first_error_line(stderr)} (log: {log})")
