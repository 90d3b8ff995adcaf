"""IREE frontend: compile a spec's MLIR with iree-compile and catalog every dispatch.

One iree-compile run writes everything the catalog is read from (out_dir layout):
- module.vmfb
- ir/configured_module_<executable>.mlir: translation_info (pipeline, workgroup_size,
  subgroup_size) on the export's func.func and lowering_config on its root op
- ir/module_<executable>.mlir: the executable sources (--iree-hal-dump-executable-sources-to)
- ir/phases/<stem>.<n>.<phase>.mlir: flow, stream and hal phases (--dump-compilation-phases-to)
- ir/before_dedup.mlir: the module just before iree-flow-deduplicate-executables
  (--mlir-print-ir-before), which still names every call site's own dispatch
- binaries/module_<executable>_<variant>.{ptx,hsaco,so}
- with [iree] substitute_configurations: ir/substitutions/<executable>.mlir (the file handed to
  --iree-hal-substitute-executable-configuration, renamed to the executable it replaces),
  copied over ir/configured_module_<executable>.mlir (IREE dumps configurations before it
  substitutes them); IREE's own dump is kept as ir/unsubstituted/configured_module_<executable>.mlir

Call sites come from the flow phase (flow.dispatch ops per function, closed over util.call);
the pre-dedup names from before_dedup.mlir, zipped in op order per function, so a deduplicated
executable serving prefill_bs2 and prefill_bs8 gets source_ops 'prefill_bs2/prefill_bs2$async_
dispatch_0_..' and 'prefill_bs8/prefill_bs8$async_dispatch_0_..' and both call sites. Static
workgroup counts come from hal.command_buffer.dispatch in the hal phase.
"""
from __future__ import annotations

import math
import re
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parsers import ParseError, linalg
from parsers.mlir_attrs import find_attrs
from rootcause.errors import UsageError
from rootcause.model import BuildOutput
from rootcause.model import CatalogKernel

DEDUP_PASS = "iree-flow-deduplicate-executables"
# Phases kept in the bundle; executable-targets and vm repeat the binaries and are large.
KEEP_PHASES = ("input", "global-optimization", "dispatch-creation", "flow", "stream", "hal")
_SYM = r'@(?:"[^"]*"|[\w.$-]+)'
_BLOCK_START = re.compile(r"^  (?:util\.func|func\.func|util\.initializer)\b.*$", re.M)
_FUNC_NAME = re.compile(r"^  (?:util\.func|func\.func)\s+(?:(public|private|nested)\s+)?(" + _SYM + r")")
_FLOW_DISPATCH = re.compile(r"flow\.dispatch\s+(" + _SYM + r")::(" + _SYM + r")")
_CALL = re.compile(r"util\.call\s+(" + _SYM + r")")
_LOAD = re.compile(r"util\.global\.load\s+(?:immutable\s+)?(" + _SYM + r")")
_STORE = re.compile(r"util\.global\.store\s+%[\w.$-]+\s*,\s*(" + _SYM + r")")
_CONST = re.compile(r"(%[\w.$-]+)\s*=\s*arith\.constant\s+(-?\d+)\s*:\s*index")
_TRIPLE = "(" + _SYM + r")::(" + _SYM + r")::(" + _SYM + r")"
_LOOKUP = re.compile(r"(%[\w.$-]+)\s*=\s*hal\.executable\.lookup\.function\s+target\([^)]*\)\s*function\("
                     + _TRIPLE + r"\)")
_ORDINAL = re.compile(r"(%[\w.$-]+)\s*=\s*hal\.executable\.export\.ordinal\s+target\(" + _TRIPLE + r"\)")
_HAL_DISPATCH = re.compile(r"hal\.command_buffer\.dispatch<[^>]*>\s*target\([^)]*\)\[(%[\w.$-]+)\]\s*"
                           r"workgroups\(\[([^\]]*)\]\)")
_OP_AT_LINE_START = re.compile(r"^\s*(?:%[\w.$:#, -]+=\s*)?\"?([a-z_]\w*\.[\w.]+)")


def _sym(text: str) -> str:
    return text[1:].strip('"')


# -- iree-compile -------------------------------------------------------------------------------

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


def compile_command(spec: Any, out_dir: Path, substitutions: dict[str, Path] | None = None) -> list[str]:
    ir, binaries = out_dir / "ir", out_dir / "binaries"
    cmd = [str(iree_compile_path()), str(spec.source)]
    if spec.iree.input_type:
        cmd.append(f"--iree-input-type={spec.iree.input_type}")
    cmd += target_flags(spec.target, spec.where("", "target") if hasattr(spec, "where") else "target")
    cmd += [f"--iree-hal-dump-executable-configurations-to={ir}",
            f"--iree-hal-dump-executable-sources-to={ir}",
            f"--iree-hal-dump-executable-binaries-to={binaries}",
            f"--dump-compilation-phases-to={ir / 'phases'}",
            f"--mlir-print-ir-before={DEDUP_PASS}", "--mlir-elide-elementsattrs-if-larger=16"]
    cmd += [f"--iree-hal-substitute-executable-configuration={exe}={path}"
            for exe, path in (substitutions or {}).items()]
    cmd += list(spec.iree.flags)
    cmd += ["-o", str(out_dir / "module.vmfb")]
    return cmd


def _before_dedup(stderr: str) -> tuple[str, str]:
    """Split iree-compile's stderr into (the printed module before dedup, everything else)."""
    lines = stderr.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith("// -----// IR Dump Before") and DEDUP_PASS in line:
            for j in range(i + 1, len(lines)):
                if lines[j].rstrip("\n") == "}":
                    return "".join(lines[i:j + 1]), "".join(lines[:i] + lines[j + 1:])
    return "", stderr


def _compile_error(source: Path, stderr: str) -> UsageError:
    for line in stderr.splitlines():
        if "error:" in line:
            return UsageError(f"{source}: iree-compile failed: {line.strip()}")
    tail = stderr.strip().splitlines()[-1] if stderr.strip() else "no message"
    return UsageError(f"{source}: iree-compile failed: {tail}")


# -- reading the dumped IR ----------------------------------------------------------------------

@dataclass
class Block:
    """One top-level util.func / func.func / util.initializer of a printed module."""

    name: str
    public: bool
    text: str
    calls: list[str] = field(default_factory=list)
    loads: set[str] = field(default_factory=set)
    stores: set[str] = field(default_factory=set)


def blocks(text: str) -> list[Block]:
    """Top-level function bodies, found by the printer's indentation (2 spaces, closing '  }')."""
    out = []
    for n, m in enumerate(_BLOCK_START.finditer(text)):
        end = text.find("\n  }\n", m.end())
        body = text[m.start(): len(text) if end < 0 else end + 4]
        head = _FUNC_NAME.match(m.group())
        name = _sym(head.group(2)) if head else f"<initializer {n}>"
        public = bool(head) and head.group(1) in (None, "public")
        out.append(Block(name, public, body, [_sym(c) for c in _CALL.findall(body)],
                         {_sym(g) for g in _LOAD.findall(body)}, {_sym(g) for g in _STORE.findall(body)}))
    return out


def reach(all_blocks: list[Block]) -> dict[str, list[Block]]:
    """Per public function, the blocks it runs: itself, callees, initializers of globals it loads
    (memoized command buffers are recorded by an initializer and only replayed by the function)."""
    by_name = {b.name: b for b in all_blocks}
    writers: dict[str, list[Block]] = defaultdict(list)
    for b in all_blocks:
        for g in b.stores:
            writers[g].append(b)
    out = {}
    for entry in (b for b in all_blocks if b.public):
        seen: dict[int, Block] = {}
        todo = [entry]
        while todo:
            b = todo.pop()
            if id(b) in seen:
                continue
            seen[id(b)] = b
            todo += [by_name[c] for c in b.calls if c in by_name]
            for g in b.loads:
                todo += writers.get(g, [])
        out[entry.name] = sorted(seen.values(), key=all_blocks.index)
    return out


def entry_functions(all_blocks: list[Block]) -> list[str]:
    """Public functions a user calls: not the '$async' halves their wrappers call."""
    names = [b.name for b in all_blocks if b.public]
    return [n for n in names if not (n.endswith("$async") and n.removesuffix("$async") in names)]


def flow_dispatches(text: str) -> dict[str, list[str]]:
    """Per function, its flow.dispatch export symbols in op order."""
    return {b.name: [_sym(e) for _, e in _FLOW_DISPATCH.findall(b.text)] for b in blocks(text)}


def call_sites(flow_text: str, before_text: str = "") -> dict[str, list[tuple[str, str]]]:
    """export (after dedup) -> [(entry function, dispatch export it had before dedup), ...]."""
    all_blocks = blocks(flow_text)
    after = {b.name: [_sym(e) for _, e in _FLOW_DISPATCH.findall(b.text)] for b in all_blocks}
    before = flow_dispatches(before_text) if before_text else {}
    reached = reach(all_blocks)
    sites: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for entry in entry_functions(all_blocks):
        for b in reached.get(entry, []):
            pre = before.get(b.name, [])
            names = pre if len(pre) == len(after[b.name]) else after[b.name]
            for export, original in zip(after[b.name], names):
                if (entry, original) not in sites[export]:
                    sites[export].append((entry, original))
    return dict(sites)


@dataclass
class HalDispatch:
    entry: str
    executable: str  # after linking (module_linked for llvm-cpu)
    variant: str  # e.g. cuda_nvptx_fb
    export: str
    grid: list[int | None]  # None where the count is computed at run time


def hal_dispatches(hal_text: str) -> list[HalDispatch]:
    """Every hal.command_buffer.dispatch an entry function runs, with its workgroup count."""
    all_blocks = blocks(hal_text)
    reached = reach(all_blocks)
    out = []
    for entry in entry_functions(all_blocks):
        for b in reached.get(entry, []):
            consts = {name: int(v) for name, v in _CONST.findall(b.text)}
            lookups = {m.group(1): tuple(_sym(m.group(i)) for i in (2, 3, 4))
                       for rx in (_LOOKUP, _ORDINAL) for m in rx.finditer(b.text)}
            for fid, counts in _HAL_DISPATCH.findall(b.text):
                if fid not in lookups:
                    continue
                grid = [consts.get(c.strip()) for c in counts.split(",")]
                out.append(HalDispatch(entry, *lookups[fid], grid))
    return out


def _plain(value: Any) -> Any:
    """Attribute data as schedule facts: #iree_gpu.mma_layout<X> -> 'X', #iree_gpu.pipeline<P> -> 'P'."""
    if isinstance(value, dict) and "attr" in value and "args" in value:
        args, params = value["args"], value["params"]
        if not params and len(args) == 1 and not isinstance(args[0], dict):
            return _plain(args[0])
        merged = {k: _plain(v) for k, v in params.items()}
        for a in args:
            if isinstance(a, dict):
                merged.update({k: _plain(v) for k, v in a.items()})
        return merged
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _root_config(text: str, file: str) -> tuple[dict, str | None, list[dict]]:
    """The lowering_config of the root op (the one with a reduction loop, else the last)."""
    configs = []
    for hit in find_attrs(text, "lowering_config", file):
        line = text.splitlines()[hit.line - 1]
        m = _OP_AT_LINE_START.match(line)
        op = m.group(1) if m else None
        reduction = '"reduction"' in line or "linalg.matmul" in line or "batch_matmul" in line
        configs.append({"op": op, "attr": hit.value.get("attr") if isinstance(hit.value, dict) else None,
                        "config": _plain(hit.value), "line": hit.line, "reduction": reduction})
    if not configs:
        return {}, None, []
    root = next((c for c in configs if c["reduction"]), configs[-1])
    return root["config"], root["attr"], configs


_SUBSPAN = re.compile(r"hal\.interface\.binding\.subspan\b.*?\bbinding\((\d+)\).*?\boffset\(([^)]*)\).*?:\s*"
                      r"(?:memref<|!iree_tensor_ext\.dispatch\.tensor<\w+:tensor<)([^,>]*)")


def binding_bytes(text: str) -> int | None:
    """Bytes of every buffer binding a dispatch reads or writes, once each; None when a shape is
    dynamic (the size is known only at run time)."""
    total = 0
    seen = set()
    for binding, offset, shaped in _SUBSPAN.findall(text):
        if (binding, offset, shaped) in seen:
            continue
        seen.add((binding, offset, shaped))
        *dims, elem = shaped.split("x")
        bits = re.search(r"(\d+)", elem)
        if "?" in dims or bits is None:
            return None
        total += math.prod(int(d) for d in dims) * max(1, int(bits.group(1)) // 8)
    return total or None


def read_config(path: Path, rel: str | None = None) -> dict[str, dict[str, Any]]:
    """export -> schedule facts of one configured_*.mlir."""
    text = path.read_text()
    file = rel or str(path)
    exe = re.search(r"hal\.executable\s+(?:public\s+|private\s+)?(" + _SYM + ")", text)
    exports = [_sym(e) for e in re.findall(r"hal\.executable\.export\s+(?:public\s+)?(" + _SYM + ")", text)]
    infos = {}
    for hit in find_attrs(text, "translation_info", file):
        line = text.splitlines()[hit.line - 1]
        fn = re.search(r"func\.func\s+(" + _SYM + ")", line)
        if fn:
            infos[_sym(fn.group(1))] = _plain(hit.value)
    config, attr, all_configs = _root_config(text, file)
    out = {}
    for export in exports:
        info = dict(infos.get(export, {}))
        out[export] = {
            "pipeline": info.pop("pipeline", None),
            "workgroup_size": info.pop("workgroup_size", None),
            "subgroup_size": info.pop("subgroup_size", None),
            "pipeline_options": info,
            "lowering_config": config,
            "lowering_config_attr": attr,
            "lowering_configs": [{k: c[k] for k in ("op", "line", "config")} for c in all_configs],
            "executable": _sym(exe.group(1)) if exe else None,
            "config_file": file,
            "bytes_moved": binding_bytes(text),
        }
    return out


# -- kernel resources ----------------------------------------------------------------------------

def _resources(path: Path, rel: str, arch: str | None) -> tuple[dict[str, dict], str | None]:
    """name -> KernelRecord dict for one dumped binary, or ({}, why not)."""
    suffix = path.suffix
    try:
        if suffix == ".ptx":
            from parsers.base import KernelRecord
            from rootcause import ptxas
            result = ptxas.compile_ptx(path.read_text(), arch=arch, file=rel)
            rows = {}
            for name, fn in result.functions.items():
                if not fn.entry:
                    continue
                rows[name] = KernelRecord(
                    name=name, file=rel, format="vmfb/ptx->ptxas", arch=result.arch, registers=fn.registers,
                    shared_bytes=fn.shared_bytes, local_bytes=fn.stack_frame_bytes,
                    spills=fn.spill_bytes, extra={"ptxas": fn.to_dict(), "ptxas_version": result.version},
                ).to_dict()
            return rows, None
        if suffix == ".hsaco":
            from parsers import hsaco
            return {r.name: r.to_dict() for r in hsaco.kernels(path.read_bytes(), rel)}, None
        if suffix in (".so", ".o", ".elf"):
            from parsers import host_elf
            return {r.name: r.to_dict() for r in host_elf.kernels(path.read_bytes(), rel)}, None
    except ParseError as err:
        return {}, f"{rel}: resources not read: {err}"
    except Exception as err:  # a missing tool (ptxas): say so, keep the catalog
        return {}, f"{rel}: resources not read: {type(err).__name__}: {err}"
    return {}, f"{rel}: no reader for {suffix} binaries"


# -- executable substitution ---------------------------------------------------------------------

_EXECUTABLE = re.compile(r"^\s*hal\.executable\s+(?:public\s+|private\s+)?(" + _SYM + ")", re.M)
_NOT_FOUND = re.compile(r"could not perform the requested substitution as the executable `([^`]*)` was not found")
_SUBSTITUTED = re.compile(r"NOTE: hal\.executable `([^`]*)` substituted with MLIR source")
CONFIG_KEYS = ("translation_info", "lowering_config")


def executable_names(text: str) -> list[str]:
    """hal.executable symbols of a printed module or configured dump, in order."""
    return [_sym(m) for m in _EXECUTABLE.findall(text)]


def renamed_executable(text: str, name: str, file: str) -> str:
    """`text`'s one hal.executable under the symbol `name`. IREE substitutes by executable name and
    the call sites keep their export names, which IREE spells '<executable>_<op>', so a configured
    dump taken from another build (alone's prefill_bs8$async_dispatch_0 standing in for dedup's
    prefill_bs2$async_dispatch_0) has its executable and export prefixes renamed."""
    names = executable_names(text)
    if name in names:
        return text
    if len(names) != 1:
        raise UsageError(f"{file}: holds no hal.executable @{name} to substitute, and "
                         f"{'none' if not names else 'several'} to rename "
                         f"({', '.join(names) or 'no hal.executable at all'})")
    return text.replace(f"@{names[0]}", f"@{name}")


def _attr_spans(text: str, key: str, file: str) -> list[tuple[int, int, str, str | None]]:
    """(start, end, value text, op at the line start) of every `key = <attr>` value in text."""
    out = []
    for m, hit in zip(re.finditer(rf"(?<![\w.$]){re.escape(key)}\s*=\s*", text), find_attrs(text, key, file)):
        op = _OP_AT_LINE_START.match(text.splitlines()[hit.line - 1])
        out.append((m.end(), m.end() + len(hit.text), hit.text, op.group(1) if op else None))
    return out


def transplant_configuration(base: str, other: str, base_file: str, other_file: str) -> str:
    """`base`'s configured executable with `other`'s codegen decisions: each translation_info and
    lowering_config value of `other` in place of base's, in op order. The body (its shapes and
    the value ranges it serves) stays base's, so only the configuration changes. The two must
    configure the same ops in the same order."""
    edits = []
    for key in CONFIG_KEYS:
        mine, theirs = _attr_spans(base, key, base_file), _attr_spans(other, key, other_file)
        ops_mine, ops_theirs = [x[3] for x in mine], [x[3] for x in theirs]
        if ops_mine != ops_theirs:
            raise UsageError(f"{other_file}: its {key}s sit on {ops_theirs}, {base_file}'s on {ops_mine}: "
                             "not the same configured ops, so no configuration can be transplanted")
        edits += [(start, end, value) for (start, end, _, _), (_, _, value, _) in zip(mine, theirs)]
    for start, end, value in sorted(edits, reverse=True):
        base = base[:start] + value + base[end:]
    return base


def prepare_substitutions(spec: Any, ir: Path) -> dict[str, Path]:
    """executable -> the file handed to iree-compile: the spec's file, renamed where needed."""
    out = {}
    for exe, path in spec.iree.substitute_configurations.items():
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
            dest.write_text(renamed_executable(text, exe, str(path)))
        out[exe] = dest
    return out


def check_substitutions(spec: Any, substitutions: dict[str, Path], log: str, ir: Path) -> list[str]:
    """Fail on executables IREE did not find (it only warns); swap the dumps so the catalog reads
    the configuration that was compiled. Returns notes."""
    where = spec.where("iree", "substitute_configurations") if hasattr(spec, "where") else \
        "iree.substitute_configurations"
    missing = set(_NOT_FOUND.findall(log))
    if missing:
        names = sorted({n for p in ir.glob("configured_*.mlir") for n in executable_names(p.read_text())})
        exe = sorted(missing)[0]
        raise UsageError(f"{where}.{exe}: unknown executable; the build's executables: {', '.join(names) or 'none'}")
    done = set(_SUBSTITUTED.findall(log))
    notes = []
    for exe, path in substitutions.items():
        if exe not in done:
            raise UsageError(f"{where}.{exe}: iree-compile did not report substituting it (no NOTE in its log)")
        dumped = ir / f"configured_module_{exe}.mlir"
        if dumped.is_file() and path.suffix == ".mlir":
            (ir / "unsubstituted").mkdir(exist_ok=True)
            dumped.replace(ir / "unsubstituted" / dumped.name)
            dumped.write_text(path.read_text())
        notes.append(f"{exe}: configuration substituted with {spec.iree.substitute_configurations[exe]}")
    return notes


# -- build -------------------------------------------------------------------------------------

def _phase(ir: Path, name: str) -> Path | None:
    found = sorted((ir / "phases").glob(f"*.{name}.mlir"))
    return found[0] if found else None


def build(spec: Any, out_dir: Path) -> BuildOutput:
    """Compile spec.source with iree-compile into out_dir and catalog its dispatches."""
    out_dir = Path(out_dir)
    ir = out_dir / "ir"
    bins = out_dir / "binaries"
    for d in (ir, bins):
        d.mkdir(parents=True, exist_ok=True)
    substitutions = prepare_substitutions(spec, ir)
    cmd = compile_command(spec, out_dir, substitutions)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    before, log = _before_dedup(proc.stderr)
    if proc.returncode != 0:
        raise _compile_error(spec.source, log)
    notes: list[str] = check_substitutions(spec, substitutions, log, ir)
    if log.strip():
        (out_dir / "iree-compile.log").write_text(log)
        notes.append("iree-compile printed diagnostics: see iree-compile.log")
    if before:
        (ir / "before_dedup.mlir").write_text(before)
    else:
        notes.append(f"no IR printed before {DEDUP_PASS}: source_ops use post-dedup dispatch names")
    for p in (ir / "phases").glob("*.mlir"):
        if p.stem.split(".")[-1] not in KEEP_PHASES:
            p.unlink()

    kernels = catalog(out_dir, spec.target, notes)
    versions = {"iree-compiler": compiler_version(), "python": sys.version.split()[0]}
    if any(k.resources.get("format") == "vmfb/ptx->ptxas" for k in kernels):
        from rootcause import ptxas
        versions["ptxas"] = ptxas.ptxas_version() or "unknown"
    ir_files = sorted(ir.glob("*.mlir")) + sorted((ir / "phases").glob("*.mlir"),
                                                  key=lambda p: int(p.stem.split(".")[-2]))
    ir_files += sorted((ir / "substitutions").glob("*")) + sorted((ir / "unsubstituted").glob("*.mlir"))
    return BuildOutput(module_path=out_dir / "module.vmfb", kernels=kernels, ir_files=ir_files,
                       binary_files=sorted(p for p in bins.iterdir() if p.is_file()),
                       versions=versions, notes=notes)


def catalog(out_dir: Path, target: str, notes: list[str] | None = None) -> list[CatalogKernel]:
    """CatalogKernels from an iree-compile output directory laid out as build() writes it."""
    notes = notes if notes is not None else []
    ir, bins = out_dir / "ir", out_dir / "binaries"
    flow, hal = _phase(ir, "flow"), _phase(ir, "hal")
    if flow is None or hal is None:
        raise UsageError(f"{out_dir}: no flow/hal phase dumps under ir/phases")
    before = ir / "before_dedup.mlir"
    sites = call_sites(flow.read_text(), before.read_text() if before.is_file() else "")
    schedules: dict[str, dict] = {}
    for path in sorted(ir.glob("configured_*.mlir")):
        config = read_config(path, str(path.relative_to(out_dir)))
        original = ir / "unsubstituted" / path.name
        for facts in config.values():
            # what IREE configured before the spec's substitution replaced it
            facts["substituted"] = str(original.relative_to(out_dir)) if original.is_file() else None
        schedules.update(config)
    dispatches = hal_dispatches(hal.read_text())
    arch = target.partition(":")[2] or None
    resources_by_file: dict[Path, dict[str, dict]] = {}

    kernels = []
    for export, schedule in schedules.items():
        mine = [d for d in dispatches if d.export == export]
        grids: dict[str, list] = defaultdict(list)
        for d in mine:
            grids[d.entry].append(d.grid)
        every = [tuple(g) for gs in grids.values() for g in gs]
        static = every[0] if every and all(None not in g for g in every) and len(set(every)) == 1 else None
        launch = {"block": schedule["workgroup_size"], "grid": list(static) if static else None,
                  "grids": dict(grids)}
        binary = _binary(bins, mine)
        resources: dict = {}
        if binary is not None:
            rel = str(binary.relative_to(out_dir))
            if binary not in resources_by_file:
                rows, why = _resources(binary, rel, arch)
                resources_by_file[binary] = rows
                if why:
                    notes.append(why)
            rows = resources_by_file[binary]
            # NVPTX renames symbols: '$' (and other non-word characters) become '_'
            symbol = next((n for n in (export, re.sub(r"[^\w.]", "_", export)) if n in rows), None)
            resources = rows.get(symbol, {}) if symbol else {}
            if symbol is None and rows:
                notes.append(f"{export}: not among the symbols of {rel}")
            schedule = {**schedule, "binary": rel, "symbol": symbol}
        else:
            notes.append(f"{export}: no dumped binary found")
        my_sites = sites.get(export, [])
        if not my_sites:
            notes.append(f"{export}: no call site found in the flow phase")
        kernels.append(CatalogKernel(
            name=schedule.get("symbol") or export, function=export,
            source_ops=[f"{entry}/{original}" for entry, original in my_sites],
            call_sites=sorted({entry for entry, _ in my_sites}),
            launch=launch, resources=resources, schedule=schedule,
            bytes_moved=schedule.pop("bytes_moved", None),
            flops=dispatch_flops(ir, schedule.get("executable"), export, notes)))
    return kernels


def dispatch_flops(ir: Path, executable: str | None, export: str, notes: list[str]) -> int | None:
    """Arithmetic work of one export, from the linalg ops of its dumped executable source
    (ir/module_<executable>.mlir): iteration domain x arith/math ops per point (parsers.linalg)."""
    path = ir / f"module_{executable}.mlir"
    if executable is None or not path.is_file():
        notes.append(f"{export}: flops not counted: no dumped source {path.name}")
        return None
    text = path.read_text()
    body, first = linalg.function_text(text, export) or (text, 1)
    try:
        work = linalg.work(body, str(path.relative_to(ir.parent)), first)
    except ParseError as err:
        notes.append(f"{export}: flops not counted: {err}")
        return None
    if work.flops is None:
        notes.append(f"{export}: flops not counted: {'; '.join(work.unknown())}")
    return work.flops


def _binary(bins: Path, mine: list[HalDispatch]) -> Path | None:
    for d in mine:
        for ext in ("ptx", "hsaco", "so", "o"):
            p = bins / f"module_{d.executable}_{d.variant}.{ext}"
            if p.is_file():
                return p
    return None
