"""The per-kernel resource table inspect prints: one row a kernel record, with its theoretical
occupancy where the block size is known (rootcause.gpus), as text, CSV, JSON or Markdown."""
from __future__ import annotations

import functools
import operator

from parsers import KernelRecord
from rootcause.terminal import printable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from rootcause import gpus

# The keys of one output row, in order (JSON, CSV, table and Markdown columns).
ROW_KEYS = ("name", "file", "format", "arch", "registers", "sgpr", "agpr", "shared_bytes",
            "local_bytes", "stack_bytes", "param_bytes", "max_threads_per_block", "spills",
            "wavefront_size", "block", "code_bytes", "occupancy", "occupancy_limiter")


def row(record: KernelRecord) -> dict[str, Any]:
    """The output row of one record: ROW_KEYS, with occupancy where the block is known."""
    d = dict(zip(_RECORD_KEYS, record_values(record)))
    block = tuple(record.block) if record.block is not None else None
    d["block"] = list(block) if block is not None else None
    d["code_bytes"] = record.extra.get("size") if record.format.endswith("host-elf") else None  # a CPU function's
    d["occupancy"], d["occupancy_limiter"] = (None, None) if block is None else _occupancy_cells(
        record.arch, block, record.registers, record.shared_bytes, record.max_threads_per_block,
        record.sgpr, record.agpr)
    return d


_RECORD_KEYS = ROW_KEYS[:ROW_KEYS.index("code_bytes")]  # the keys a KernelRecord holds, in row order
record_values = operator.attrgetter(*_RECORD_KEYS)


@functools.lru_cache(maxsize=4096)
def _occupancy_cells(arch, block, registers, shared_bytes, max_threads, sgpr, agpr) -> tuple:
    # Kernels of one build repeat a few (arch, block, registers, shared) combinations; the
    # occupancy model costs ~20 us a call, so a directory of cubins with --block pays it once each.
    occ = kernel_occupancy(KernelRecord(name="", file="", format="", arch=arch, block=block, registers=registers,
                                        shared_bytes=shared_bytes, max_threads_per_block=max_threads,
                                        sgpr=sgpr, agpr=agpr))
    return (round(occ.occupancy, 4), occ.limiter) if occ else (None, None)


def kernel_occupancy(record: KernelRecord) -> gpus.Occupancy | None:
    """Theoretical occupancy of a record on its arch, or None when something is unknown."""
    if record.block is None or record.registers is None or not record.arch:
        return None
    from rootcause import gpus  # here: rows without a block size need no occupancy model

    try:
        lim = gpus.limits(record.arch)
    except KeyError:
        return None
    threads = record.block[0] * record.block[1] * record.block[2]
    if threads <= 0 or (record.max_threads_per_block and threads > record.max_threads_per_block):
        return None  # such a launch fails: the kernel was built for at most max_threads_per_block
    try:
        if lim.vendor == "amd":
            return gpus.occupancy(lim.arch, threads, record.registers, record.shared_bytes or 0,
                                  sgprs=record.sgpr, agprs=record.agpr)
        return gpus.occupancy(lim.arch, threads, record.registers, record.shared_bytes or 0)
    except ValueError:
        return None


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return "x".join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:.2f}"
    return printable(value)  # a symbol name from a binary reaches the terminal: no escape codes


_SHORT = {"registers": "regs", "shared_bytes": "shared", "local_bytes": "local",
          "stack_bytes": "stack", "param_bytes": "param", "max_threads_per_block": "max_thr",
          "wavefront_size": "wave", "code_bytes": "code", "occupancy": "occ", "occupancy_limiter": "limiter"}


def _json_lines(rows: list[dict[str, Any]]) -> str:
    """The rows as a JSON list, one row a line. One json.dumps call for the whole list (a
    call per row costs ~1.4x more; indent= runs the pure-Python encoder), then a line break
    before each row: every row starts with its "name" key, and '}, {"name": ' cannot occur
    inside a JSON string, whose quotes are escaped."""
    if not rows:
        return "[]\n"
    import json

    text = json.dumps(rows)
    return "[\n  " + text[1:-1].replace('}, {"name": ', '},\n  {"name": ') + "\n]\n"


def render(rows: list[dict[str, Any]], fmt: str) -> str:
    if fmt == "json":
        return _json_lines(rows)
    if fmt == "csv":
        import csv
        import io

        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(ROW_KEYS)
        for r in rows:
            w.writerow(["" if r[k] is None else _cell(r[k]) if k == "block" or isinstance(r[k], str) else r[k]
                        for k in ROW_KEYS])
        return buf.getvalue()
    # code_bytes is a CPU function's: a table of GPU kernels leaves that column out (JSON and CSV keep it)
    keys = [k for k in ROW_KEYS if k != "code_bytes" or any(r[k] is not None for r in rows)]
    headers = [_SHORT.get(k, k) for k in keys]
    cells = [[_cell(r[k]) for k in keys] for r in rows]
    if fmt == "markdown":
        lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row_) + " |" for row_ in cells]
        return "\n".join(lines) + "\n"
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(headers)]
    numeric = {i for i, k in enumerate(keys) if k not in ("name", "file", "format", "arch", "block",
                                                         "occupancy_limiter")}
    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if i in numeric else v.ljust(w)
                         for i, (v, w) in enumerate(zip(values, widths))).rstrip()
    return "\n".join([line(headers)] + [line(c) for c in cells]) + "\n"
