"""The spec's [iree] table: iree-compile flags, substituted executable configurations, and the
input type and function name where the source does not say them.

Flags must belong to iree-compile's own codegen option families unless listed under
`unchecked_flags` (kept apart so a report can name them): a spec is data, and an option that
reads, writes or loads a file would let it reach outside the compile.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rootcause.errors import UsageError
from rootcause.spec import SpecFiles, string_list, table_keys

KEYS = ("flags", "unchecked_flags", "input_type", "function", "substitute_configurations")
# iree-compile option families that only steer code generation. Within them, an option whose
# name has one of the _UNSAFE_WORDS reads, writes, loads or runs something outside the compile.
FLAG_FAMILIES = ("--iree-", "--mlir-elide-", "--mlir-print-", "--mlir-disable-threading",
                 "--mlir-timing", "--mlir-pass-statistics")
_UNSAFE_WORDS = frozenset((
    "path", "paths", "dir", "file", "files", "filename", "dump", "plugin", "plugins", "library", "link",
    "linker", "output", "preprocess", "preprocessing", "substitute", "reproducer", "object", "objects",
    "bc", "bitcode", "import", "listing", "debugger", "pipeline", "jit", "stacktrace", "tree",
    "export", "splat", "parameter", "parameters", "params", "ptxas", "dotgraph", "archive"))
# The options that take a free-form string (iree-compile --help-hidden types them '=<string>') and
# are allowed: each names a target, a feature list, a device or dispatches. Their values must be
# names (NAME_VALUE); every other string-typed option is refused at build time
# (check_string_options), since a string is where a path or a program goes.
NAME_OPTIONS = frozenset((
    "--iree-cuda-target", "--iree-cuda-target-features", "--iree-rocm-target", "--iree-rocm-target-features",
    "--iree-vulkan-target", "--iree-vulkan-target-features", "--iree-gpu-test-target",
    "--iree-hal-target-device", "--iree-hal-target-backends", "--iree-hal-default-device",
    "--iree-hal-local-target-device-backends", "--iree-hal-local-host-device-backends", "--iree-input-type",
    "--iree-llvmcpu-target-cpu", "--iree-llvmcpu-target-cpu-features", "--iree-llvmcpu-target-triple",
    "--iree-llvmcpu-target-abi", "--iree-llvmcpu-target-data-layout", "--iree-llvmcpu-vscale-range",
    "--iree-llvmcpu-enable-ukernels", "--iree-llvmcpu-enable-llvm-ukernels", "--iree-rocm-enable-ukernels",
    "--iree-rocm-encoding-layout-resolver", "--iree-flow-break-dispatch", "--iree-flow-trace-dispatch"))
NAME_VALUE = re.compile(r"^[A-Za-z0-9_.,:+@=<>-]*$")  # no '/', '~' or spaces: never a path or command


@dataclass
class IreeOptions:
    flags: list[str] = field(default_factory=list)  # every flag iree-compile gets, unchecked ones last
    input_type: str | None = None
    function: str | None = None
    # executable -> configured hal.executable .mlir (--iree-hal-substitute-executable-configuration)
    substitute_configurations: dict[str, Path] = field(default_factory=dict)
    # flags the spec passes outside the allowlist (unchecked_flags): also in `flags`
    unchecked_flags: list[str] = field(default_factory=list)


def from_dict(d: dict[str, Any]) -> IreeOptions:
    """Inverse of dataclasses.asdict (a spec handed to a child as JSON)."""
    subs = {k: Path(v) for k, v in d.get("substitute_configurations", {}).items()}
    return IreeOptions(**{**d, "substitute_configurations": subs})


def unsafe_flag(flag: str) -> str | None:
    """Why an iree-compile flag is refused (None: it only steers code generation)."""
    name = flag.split("=", 1)[0]
    if not name.startswith("--"):
        return "not a --option (a bare word is an input file to iree-compile)"
    if not name.startswith(FLAG_FAMILIES):
        return f"not one of iree-compile's codegen option families ({', '.join(FLAG_FAMILIES)})"
    words = set(re.split(r"[-_]", name[2:]))
    bad = sorted(words & _UNSAFE_WORDS)
    if bad:
        return f"'{bad[0]}' options read, write, load or run files outside the compile"
    if any(c in flag for c in "\n\r\0"):
        return "holds a control character"
    value = flag.partition("=")[2]
    if not NAME_VALUE.match(value):
        return "its value is not a name, number or list of them (a path or a command is never a codegen option)"
    return None


def check_string_options(flags: list[str], help_text: str, where: str) -> None:
    """UsageError for a flag that iree-compile types as a free-form string (a '=<string>' option in
    help_text, its --help-hidden) and that is not one of NAME_OPTIONS: the allowlist at its kind,
    read from the compiler that will run (a release adds options the static check cannot know)."""
    typed = set(re.findall(r"^\s+(--[\w-]+)=<(?:string|filename|path)>", help_text, re.M))
    for n, flag in enumerate(flags):
        name = flag.split("=", 1)[0]
        if name in typed and name not in NAME_OPTIONS:
            raise UsageError(f"{where}[{n}]: {flag!r} refused: iree-compile types {name} as a free-form string "
                             "(a path or program goes there), not one of the name-valued options; if you mean "
                             "it, move it to [iree] unchecked_flags (the report names them)")


def check(table: Any, place: Callable[[str | None], str], files: SpecFiles) -> IreeOptions:
    table_keys(table, KEYS, place)
    for key in ("input_type", "function"):
        if key in table and (not isinstance(table[key], str) or not re.match(r"^[A-Za-z0-9_.$-]+$", table[key])):
            raise UsageError(f"{place(key)}: must be a name (letters, digits, _ . $ -), got {table[key]!r}")
    where = place("substitute_configurations")
    raw = table.get("substitute_configurations", {})
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise UsageError(f"{where}: must be a table executable = 'configured.mlir'")
    subs = {}
    for exe, rel in raw.items():
        path = files.existing(rel, f"{where}.{exe}")
        if path.suffix not in (".mlir", ".mlirbc"):
            raise UsageError(f"{where}.{exe}: must be a .mlir or .mlirbc hal.executable, got {rel}")
        subs[exe] = path
    flags = string_list(table, "flags", place("flags"))
    for n, flag in enumerate(flags):
        why = unsafe_flag(flag)
        if why:
            raise UsageError(f"{place('flags')}[{n}]: {flag!r} refused: {why}; if you mean it, move "
                             "it to [iree] unchecked_flags (the report names them)")
    unchecked = string_list(table, "unchecked_flags", place("unchecked_flags"))
    for n, flag in enumerate(unchecked):
        if not flag.startswith("-") or any(c in flag for c in "\n\r\0"):
            raise UsageError(f"{place('unchecked_flags')}[{n}]: {flag!r} is not an option "
                             "(must start with '-', one line)")
    return IreeOptions(flags + unchecked, table.get("input_type"), table.get("function"), subs, unchecked)


def mlir_params(text: str, function: str) -> list[tuple[list[int | str] | None, str]] | None:
    """(shape, element type) of each argument of `func.func @function` in MLIR text: tensor<AxBxT>
    or torch's !torch.vtensor<[A,B],T> ('?' and -1 dims kept as strings, shape None for a
    scalar); None when the text has no such function."""
    m = re.search(rf"func\.func\s+(?:public\s+|private\s+)?@{re.escape(function)}\s*\((.*?)\)\s*(?:->|attributes|\{{)",
                  text, re.S)
    if m is None:
        return None
    out: list[tuple[list[int | str] | None, str]] = []
    for arg in re.split(r"%[\w.$-]+\s*:\s*", m.group(1))[1:]:
        tensor = re.match(r"\s*tensor<([^>]*)>", arg)
        torch = re.match(r"\s*!torch\.vtensor<\[([^\]]*)\]\s*,\s*(\w+)>", arg)
        if tensor:
            *dims, dtype = tensor.group(1).split("x")
        elif torch:
            dims, dtype = [d for d in torch.group(1).split(",") if d.strip()], torch.group(2)
        else:
            dims, dtype = None, arg.split(",")[0].strip()
        out.append(([int(d) if d.strip().isdigit() else d.strip() for d in dims] if dims is not None else None,
                    dtype))
    return out
