"""The kernel catalog of an iree-compile output directory: one CatalogKernel per configured export."""
from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from parsers import ParseError
from rootcause.frontends.iree import ir_text, linalg
from rootcause.errors import UsageError
from rootcause.frontends.iree.configs import module_name, read_config
from rootcause.model import CatalogKernel


LOCATED_FLOW = "flow_located.mlir"


def _locations(ir: Path, notes: list[str]) -> dict[str, list[str]]:
    path = ir / LOCATED_FLOW
    if not path.is_file():
        return {}
    try:
        return ir_text.dispatch_locations(path.read_text(), str(path))
    except ParseError as err:
        notes.append(f"no source locations: {err}")
        return {}


def _phase(ir: Path, name: str) -> Path | None:
    found = sorted((ir / "phases").glob(f"*.{name}.mlir"))
    return found[0] if found else None


def catalog(out_dir: Path, target: str, notes: list[str] | None = None) -> list[CatalogKernel]:
    """CatalogKernels from an iree-compile output directory laid out as build() writes it."""
    notes = notes if notes is not None else []
    ir, bins = out_dir / "ir", out_dir / "binaries"
    flow, hal = _phase(ir, "flow"), _phase(ir, "hal")
    if flow is None or hal is None:
        raise UsageError(f"{out_dir}: no flow/hal phase dumps under ir/phases")
    before = ir / "before_dedup.mlir"
    sites = ir_text.call_sites(flow.read_text(), before.read_text() if before.is_file() else "")
    schedules: dict[str, dict] = {}
    module = module_name(ir)
    for path in sorted(ir.glob("configured_*.mlir")):
        config = read_config(path, str(path.relative_to(out_dir)))
        original = ir / "unsubstituted" / path.name
        for facts in config.values():
            # what IREE configured before the spec's substitution replaced it
            facts["substituted"] = str(original.relative_to(out_dir)) if original.is_file() else None
        schedules.update(config)
    dispatches = ir_text.hal_dispatches(hal.read_text())
    locations = _locations(ir, notes)
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
        binary = _binary(bins, module, mine)
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
        work = dispatch_work(ir, schedule.get("executable"), export, notes, module)
        kernels.append(CatalogKernel(
            name=schedule.get("symbol") or export, function=export,
            source_ops=[f"{entry}/{original}" for entry, original in my_sites],
            call_sites=sorted({entry for entry, _ in my_sites}),
            launch=launch, resources=resources, schedule=schedule, source_locs=locations.get(export, []),
            bytes_moved=schedule.pop("bytes_moved", None),
            flops=work.flops if work else None, evaluations=work.evaluations if work else {}))
    return kernels


def dispatch_work(ir: Path, executable: str | None, export: str, notes: list[str],
                  module: str = "module") -> linalg.Work | None:
    """Arithmetic work of one export, from the linalg ops of its dumped executable source
    (ir/<module>_<executable>.mlir): iteration domain x arith/math ops per point, and the
    transcendental evaluations (rootcause.frontends.iree.linalg); None where the source is missing or unread."""
    path = ir / f"{module}_{executable}.mlir"
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
    return work


def _binary(bins: Path, module: str, mine: list[ir_text.HalDispatch]) -> Path | None:
    for d in mine:
        for ext in ("ptx", "hsaco", "so", "o"):
            p = bins / f"{module}_{d.executable}_{d.variant}.{ext}"
            if p.is_file():
                return p
    return None


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
