"""The per-kernel facts a report shows, as the attribution records them: each side's profile rows
and catalog (registers, shared memory, launch dims, the compiler's schedule), the toolchains that
built them, the GPUs they ran on, and a unit's resource rows with theoretical occupancy.

Pure, like view.py: the document in, plain values out; what is absent is 'not available'.
"""
from __future__ import annotations

import re
from typing import Any

from rootcause.names import short
from rootcause.report.view import fmt_dims, fmt_time, fmt_value, label, unit_label, units_sorted


def profiles(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per variant: {'kernels': [...] | None, 'timeline': {...} | None, 'error': str | None}."""
    given = doc.get("kernels") if isinstance(doc.get("kernels"), list) else None
    out = {}
    for v in "ab":
        kernels = None if given is None else [k for k in given if isinstance(k, dict) and k.get("variant") == v]
        out[v] = {"kernels": kernels, "timeline": (doc.get("timeline") or {}).get(v),
                  "error": None if kernels is not None else "attribution.json records no per-kernel statistics"}
    return out


def catalogs(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per variant: {'kernels': {name: CatalogKernel dict}, 'versions': {...}, 'error': ...}; a
    kernel is found under its name and its name without a '_kernel<N>' suffix."""
    out = {}
    for v in "ab":
        section = (doc.get("catalogs") or {}).get(v) or {"kernels": {}, "versions": {},
                                                 "error": "attribution.json embeds no catalog"}
        kernels: dict[str, Any] = {}
        for name, k in (section.get("kernels") or {}).items():
            kernels.setdefault(name, k)
            kernels.setdefault(re.sub(r"_kernel\d*$", "", name), k)
        out[v] = {"kernels": kernels, "versions": section.get("versions") or {}, "error": section.get("error"),
                  "toolchain": section.get("toolchain") or {}}
    return out


def toolchain_text(record: dict[str, Any]) -> str | None:
    """'iree-base-compiler 3.3.0, iree-base-runtime 3.3.0 (registry)' from a manifest's toolchain."""
    if not record:
        return None
    pairs = {**(record.get("compiler") or {}), **(record.get("runtime") or {})}
    names = ", ".join(f"{d} {v or 'not installed'}" for d, v in pairs.items())
    return f"{names} ({record.get('source', 'installed')})" if names else None


def toolchains(doc: dict[str, Any], cats: dict) -> dict[str, Any]:
    """What built each side and, when the compilers differ, what the catalogs show changed:
    {'a': text | None, 'b': text | None, 'differ': bool, 'changes': [sentence]}."""
    rec = {v: cats[v].get("toolchain") or {} for v in "ab"}
    out: dict[str, Any] = {v: toolchain_text(rec[v]) for v in "ab"}
    out["differ"] = bool(rec["a"] and rec["b"]) and (rec["a"].get("compiler"), rec["a"].get("runtime")) != \
        (rec["b"].get("compiler"), rec["b"].get("runtime"))
    out["changes"] = catalog_changes(doc, cats) if out["differ"] else []
    return out


def catalog_changes(doc: dict[str, Any], cats: dict) -> list[str]:
    """Sentences on dispatch formation (kernel counts, kernels of one side only) and scheduling
    choices (per aligned unit, the schedule keys that differ), read from the two catalogs."""
    A, B = label(doc, "a"), label(doc, "b")
    names = {v: sorted({k["name"] for k in cats[v]["kernels"].values()}) for v in "ab"}
    out = []
    if len(names["a"]) != len(names["b"]):
        out.append(f"Kernel formation: {len(names['a'])} kernels in {A}, {len(names['b'])} in {B}.")
    for v, w, tag in (("a", "b", A), ("b", "a", B)):
        only = [n for n in names[v] if n not in names[w]]
        if only and names[w]:
            shown = ", ".join(short(n, 40) for n in only[:4]) + (f" and {len(only) - 4} more" if len(only) > 4 else "")
            out.append(f"Only in {tag}: {shown}.")
    out += launch_changes(cats, A, B)
    for u in units_sorted(doc)[:6]:
        differ = schedule_differences(*({k: cats[v]["kernels"].get(k) for k in u[f"kernels_{v}"]} for v in "ab"))
        if differ:
            out.append(f"Unit {u['unit']} ({unit_label(u)}): " + "; ".join(
                f"{key} {' / '.join(a)} in {A}, {' / '.join(b)} in {B}" for key, a, b in differ) + ".")
    return out or ["The catalogs show the same kernels and schedules on both sides."]


def schedule_differences(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, list[str], list[str]]]:
    """The schedule keys whose values differ between two sides' kernels ({name: catalog row}):
    (key, A's values, B's values); keys equal on both sides, or unknown on one, are left out."""
    out = []
    for key in SCHEDULE_KEYS:
        seen_a, seen_b = (sorted(v for v in {_schedule_value(key, cat) for cat in side.values()} if v is not None)
                          for side in (a, b))
        if seen_a and seen_b and seen_a != seen_b:
            out.append((key, seen_a, seen_b))
    return out


def _schedule_value(key: str, cat: dict[str, Any] | None) -> str | None:
    value = ((cat or {}).get("schedule") or {}).get(key)
    if value in (None, [], {}):
        return None
    if key == "lowering_config" and isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return str(value) if key == "rule" else fmt_value(value)


def launch_changes(cats: dict, a_label: str, b_label: str, most: int = 4) -> list[str]:
    """One sentence per kernel of both catalogs whose launch grid or block differs (a release can
    keep the kernels and map them onto other thread axes)."""
    out = []
    kernels = {v: cats[v]["kernels"] for v in "ab"}  # catalog_section keys them by name
    for name in sorted(set(kernels["a"]) & set(kernels["b"])):
        la, lb = ((kernels[v][name].get("launch") or {}) for v in "ab")
        # a dimension unknown on one side (not read from that release's binary) is no difference
        known = [d for d in ("grid", "block") if isinstance(la.get(d), list) and isinstance(lb.get(d), list)]
        if any(la[d] != lb[d] for d in known):
            out.append(f"Launch of {short(name, 40)}: grid {_dims(la.get('grid'))} block {_dims(la.get('block'))} "
                       f"in {a_label}, grid {_dims(lb.get('grid'))} block {_dims(lb.get('block'))} in {b_label}.")
    return out[:most] + ([f"{len(out) - most} more kernels launch differently."] if len(out) > most else [])


def _dims(dims: Any) -> str:
    """[64, 4, 1] as 64x4x1; a symbolic extent as 'symbolic' (its TIR text is long)."""
    if not isinstance(dims, list):
        return "?"
    return "x".join(str(d) if isinstance(d, int) else "symbolic" for d in dims)


SCHEDULE_KEYS = ("rule", "pipeline", "workgroup_size", "subgroup_size", "lowering_config")


def schedule_text(cat: dict[str, Any] | None) -> str | None:
    """TVM rule, or IREE pipeline / workgroup / subgroup / lowering_config, in one line."""
    parts = [value if key == "rule" else f"{key} {value}"
             for key in SCHEDULE_KEYS if (value := _schedule_value(key, cat)) is not None]
    return "; ".join(parts) or None


def device(doc: dict[str, Any], given: str | None = None) -> str | None:
    """A rootcause.gpus.DEVICES key: the one given, attribution's 'device', or the GPU named in
    its environment ('NVIDIA H200' -> 'H200')."""
    from rootcause import gpus

    return gpus.find_device(given, doc.get("device"), *gpus.env_gpu_names(doc.get("environment") or {}))


def devices(doc: dict[str, Any], given: str | None = None) -> dict[str, str | None]:
    """Each side's GPU: device() for A, and for B too unless the attribution names B's own
    ('device_b': two traces of two machines); a device given on the command line is both."""
    a = device(doc, given)
    return {"a": a, "b": a if given or not doc.get("device_b") else doc["device_b"]}


def devices_text(devs: dict[str, str | None]) -> str | None:
    """'H200', or 'A100 (A) and V100 (B)' where the sides ran on two GPUs; None when unknown."""
    if devs["a"] == devs["b"]:
        return devs["a"]
    return f"{devs['a'] or 'unknown'} (A) and {devs['b'] or 'unknown'} (B)"


def occupancy(dev: str | None, row: dict[str, Any], cat: dict[str, Any] | None) -> tuple[str | None, str | None]:
    """(theoretical occupancy, limiter) of one kernel on the device, from rootcause.gpus."""
    from rootcause import gpus

    if dev is None or not row.get("block"):
        return None, None
    res = (cat or {}).get("resources") or {}
    regs = row.get("registers") if row.get("registers") is not None else res.get("registers")
    smem = row.get("shared_bytes") if row.get("shared_bytes") is not None else res.get("shared_bytes")
    if regs is None:
        return None, None
    arch = gpus.DEVICES[dev][0]
    threads = 1
    for d in row["block"]:
        threads *= int(d)
    try:
        occ = gpus.occupancy(arch, threads, int(regs), int(smem or 0))
    except (ValueError, KeyError):
        return None, None
    return f"{occ.occupancy:.0%}", occ.limiter


RESOURCE_COLUMNS = ("launches", "time/call", "grid", "block", "registers", "shared B", "local B",
                    "occupancy", "limiter", "schedule")


def kernel_index(prof: dict) -> dict[str, dict[tuple[Any, str], dict[str, Any]]]:
    """variant -> (unit, kernel name) -> its launch facts: attribution.json has a row per launch
    instance (the i-th add_kernel of a call), summed here into the name's launches and time per
    call; the other facts are those of its first row."""
    out: dict[str, dict[tuple[Any, str], dict[str, Any]]] = {}
    for v in "ab":
        index: dict[tuple[Any, str], dict[str, Any]] = {}
        for k in prof[v]["kernels"] or []:
            key = (k.get("unit"), k["kernel"])
            if key not in index:
                index[key] = dict(k)
                continue
            row = index[key]
            for col in ("launches_per_call", "time_per_call_ns"):
                if isinstance(row.get(col), (int, float)) and isinstance(k.get(col), (int, float)):
                    row[col] += k[col]
        out[v] = index
    return out


def resource_columns(rows: list[dict[str, Any]]) -> tuple[str, ...]:
    """The RESOURCE_COLUMNS some row has a value in: a CPU run has no registers, shared or local
    memory, occupancy or limiter, and 13 columns of n/a hide the ones that say something."""
    return tuple(c for c in RESOURCE_COLUMNS if any(r["cells"][c] != "n/a" for r in rows))


def resource_rows(unit: dict[str, Any], index: dict, cats: dict, devs: dict[str, str | None]) -> list[dict[str, Any]]:
    """One row per kernel of the unit (A then B), each cell a string; 'changed' names the
    columns whose value differs from the other variant's dominant kernel. index: kernel_index();
    devs: devices()."""
    rows = []
    for v in "ab":
        stats = index[v]
        for name in unit[f"kernels_{v}"]:
            s = stats.get((unit["unit"], name), {"kernel": name})
            cat = cats[v]["kernels"].get(name) or cats[v]["kernels"].get(re.sub(r"_kernel\d*$", "", name))
            res = (cat or {}).get("resources") or {}
            occ, lim = occupancy(devs[v], s, cat)
            regs = s.get("registers") if s.get("registers") is not None else res.get("registers")
            smem = s.get("shared_bytes") if s.get("shared_bytes") is not None else res.get("shared_bytes")
            local = s.get("local_bytes") if s.get("local_bytes") is not None else res.get("local_bytes")
            cells = {"launches": fmt_value(round(s["launches_per_call"], 2)) if "launches_per_call" in s else "n/a",
                     "time/call": fmt_time(s.get("time_per_call_ns")),
                     "grid": fmt_dims(s.get("grid") or (cat or {}).get("launch", {}).get("grid")),
                     "block": fmt_dims(s.get("block") or (cat or {}).get("launch", {}).get("block")),
                     "registers": fmt_value(regs), "shared B": fmt_value(smem), "local B": fmt_value(local),
                     "occupancy": occ or "n/a", "limiter": lim or "n/a",
                     "schedule": schedule_text(cat) or "n/a"}
            rows.append({"variant": v, "kernel": name, "time": s.get("time_per_call_ns") or 0.0,
                         "cells": cells, "changed": set(), "dominant": False})
    dominant = {}
    for v in "ab":
        mine = [r for r in rows if r["variant"] == v]
        if mine:
            top = max(mine, key=lambda r: r["time"])
            top["dominant"] = True
            dominant[v] = top
    for r in rows:
        other = dominant.get("b" if r["variant"] == "a" else "a")
        if other is None:
            continue
        r["changed"] = {c for c in RESOURCE_COLUMNS if c not in ("launches", "time/call")
                        and r["cells"][c] != other["cells"][c]}
    return rows
