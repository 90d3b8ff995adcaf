"""Executable configurations: reading the configured dumps, and substituting them (the spec's
[iree] substitute_configurations, the configuration hybrids)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from parsers import ParseError
from rootcause.frontends.iree import ir_text
from rootcause.errors import UsageError

CONFIG_KEYS = ("translation_info", "lowering_config")

# How releases spell one pipeline: 3.8 writes `pipeline = CPUDoubleTilingExpert`, 3.13
# `pipeline = #iree_cpu.pipeline<DoubleTilingExpert>` (GPU: LLVMGPUTileAndFuse against
# #iree_gpu.pipeline<TileAndFuse>). Compared by meaning, a configuration that differs only there
# is the same configuration, and an older compiler cannot parse the newer spelling.
_PIPELINE_ATTR = re.compile(r"#iree_\w+\.pipeline<\s*(\w+)\s*>")
_TARGET_PREFIX = re.compile(r"^(?:LLVMGPU|SPIRV|CPU|VMVX)(?=[A-Z])")


def pipeline_name(name: Any) -> Any:
    """A pipeline's name as every release means it: without the attribute wrapper and the target
    prefix that releases add or drop."""
    if not isinstance(name, str):
        return name
    m = _PIPELINE_ATTR.fullmatch(name.strip())
    return _TARGET_PREFIX.sub("", m.group(1) if m else name.strip())


def _meaning(key: str, value: str) -> str:
    """An attribute's text with each release's spelling of the same thing made one."""
    text = " ".join(value.split())
    if key == "translation_info":
        text = _PIPELINE_ATTR.sub(lambda m: m.group(1), text)
        text = re.sub(r"pipeline = (\w+)", lambda m: f"pipeline = {pipeline_name(m.group(1))}", text)
    return text


def module_name(ir: Path) -> str:
    """The compiled module's name, which IREE puts before every dumped file's executable name
    (ir/configured_<module>_<executable>.mlir): 'module' for an unnamed one, 'jit_model' for what
    JAX exports as `module @jit_model`."""
    for path in sorted(ir.glob("configured_*.mlir")):
        stem = path.stem[len("configured_"):]
        for exe in ir_text.executable_names(path.read_text()):
            if stem.endswith("_" + exe):
                return stem[:-len(exe) - 1]
    return "module"


def read_config(path: Path, rel: str | None = None) -> dict[str, dict[str, Any]]:
    """export -> schedule facts of one configured_*.mlir (parsers.ir_text.configuration)."""
    return ir_text.configuration(path.read_text(), rel or str(path))


def transplant_configuration(base: str, other: str, base_file: str, other_file: str) -> str:
    """`base`'s configured executable with `other`'s codegen decisions: each translation_info and
    lowering_config value of `other` in place of base's, in op order. The body (its shapes and
    the value ranges it serves) stays base's, so only the configuration changes. The two must
    configure the same ops in the same order."""
    edits = []
    for key in CONFIG_KEYS:
        mine, theirs = ir_text.attr_spans(base, key, base_file), ir_text.attr_spans(other, key, other_file)
        ops_mine, ops_theirs = [x[3] for x in mine], [x[3] for x in theirs]
        if ops_mine != ops_theirs:
            raise UsageError(f"{other_file}: its {key}s sit on {ops_theirs}, {base_file}'s on {ops_mine}: "
                             "not the same configured ops, so no configuration can be transplanted")
        # an attribute that means the same keeps base's spelling: its compiler may not read the other's
        edits += [(start, end, value) for (start, end, old, _), (_, _, value, _) in zip(mine, theirs)
                  if _meaning(key, old) != _meaning(key, value)]
    for start, end, value in sorted(edits, reverse=True):
        base = base[:start] + value + base[end:]
    return base


def prepare_substitutions(spec: Any, ir: Path) -> dict[str, Path]:
    """executable -> the file handed to iree-compile: the spec's file, renamed where needed."""
    out = {}
    for exe, path in spec.options.substitute_configurations.items():
        path = Path(path)
        dest = ir / "substitutions" / f"{exe}{path.suffix}"
        dest.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".mlirbc":  # bytecode: handed over as it is (IREE checks the name)
            dest.write_bytes(path.read_bytes())
        else:
            try:
                text = path.read_text()
            except (OSError, UnicodeDecodeError) as err:
                raise UsageError(f"{path}: cannot read the substituted configuration: {err}") from None
            try:
                dest.write_text(ir_text.renamed_executable(text, exe, str(path)))
            except ParseError as err:  # the spec names a file that does not fit: a usage error
                raise UsageError(str(err)) from None
        out[exe] = dest
    return out


def check_substitutions(spec: Any, substitutions: dict[str, Path], log: str, ir: Path) -> list[str]:
    """Fail on executables IREE did not find (it only warns); swap the dumps so the catalog reads
    the configuration that was compiled. Returns notes."""
    where = spec.where("iree", "substitute_configurations") if hasattr(spec, "where") else \
        "iree.substitute_configurations"
    missing, done = ir_text.substitution_report(log)
    if missing:
        names = sorted({n for p in ir.glob("configured_*.mlir") for n in ir_text.executable_names(p.read_text())})
        exe = sorted(missing)[0]
        raise UsageError(f"{where}.{exe}: unknown executable; the build's executables: {', '.join(names) or 'none'}")
    notes = []
    module = module_name(ir)
    for exe, path in substitutions.items():
        if exe not in done:
            raise UsageError(f"{where}.{exe}: iree-compile did not report substituting it (no NOTE in its log)")
        dumped = ir / f"configured_{module}_{exe}.mlir"
        if dumped.is_file() and path.suffix == ".mlir":
            (ir / "unsubstituted").mkdir(exist_ok=True)
            dumped.replace(ir / "unsubstituted" / dumped.name)
            dumped.write_text(path.read_text())
        notes.append(f"{exe}: configuration substituted with {spec.options.substitute_configurations[exe]}")
    return notes
