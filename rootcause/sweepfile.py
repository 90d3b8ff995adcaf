"""The sweep file: many `analyze` pairs in one TOML file (rootcause.sweep runs them).

A sweep file (TOML) lists pairs, or a matrix of models x variant pairs x targets:

    [sweep]                     # defaults for every pair (all optional)
    name = "pool_fusion"
    target = "llvm"             # auto | llvm | cuda:sm_XX | rocm:gfxNNN
    budget_s = 2.0              # timing loop of one pair
    hybrids = 2                 # counterfactual hybrids per pair; 0: no confirmation
    profile_calls = 5
    threshold = 0.5
    device = "H200"             # for diagnose (default: from each run's env.json)

    [[pair]]
    a = "variants.toml#on"      # inside the sweep file's folder
    b = "variants.toml#off"
    name = "on-vs-off"          # optional; default from the refs and the target
    target = "llvm"             # optional; overrides [sweep] target

    [matrix]
    models = ["m1/variants.toml", "m2/variants.toml"]
    variants = [{a = "on", b = "off"}]   # variant names looked up in every model
    targets = ["llvm", "cuda:sm_90"]

Every spec is loaded and checked before anything runs (one line, exit status 2, on a bad one).
"""
from __future__ import annotations

import dataclasses
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rootcause import spec as spec_mod
from rootcause.errors import UsageError
from rootcause.fileio import safe_name
from rootcause.spec import VariantSpec

SWEEP_KEYS = ("name", "target", "budget_s", "hybrids", "profile_calls", "threshold", "device",
              "allow_outside_paths")
PAIR_KEYS = ("a", "b", "name", "target")
MATRIX_KEYS = ("models", "variants", "targets")


@dataclass
class Options:
    """How every pair is analyzed (the sweep file's [sweep] table)."""

    budget_s: float = 2.0
    hybrids: int = 2
    profile_calls: int = 5
    threshold: float = 0.5
    device: str | None = None


@dataclass
class Pair:
    """One `analyze A B` of the sweep, its specs loaded and checked, its target resolved."""

    id: str
    a: str  # the refs as the sweep file wrote them
    b: str
    target: str
    spec_a: VariantSpec
    spec_b: VariantSpec
    options: Options
    keys: dict[str, str] = dataclasses.field(default_factory=dict)  # stage -> key

    def command(self, out: Path) -> str:
        """The `rootcause analyze` command equivalent to this pair."""
        o = self.options
        argv = ["rootcause", "analyze", str(self.spec_a.spec_file) + f"#{self.spec_a.variant}",
                str(self.spec_b.spec_file) + f"#{self.spec_b.variant}", "--out", str(out),
                "--target", self.target, "--budget-s", f"{o.budget_s:g}", "--profile-calls", str(o.profile_calls)]
        argv += ["--hybrids", str(o.hybrids)] if o.hybrids else ["--no-confirm"]
        if o.threshold != 0.5:
            argv += ["--confirm-share", f"{o.threshold:g}"]
        if o.device:
            argv += ["--gpu", o.device]
        return shlex.join(argv)


@dataclass
class Sweep:
    file: Path
    name: str
    pairs: list[Pair]


def read(path: str | Path, resolve_target: Callable[[str, VariantSpec], str]) -> Sweep:
    """The sweep file, every spec loaded and checked; UsageError (one line) on anything wrong.
    resolve_target maps a written target ('auto' included) and spec A to a concrete target.
    The pairs' stage keys are left to the stages (rootcause.sweep.load)."""
    file = Path(path)
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{file}: no such sweep file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"{file}: cannot read: {err}") from None
    except tomllib.TOMLDecodeError as err:
        raise UsageError(f"{file}: not TOML: {err}") from None
    except RecursionError:
        raise UsageError(f"{file}: tables or arrays nested too deeply to be a sweep file") from None
    name = file.name
    spec_mod.table_keys(data, ("sweep", "pair", "matrix"), name)
    head = _table(data.get("sweep", {}), f"{name}: [sweep]")
    spec_mod.table_keys(head, SWEEP_KEYS, f"{name}: [sweep]")
    options = _options(head, f"{name}: [sweep]")
    outside = head.get("allow_outside_paths", False)
    if not isinstance(outside, bool):
        raise UsageError(f"{name}: [sweep].allow_outside_paths: must be true or false")
    default_target = _string(head, "target", f"{name}: [sweep]", "auto")
    written = _pairs(data, name, default_target)
    if not written:
        raise UsageError(f"{name}: no pairs: add [[pair]] tables (a = \"x.toml#A\", b = \"x.toml#B\") or a [matrix]")
    folder = file.resolve().parent
    pairs, seen = [], {}
    loaded: dict[str, VariantSpec] = {}  # ref -> its spec: a spec named by many pairs is read once
    targeted: dict[tuple[str, str], VariantSpec] = {}  # (ref, target) -> the spec for that target, made once
    for where, a, b, target, given_id in written:
        spec_a, spec_b = (_spec(ref, folder, outside, f"{where}.{side}", loaded) for side, ref in (("a", a), ("b", b)))
        if spec_a.name == spec_b.name:
            raise UsageError(f"{where}: A and B are both variant '{spec_a.name}'; a pair needs two variants")
        try:
            concrete = resolve_target(target, spec_a)
            for ref, spec in ((a, spec_a), (b, spec_b)):
                if (ref, concrete) not in targeted:
                    targeted[(ref, concrete)] = spec_mod.with_target(spec, concrete)
            spec_a, spec_b = targeted[(a, concrete)], targeted[(b, concrete)]
        except UsageError as err:
            raise UsageError(f"{where}.target: {err}") from None
        pid = safe_name(given_id or _default_id(a, b, concrete, folder))
        if pid in seen:
            raise UsageError(f"{where}: pair id '{pid}' is also {seen[pid]}'s; give one of them a name")
        seen[pid] = where
        pairs.append(Pair(pid, a, b, concrete, spec_a, spec_b, options))
    sweep_name = _string(head, "name", f"{name}: [sweep]", file.stem)
    return Sweep(file.resolve(), sweep_name, pairs)


def _pairs(data: dict[str, Any], name: str, default_target: str) -> list[tuple[str, str, str, str, str | None]]:
    """(place, ref A, ref B, target, given id) of every pair, [[pair]] first, then the matrix."""
    out = []
    tables = data.get("pair", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise UsageError(f"{name}: pair: write each pair as a [[pair]] table")
    for i, t in enumerate(tables, start=1):
        where = f"{name}: [[pair]] {i}"
        spec_mod.table_keys(t, PAIR_KEYS, where)
        a, b = (_string(t, k, where) for k in ("a", "b"))
        out.append((where, a, b, _string(t, "target", where, default_target), _string(t, "name", where, "") or None))
    if "matrix" in data:
        m = _table(data["matrix"], f"{name}: [matrix]")
        spec_mod.table_keys(m, MATRIX_KEYS, f"{name}: [matrix]")
        models = _strings(m, "models", f"{name}: [matrix]")
        targets = _strings(m, "targets", f"{name}: [matrix]") if "targets" in m else [default_target]
        variants = m.get("variants")
        if not isinstance(variants, list) or not variants:
            raise UsageError(f"{name}: [matrix].variants: must be a non-empty list of {{a = \"A\", b = \"B\"}}")
        for j, v in enumerate(variants, start=1):
            where = f"{name}: [matrix].variants[{j}]"
            v = _table(v, where)
            spec_mod.table_keys(v, ("a", "b"), where)
            va, vb = _string(v, "a", where), _string(v, "b", where)
            for model in models:
                for target in targets:
                    out.append((f"{name}: [matrix] {model} {va}/{vb} {target}", f"{model}#{va}", f"{model}#{vb}",
                                target, None))
    return out


def _spec(ref: str, folder: Path, outside: bool, where: str, loaded: dict[str, VariantSpec]) -> VariantSpec:
    if ref in loaded:
        return loaded[ref]
    loaded[ref] = _load_spec(ref, folder, outside, where)
    return loaded[ref]


def _load_spec(ref: str, folder: Path, outside: bool, where: str) -> VariantSpec:
    file_part, hash_, variant = ref.partition("#")
    try:
        path = spec_mod.SpecFiles(folder, outside).existing(file_part, where)
        return spec_mod.load(f"{path}{hash_}{variant}")
    except UsageError as err:
        raise UsageError(f"{where}: {err}" if not str(err).startswith(where) else str(err)) from None


def _default_id(a: str, b: str, target: str, folder: Path) -> str:
    """'pool_fusion.on_vs_off.llvm' (refs of one file, named by its folder) or 'm1.on_vs_m2.on.llvm'."""
    def part(ref: str) -> tuple[str, str]:
        file_part, _, variant = ref.partition("#")
        p = (folder / file_part).resolve()
        return (p.parent.name if p.name == "variants.toml" else p.stem), variant or p.stem
    (fa, va), (fb, vb) = part(a), part(b)
    body = f"{fa}.{va}_vs_{vb}" if fa == fb else f"{fa}.{va}_vs_{fb}.{vb}"
    return f"{body}.{target}"


def _options(head: dict[str, Any], where: str) -> Options:
    o = Options()
    for key, kind, low in (("budget_s", float, 0.0), ("threshold", float, 0.0), ("hybrids", int, -1),
                           ("profile_calls", int, 0)):
        if key not in head:
            continue
        value = head[key]
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (kind is float or isinstance(value, int))
        if not ok or value <= low:
            raise UsageError(f"{where}.{key}: must be a{'n integer' if kind is int else ' number'} > {low:g}, "
                             f"got {value!r}")
        setattr(o, key, kind(value))
    if "device" in head:
        o.device = _string(head, "device", where)
    return o


def _table(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise UsageError(f"{where}: must be a table")
    return value


def _string(d: dict[str, Any], key: str, where: str, default: str | None = None) -> str:
    if key not in d:
        if default is None:
            raise UsageError(f"{where}.{key}: missing required key")
        return default
    if not isinstance(d[key], str) or not d[key]:
        raise UsageError(f"{where}.{key}: must be a non-empty string")
    return d[key]


def _strings(d: dict[str, Any], key: str, where: str) -> list[str]:
    value = d.get(key)
    if not isinstance(value, list) or not value or not all(isinstance(x, str) and x for x in value):
        raise UsageError(f"{where}.{key}: must be a non-empty list of strings")
    return value
