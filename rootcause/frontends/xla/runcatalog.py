"""The catalog of an XLA bundle from the run host's compile: XLA compiles where it runs, so a
bundle built where there is no such device (a GPU target built on the CPU) has no catalog, and the
run keeps the optimized HLO XLA compiled there (runtime.run_files). Read with the build's catalog
reader, then named as the device launches them:

- a fusion's kernel is named after the instruction, or after the deduplicated_name XLA gives the
  fusions that share one kernel, with '.' written '_' ('input_transpose_fusion.2' launches
  `input_transpose_fusion_2`); fusions sharing one kernel are one catalog entry;
- a library call (a custom call: cuBLAS, cuDNN) launches the library's kernels under the library's
  names: they are found in one profiled call's launch sequence, between the kernels of the
  instructions around it in program order.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd

from rootcause.frontends.xla import hlo
from rootcause.frontends.xla.build import catalog
from rootcause.frontends.xla.runtime import hlo_file_name
from rootcause.model import CatalogKernel


def run_catalog(bundle: Any, run_dir: Path, events: pd.DataFrame | None, notes: list[str]) -> list[CatalogKernel] | None:
    """The bundle's catalog as the run host compiled it, or None where the run kept no HLO."""
    path = Path(run_dir) / hlo_file_name(bundle.name)
    if not path.is_file():
        return None
    text = path.read_text()
    comps = hlo.read(text)
    launched = {i.name: _launch_name(i) for i in hlo.thunks(comps)}
    kernels = catalog(text)
    sequence = _one_call(events)
    library = _library_launches(kernels, launched, sequence)
    out: dict[str, CatalogKernel] = {}
    for k in kernels:
        names = library.get(k.name) if k.schedule.get("library") else [launched[k.name]]
        for name in names or []:
            if name in out:  # fusions sharing one kernel, or two calls of one library kernel
                _merge(out[name], k)
            else:
                out[name] = CatalogKernel(name, k.function, list(k.source_ops), schedule=dict(k.schedule),
                                          source_op_kinds=list(k.source_op_kinds), flops=k.flops,
                                          evaluations=dict(k.evaluations), module_paths=list(k.module_paths))
        if k.schedule.get("library") and not names:
            notes.append(f"{bundle.name}: the kernels XLA's library call {k.name} launched were not found in the "
                         "profiled call (no catalog entry for them)")
    notes.append(f"{bundle.name}: catalog read from the HLO XLA compiled on the run host ({path.name}): "
                 f"{len(out)} launched kernels for {len(kernels)} HLO instructions")
    return list(out.values())


def _launch_name(instr: hlo.Instruction) -> str:
    dedup = re.search(r'deduplicated_name="([^"]+)"', instr.attrs)
    return (dedup.group(1) if dedup else instr.name).replace(".", "_")


def _one_call(events: pd.DataFrame | None) -> list[str]:
    """Kernel names of the first profiled call, in launch order ([] without calls)."""
    if events is None or events.empty or "call" not in events.columns:
        return []
    first = events[events["call"] == events.loc[events["call"] >= 0, "call"].min()] if (events["call"] >= 0).any() \
        else events.iloc[0:0]
    return [str(k) for k in first.sort_values("start_ns")["kernel"]]


def _library_launches(kernels: list[CatalogKernel], launched: dict[str, str], sequence: list[str]) -> dict[str, list[str]]:
    """Each library call's launched kernel names: the launches between the kernel of the
    instruction before it and the kernel of the one after it, in program order."""
    out: dict[str, list[str]] = {}
    i, pending = 0, None
    for k in kernels:
        if k.schedule.get("library"):
            pending = k.name
            continue
        name = launched[k.name]
        j = sequence.index(name, i) if name in sequence[i:] else None
        if j is None:
            continue
        if pending is not None:
            out[pending] = list(dict.fromkeys(sequence[i:j]))
            pending = None
        i = j + 1
    if pending is not None:
        out[pending] = list(dict.fromkeys(sequence[i:]))
    return out


def _merge(into: CatalogKernel, more: CatalogKernel) -> None:
    into.source_ops += [op for op in more.source_ops if op not in into.source_ops]
    into.module_paths += [p for p in more.module_paths if p not in into.module_paths]
    into.source_op_kinds += [k for k in more.source_op_kinds if k not in into.source_op_kinds]
