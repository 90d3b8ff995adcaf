"""IREE hybrids: executable configurations, or whole executables, substituted from the other side;
flag bisection."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from parsers import ParseError
from rootcause.frontends.iree import ir_text
from rootcause.errors import UsageError
from rootcause.frontends.base import bisection_subsets
from rootcause.model import CatalogKernel, Hybrid
from rootcause.spec import VariantSpec


def plan(spec_a: VariantSpec, spec_b: VariantSpec, catalog_a: list[CatalogKernel],
         catalog_b: list[CatalogKernel], bundles: dict[str, Path] | None, work_dir: Path | None,
         notes: list[str]) -> list[Hybrid]:
    specs, cats = {"a": spec_a, "b": spec_b}, {"a": catalog_a, "b": catalog_b}
    found: list[Hybrid] = []
    if bundles and work_dir is not None:
        for base in "ab":
            other = "b" if base == "a" else "a"
            singles = config_hybrids(base, specs[base], cats[base], cats[other], Path(bundles[base]),
                                     Path(bundles[other]), Path(work_dir), notes)
            found += singles
            if len(singles) > 1:
                found.append(all_configurations(base, specs[base], singles))
        for base in "ab":  # after every configuration hybrid: those are kept first under --hybrids
            other = "b" if base == "a" else "a"
            found += executable_hybrids(base, specs[base], cats[base], cats[other], Path(bundles[base]),
                                        Path(bundles[other]), Path(work_dir), notes)
    else:
        notes.append("no bundles given: IREE configuration hybrids (executable substitution) not planned")
    found += flag_hybrids(spec_a, spec_b)
    return found


def _differences(k: CatalogKernel, mate: CatalogKernel) -> list[str]:
    """What mate's configuration sets otherwise than k's, in words ('vector_common_parallel
    [8, 4, 0] instead of [1, 1, 0]'); [] where they mean the same, however each release spells it."""
    from rootcause.frontends.iree.configs import pipeline_name

    mine, theirs = k.schedule, mate.schedule
    out = []
    lk, lm = mine.get("lowering_config") or {}, theirs.get("lowering_config") or {}
    for level in sorted(set(lk) | set(lm)):
        if lk.get(level) != lm.get(level):
            out.append(f"{level} {lm.get(level, 'unset')} instead of {lk.get(level, 'unset')}")
    facts = {"pipeline": pipeline_name, "workgroup_size": None, "subgroup_size": None, "pipeline_options": None}
    for fact, norm in facts.items():
        a, b = mine.get(fact), theirs.get(fact)
        if (norm(a) if norm else a) != (norm(b) if norm else b):
            out.append(f"{fact} {b} instead of {a}")
    return out


def _mates(spec: VariantSpec, catalog: list[CatalogKernel],
           other: list[CatalogKernel]) -> list[tuple[CatalogKernel, CatalogKernel, list[str]]]:
    """(base kernel, the one other-side kernel computing its source ops, the shared ops), largest
    traffic first, for base executables not already substituted by the spec. A kernel whose ops
    the other side splits over several dispatches has no one counterpart and is left out.

    IREE's source_ops are dispatch names, which two builds share by position alone (a fused
    chain's main_dispatch_0 and an unfused one's), so a mate must also fuse as many source
    locations: 25 ops in one dispatch do not stand in for 2."""
    by_op = {op: k for k in other for op in k.source_ops}
    out, done = [], set(spec.options.substitute_configurations)
    for k in sorted(catalog, key=lambda k: -(k.bytes_moved or 0)):
        exe = k.schedule.get("executable")
        mates = list(dict.fromkeys(by_op[op].name for op in k.source_ops if op in by_op))
        if not exe or exe in done or len(mates) != 1:
            continue
        mate = next(m for m in other if m.name == mates[0])
        if k.source_locs and mate.source_locs and len(set(k.source_locs)) != len(set(mate.source_locs)):
            continue
        done.add(exe)
        out.append((k, mate, [op for op in k.source_ops if op in by_op]))
    return out


def _substituted(spec: VariantSpec, exe: str, path: Path) -> VariantSpec:
    subs = {**spec.options.substitute_configurations, exe: path}
    return dataclasses.replace(spec, options=dataclasses.replace(spec.options, substitute_configurations=subs))


def _hybrid_file(work_dir: Path, stem: str, text: str) -> Path:
    path = work_dir / f"{re.sub(r'[^A-Za-z0-9._~-]+', '_', stem)}.mlir"  # shell-safe: printed in commands
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def config_hybrids(base: str, spec: VariantSpec, catalog: list[CatalogKernel], other: list[CatalogKernel],
                   bundle: Path, other_bundle: Path, work_dir: Path, notes: list[str]) -> list[Hybrid]:
    """Base's executables configured as the other side configures the same dispatch (module doc)."""
    from rootcause.frontends.iree.configs import transplant_configuration

    side = "B" if base == "a" else "A"
    out = []
    for k, mate, shared in _mates(spec, catalog, other):
        exe = k.schedule["executable"]
        differences = _differences(k, mate)
        if not differences:
            continue
        files = (k.schedule.get("config_file"), mate.schedule.get("config_file"))
        if not all(files):
            notes.append(f"{exe}: no configured dump in the bundles, no configuration hybrid")
            continue
        try:
            text = transplant_configuration((bundle / files[0]).read_text(), (other_bundle / files[1]).read_text(),
                                            files[0], files[1])
        except (UsageError, OSError) as err:
            notes.append(f"{exe}: configuration not transplanted: {err}")
            continue
        path = _hybrid_file(work_dir, f"{spec.name}~{exe}~as~{mate.schedule.get('executable') or mate.name}", text)
        out.append(Hybrid("", base, "configuration", {"substitute_configurations": {exe: str(path)}},
                          f"configuring {exe} as {side} configures {mate.schedule.get('executable') or mate.name} "
                          f"({'; '.join(differences)})", shared, [k.name],
                          _substituted(spec, exe, path)))
    return out


def executable_hybrids(base: str, spec: VariantSpec, catalog: list[CatalogKernel], other: list[CatalogKernel],
                       bundle: Path, other_bundle: Path, work_dir: Path, notes: list[str]) -> list[Hybrid]:
    """Base's executables replaced whole by the other side's configured executable for the same
    dispatch, body included. A configuration hybrid keeps base's body; when the bodies differ too
    (a deduplicated executable specialized for another call's value ranges: its tiles, its
    util.assume divisibility), only the whole executable can recover what the body holds. Planned
    only where the bodies differ beyond the configuration and beyond the order of the offsets their
    call sites assume (parsers.ir_text.joined_assumptions), and only between executables with the
    same pipeline layouts (base's call sites bind base's layout)."""
    from rootcause.frontends.iree.configs import transplant_configuration

    side = "B" if base == "a" else "A"
    out = []
    for k, mate, shared in _mates(spec, catalog, other):
        exe, theirs = k.schedule["executable"], mate.schedule.get("executable") or mate.name
        files = (k.schedule.get("config_file"), mate.schedule.get("config_file"))
        if not all(files):
            continue  # config_hybrids has said so
        try:
            mine = (bundle / files[0]).read_text()
            whole = ir_text.renamed_executable((other_bundle / files[1]).read_text(), exe, files[1])
            why = swap_refusal(mine, whole, files)
        except (ParseError, OSError) as err:
            notes.append(f"{exe}: {side}'s executable {theirs} cannot stand in for it: {err}")
            continue
        if why:
            notes.append(f"{exe}: {side}'s executable {theirs} {why}: no executable hybrid")
            continue
        try:
            configured = transplant_configuration(mine, whole, files[0], files[1])
            if ir_text.joined_assumptions(configured) == ir_text.joined_assumptions(whole):
                # the bodies agree (but for the order of their call sites' offsets): the
                # configuration hybrid, if any, is this hybrid
                continue
        except UsageError:
            pass  # configured ops differ: the bodies differ
        path = _hybrid_file(work_dir, f"{spec.name}~{exe}~is~{theirs}", whole)
        out.append(Hybrid("", base, "executable", {"substitute_configurations": {exe: str(path)}},
                          f"replacing {exe} whole with {side}'s {theirs} (its body and configuration; the "
                          "bodies differ beyond the configuration)", shared, [k.name],
                          _substituted(spec, exe, path)))
    return out


def swap_refusal(mine: str, whole: str, files: tuple[str, str]) -> str | None:
    """Why an executable (whole, renamed to base's) cannot stand in for base's (mine) at base's call
    sites, or None: they must bind the same pipeline layout (bindings, push constants) and buffers
    of the same shapes and element types. ParseError where a dump cannot be read."""
    if ir_text.export_layouts(mine, files[0]) != ir_text.export_layouts(whole, files[1]):
        return "binds another pipeline layout, so it cannot stand in for it"
    if ir_text.binding_shapes(mine) != ir_text.binding_shapes(whole):
        return ("binds tensors of other shapes or types, so its call sites would hand it buffers it does not "
                "expect")
    return None


def all_configurations(base: str, spec: VariantSpec, singles: list[Hybrid]) -> Hybrid:
    """Every executable the single hybrids reconfigure, reconfigured at once: when several
    changed executables make up one unit, no single one of them can recover it."""
    subs = {**spec.options.substitute_configurations}
    for h in singles:
        subs.update(h.spec.options.substitute_configurations)
    edited = dataclasses.replace(spec, options=dataclasses.replace(spec.options, substitute_configurations=subs))
    side = "B" if base == "a" else "A"
    names = [exe for h in singles for exe in h.change["substitute_configurations"]]
    return Hybrid("", base, "configuration", {"substitute_configurations": {
        exe: p for h in singles for exe, p in h.change["substitute_configurations"].items()}},
        f"configuring all of {', '.join(names)} as {side} configures them",
        list(dict.fromkeys(op for h in singles for op in h.source_ops)),
        list(dict.fromkeys(k for h in singles for k in h.kernels)), edited)


def flag_hybrids(spec_a: VariantSpec, spec_b: VariantSpec) -> list[Hybrid]:
    """A with B's setting for a subset of the iree-compile flags that differ."""
    fa, fb = spec_a.options.flags, spec_b.options.flags
    differing = [("remove", f) for f in fa if f not in fb] + [("add", f) for f in fb if f not in fa]
    out = []
    for subset in bisection_subsets(differing):
        removed = {f for op, f in subset if op == "remove"}
        flags = [f for f in fa if f not in removed] + [f for op, f in subset if op == "add"]
        words = " and ".join(f"{'removing' if op == 'remove' else 'adding'} {f}" for op, f in subset)
        unchecked = [f for f in flags if f in spec_a.options.unchecked_flags or f in spec_b.options.unchecked_flags]
        edited = dataclasses.replace(spec_a, options=dataclasses.replace(spec_a.options, flags=flags,
                                                                      unchecked_flags=unchecked))
        out.append(Hybrid("", "a", "flags", {"flags": flags, "toggled": [list(x) for x in subset]},
                          f"{words} as B does", [], [], edited))
    return out
