"""Sweeps: many `analyze` pairs from one file, in this process or as tasks on a Ray cluster.

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

Every spec is loaded and checked before anything runs (one line, exit status 2, on a bad
one). Each pair is one `analyze` through rootcause.pipeline, in three stages: build (CPU),
run (one GPU of the pair's target, or a CPU for llvm), attribution (CPU). Each stage
publishes its part of the pair's folder whole (rootcause.artifacts.sweep), so an interrupted
sweep resumes from the stages that finished; a failed stage makes its pair a row with the
error, and the other pairs go on.

Executors: `run_sequential` (here, one pair after another) and `run_on_ray` (stages as Ray
tasks: builds and attributions take one CPU, GPU runs num_gpus=1 plus one unit of a custom
resource named after the target, e.g. {"cuda:sm_90": 1}; at most max_in_flight pairs out at
once), and `ray_map` (one-CPU tasks for work outside pairs: a bisection's builds). Between tasks a stage's folder
travels as a tar archive in Ray's object store, or, with a shared folder every node mounts,
the tasks read and write the pair folders there.
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import shlex
import shutil
import tarfile
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rootcause import frontends, pipeline, spec as spec_mod
from rootcause.artifacts import sweep as records
from rootcause.errors import OutputsDiffer, UsageError
from rootcause.fileio import check_replaceable, mark_owned, write_atomic
from rootcause.spec import VariantSpec

STAGES = ("build", "run", "attribute")
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
            argv += ["--threshold", f"{o.threshold:g}"]
        if o.device:
            argv += ["--device", o.device]
        return shlex.join(argv)


@dataclass
class Sweep:
    file: Path
    name: str
    pairs: list[Pair]


# ---- the sweep file ----------------------------------------------------------------------------

def load(path: str | Path, resolve_target: Callable[[str, VariantSpec], str]) -> Sweep:
    """The sweep file, every spec loaded and checked; UsageError (one line) on anything wrong.
    resolve_target maps a written target ('auto' included) and spec A to a concrete target."""
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
    spec_mod._keys(data, ("sweep", "pair", "matrix"), name)
    head = _table(data.get("sweep", {}), f"{name}: [sweep]")
    spec_mod._keys(head, SWEEP_KEYS, f"{name}: [sweep]")
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
    for where, a, b, target, given_id in written:
        spec_a, spec_b = (_spec(ref, folder, outside, f"{where}.{side}") for side, ref in (("a", a), ("b", b)))
        if spec_a.name == spec_b.name:
            raise UsageError(f"{where}: A and B are both variant '{spec_a.name}'; a pair needs two variants")
        try:
            concrete = resolve_target(target, spec_a)
            spec_a, spec_b = spec_mod.with_target(spec_a, concrete), spec_mod.with_target(spec_b, concrete)
        except UsageError as err:
            raise UsageError(f"{where}.target: {err}") from None
        pid = pipeline.safe_name(given_id or _default_id(a, b, concrete, folder))
        if pid in seen:
            raise UsageError(f"{where}: pair id '{pid}' is also {seen[pid]}'s; give one of them a name")
        seen[pid] = where
        pair = Pair(pid, a, b, concrete, spec_a, spec_b, options)
        pair.keys = _stage_keys(pair, folder)
        pairs.append(pair)
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
        spec_mod._keys(t, PAIR_KEYS, where)
        a, b = (_string(t, k, where) for k in ("a", "b"))
        out.append((where, a, b, _string(t, "target", where, default_target), _string(t, "name", where, "") or None))
    if "matrix" in data:
        m = _table(data["matrix"], f"{name}: [matrix]")
        spec_mod._keys(m, MATRIX_KEYS, f"{name}: [matrix]")
        models = _strings(m, "models", f"{name}: [matrix]")
        targets = _strings(m, "targets", f"{name}: [matrix]") if "targets" in m else [default_target]
        variants = m.get("variants")
        if not isinstance(variants, list) or not variants:
            raise UsageError(f"{name}: [matrix].variants: must be a non-empty list of {{a = \"A\", b = \"B\"}}")
        for j, v in enumerate(variants, start=1):
            where = f"{name}: [matrix].variants[{j}]"
            v = _table(v, where)
            spec_mod._keys(v, ("a", "b"), where)
            va, vb = _string(v, "a", where), _string(v, "b", where)
            for model in models:
                for target in targets:
                    out.append((f"{name}: [matrix] {model} {va}/{vb} {target}", f"{model}#{va}", f"{model}#{vb}",
                                target, None))
    return out


def _spec(ref: str, folder: Path, outside: bool, where: str) -> VariantSpec:
    file_part, hash_, variant = ref.partition("#")
    try:
        path = spec_mod._Files(folder, outside).existing(file_part, where)
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


# ---- stage keys ----------------------------------------------------------------------------------

def _stage_keys(pair: Pair, folder: Path) -> dict[str, str]:
    """One key per stage: what decides the stage's output. Paths are taken relative to the
    sweep file's folder, so a sweep built in one checkout resumes in another."""
    h = hashlib.sha256()
    for spec in (pair.spec_a, pair.spec_b):
        h.update(json.dumps(_relative(canonical(spec), str(folder)), sort_keys=True).encode())
        for path in _spec_files(spec):
            h.update(Path(path).read_bytes())
    o = pair.options
    build = _digest(h.hexdigest(), pair.target, o.hybrids)
    run = _digest(build, o.budget_s, o.profile_calls)
    return {"build": build, "run": run, "attribute": _digest(run, o.threshold, o.device)}


def canonical(obj: Any) -> Any:
    """A dataclass as the dict of only its fields that differ from their defaults (nested ones
    alike, paths as strings): a field added later with a default leaves every key as it was."""
    if isinstance(obj, (list, tuple)):
        return [canonical(v) for v in obj]
    if isinstance(obj, dict):
        return {k: canonical(v) for k, v in obj.items()}
    if isinstance(obj, Path):
        return str(obj)
    if not dataclasses.is_dataclass(obj):
        return obj
    out = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.default is not dataclasses.MISSING and value == f.default:
            continue
        if f.default_factory is not dataclasses.MISSING and value == f.default_factory():
            continue
        out[f.name] = canonical(value)
    return out


def _spec_files(spec: VariantSpec) -> list[Path]:
    files = [spec.source, *frontends.get(spec.frontend).input_files(spec), *(i.file for i in spec.inputs if i.file)]
    return files + ([spec.reference.file] if spec.reference else [])


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:16]


def _relative(obj: Any, root: str) -> Any:
    """obj with every string under root written relative to it."""
    if isinstance(obj, dict):
        return {k: _relative(v, root) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_relative(v, root) for v in obj]
    if isinstance(obj, str) and obj.startswith(root + os.sep):
        return obj[len(root) + 1:]
    return obj


def _relocate(obj: Any, old: str, new: str) -> Any:
    """obj with every path string under old moved under new (a folder made on a worker and
    published elsewhere keeps truthful paths in its reports)."""
    if isinstance(obj, dict):
        return {k: _relocate(v, old, new) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_relocate(v, old, new) for v in obj]
    if isinstance(obj, str) and (obj == old or obj.startswith(old + os.sep)):
        return new + obj[len(old):]
    if isinstance(obj, str) and old in obj:  # a command line naming the folder
        return obj.replace(old, new)
    return obj


# ---- the stages (each runs against one pair folder) ----------------------------------------------

def done_stages(pair: Pair, folder: Path) -> list[str]:
    """The stages whose published output in folder was made for this pair's keys, in order."""
    done = []
    if records.stage_key(folder / records.BUILD_RECORD) == pair.keys["build"]:
        done.append("build")
        if records.stage_key(folder / "run" / records.RUN_RECORD) == pair.keys["run"]:
            done.append("run")
            result = records.read_result(folder)
            if result and result.get("key") == pair.keys["attribute"]:
                done.append("attribute")
    return done


def build_stage(pair: Pair, folder: Path) -> None:
    """A, B and the hybrids built into a staging folder that then replaces `folder` whole."""
    staging = _staging(folder, "build")
    pipeline.build_variants(pair.spec_a, pair.spec_b, staging, pair.options.hybrids == 0, pair.options.hybrids)
    records.write_record(staging / records.BUILD_RECORD, pair.keys["build"], pair=pair.id)
    _replace(staging, folder)


def run_stage(pair: Pair, folder: Path) -> None:
    """The run stage on the built bundles into folder/run (replaced whole)."""
    from rootcause.artifacts import plan as plans

    plan = plans.read_plan(folder)
    staging = _staging(folder / "run", "run")
    pipeline.run_variants(plan, folder, staging, pair.options.budget_s, pair.options.profile_calls)
    records.write_record(staging / records.RUN_RECORD, pair.keys["run"], pair=pair.id, host=os.uname().nodename,
                          pid=os.getpid())
    _replace(staging, folder / "run")


def attribute_stage(pair: Pair, folder: Path, shown_as: Path | None = None) -> dict[str, Any]:
    """Attribution, confirmation and reports of the run in folder; result.json written last.
    shown_as: where folder will be published, when it is a worker's copy."""
    from rootcause.artifacts import plan as plans
    from rootcause.report.sweep import pair_row

    shown = shown_as or folder
    plan = plans.read_plan(folder)
    o = pair.options
    doc = pipeline.analyze_run(plan, folder, folder / "run", o.threshold, o.device, o.profile_calls,
                               pair.command(shown))
    if shown != folder:
        doc = _relocate(doc, str(folder), str(shown))
    pipeline.write_reports(doc, folder, title=pair.id)
    row = {**_head(pair), **pair_row(doc), "status": "ok", "stage": "attribute", "error": None}
    records.write_record(folder / records.RESULT, pair.keys["attribute"], row=row)
    return row


def failed_row(pair: Pair, stage: str, error: str, folder: Path | None = None) -> dict[str, Any]:
    """A pair that stopped at `stage`; recorded in its folder (when given) so a resume keeps it."""
    row = {**_head(pair), "status": "failed", "stage": stage, "error": error}
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        records.write_record(folder / records.RESULT, pair.keys["attribute"], row=row)
    return row


def _head(pair: Pair) -> dict[str, Any]:
    return {"id": pair.id, "a": pair.spec_a.name, "b": pair.spec_b.name, "target": pair.target,
            "report": f"{pair.id}/report.html"}


def stage_error(err: BaseException) -> str:
    """One line for a stage that raised: bad input and differing outputs as the CLI words them,
    anything else with its exception type."""
    from parsers import ParseError

    if isinstance(err, OutputsDiffer):
        text = f"outputs differ: {err}"
    elif isinstance(err, (UsageError, ParseError)):
        text = str(err)
    else:
        text = f"{type(err).__name__}: {err}"
    return " ".join(text.split())


def _staging(final: Path, stage: str) -> Path:
    """A fresh staging folder beside final (stale ones from killed attempts removed)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    for stale in final.parent.glob(f".{final.name}.{stage}.*"):
        shutil.rmtree(stale, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f".{final.name}.{stage}.", dir=final.parent))


def _replace(staging: Path, final: Path) -> None:
    """staging becomes final in one rename (the old final, if any, moved aside first); a final
    that holds files the sweep did not write is refused (fileio.check_replaceable)."""
    if staging.is_dir():  # a stage's folder; single files are the attribution stage's own names
        check_replaceable(final, "sweep's stage")
        mark_owned(staging)
    old = None
    if final.exists():
        old = final.parent / f".{final.name}.old.{os.getpid()}.{time.monotonic_ns()}"
        os.replace(final, old)
    os.replace(staging, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


# ---- packing a folder for the object store ------------------------------------------------------

def pack(folder: Path, names: list[str] | None = None) -> bytes:
    """folder (or only its entries `names`) as an uncompressed tar archive."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in names if names is not None else sorted(os.listdir(folder)):
            if (folder / name).exists():
                tar.add(folder / name, arcname=name)
    return buf.getvalue()


def unpack(data: bytes, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        tar.extractall(folder, filter="data")


def publish_build(data: bytes, folder: Path) -> None:
    staging = _staging(folder, "build")
    unpack(data, staging)
    _replace(staging, folder)


def publish_run(data: bytes, folder: Path) -> None:
    staging = _staging(folder / "run", "run")
    unpack(data, staging)
    _replace(staging, folder / "run")


ATTRIBUTION_FILES = [pipeline.CPU_PROFILES, "attribution.json", "report.html", "report.md", records.RESULT]


def publish_attribution(data: bytes, folder: Path) -> None:
    """The attribution stage's files into folder: each entry renamed into place, result.json last."""
    staging = _staging(folder / "attribution", "attribute")
    unpack(data, staging)
    for name in ATTRIBUTION_FILES:
        if (staging / name).exists():
            _replace(staging / name, folder / name)
    shutil.rmtree(staging, ignore_errors=True)


# ---- the sweep's own files ---------------------------------------------------------------------------

def write_summary(sweep: Sweep, out: Path, pairs_root: Path, rows: list[dict[str, Any] | None],
                  executor: str) -> list[Path]:
    """sweep.json, sweep.md and sweep.html in out (rows of pairs not yet done say so)."""
    from rootcause.report.sweep import render_sweep_html, render_sweep_markdown

    full = []
    for pair, row in zip(sweep.pairs, rows):
        row = dict(row) if row else {**_head(pair), "status": "pending", "stage": None, "error": None}
        row["report"] = os.path.relpath(pairs_root / row["report"], out)
        full.append(row)
    meta = {"name": sweep.name, "sweep_file": str(sweep.file), "pairs_root": str(pairs_root),
            "updated_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "executor": executor}
    written = [records.write_sweep(out, {**meta, "rows": full})]
    written.append(write_atomic(out / "sweep.md", render_sweep_markdown(full, meta)))
    written.append(write_atomic(out / "sweep.html", render_sweep_html(full, meta)))
    return written


# ---- executors ---------------------------------------------------------------------------------------

def run_sequential(sweep: Sweep, out: Path, until: str = "attribute", retry_failed: bool = False,
                   on_row: Callable[[int, dict[str, Any]], None] | None = None) -> list[dict[str, Any] | None]:
    """Every pair here, one after another; the rows (None for a pair stopped by `until`)."""
    pairs_root = out / "pairs"
    rows: list[dict[str, Any] | None] = [None] * len(sweep.pairs)
    for i, pair in enumerate(sweep.pairs):
        folder = pairs_root / pair.id
        rows[i] = _resume_row(pair, folder, retry_failed)
        if rows[i] is None:
            rows[i] = _run_pair_here(pair, folder, until)
        if on_row:
            on_row(i, rows[i])
    return rows


def _resume_row(pair: Pair, folder: Path, retry_failed: bool) -> dict[str, Any] | None:
    result = records.read_result(folder)
    if result and result.get("key") == pair.keys["attribute"]:
        if result["row"].get("status") == "ok" or not retry_failed:
            pipeline.progress(f"{pair.id}: done earlier ({result['row'].get('status')})")
            return result["row"]
    return None


def _run_pair_here(pair: Pair, folder: Path, until: str) -> dict[str, Any] | None:
    done = done_stages(pair, folder)
    for stage in STAGES[: STAGES.index(until) + 1]:
        if stage in done:
            continue
        pipeline.progress(f"{pair.id}: {stage}")
        try:
            if stage == "build":
                build_stage(pair, folder)
            elif stage == "run":
                run_stage(pair, folder)
            else:
                return attribute_stage(pair, folder)
        except Exception as err:  # one pair's failure is its row; the sweep goes on
            pipeline.progress(f"{pair.id}: {stage} failed: {stage_error(err)}")
            return failed_row(pair, stage, f"{stage}: {stage_error(err)}", folder)
    return None


# ---- on Ray --------------------------------------------------------------------------------------

def _task_build(pair: Pair, shared: str | None) -> dict[str, Any]:
    """Ray task: the build stage; the pair folder as a tar (or, shared, written in place)."""
    try:
        if shared:
            build_stage(pair, Path(shared) / pair.id)
            return {"ok": True}
        with tempfile.TemporaryDirectory(prefix="rootcause-sweep-") as tmp:
            folder = Path(tmp) / pair.id
            build_stage(pair, folder)
            return {"ok": True, "tar": pack(folder)}
    except Exception as err:
        return {"ok": False, "stage": "build", "error": f"build: {stage_error(err)}"}


def _task_run(pair: Pair, built: dict[str, Any], shared: str | None) -> dict[str, Any]:
    """Ray task: the run stage on the built folder; the run directory as a tar."""
    if not built["ok"]:
        return built
    try:
        if shared:
            run_stage(pair, Path(shared) / pair.id)
            return {"ok": True}
        with tempfile.TemporaryDirectory(prefix="rootcause-sweep-") as tmp:
            folder = Path(tmp) / pair.id
            unpack(built["tar"], folder)
            run_stage(pair, folder)
            return {"ok": True, "tar": pack(folder / "run")}
    except Exception as err:
        return {"ok": False, "stage": "run", "error": f"run: {stage_error(err)}"}


def _task_attribute(pair: Pair, built: dict[str, Any], ran: dict[str, Any], shared: str | None,
                    final: str) -> dict[str, Any]:
    """Ray task: the attribution stage; its files (reports, result.json) as a tar, and the row."""
    for earlier in (built, ran):
        if not earlier["ok"]:
            return earlier
    try:
        if shared:
            return {"ok": True, "row": attribute_stage(pair, Path(shared) / pair.id)}
        with tempfile.TemporaryDirectory(prefix="rootcause-sweep-") as tmp:
            folder = Path(tmp) / pair.id
            unpack(built["tar"], folder)
            unpack(ran["tar"], folder / "run")
            row = attribute_stage(pair, folder, shown_as=Path(final))
            return {"ok": True, "row": row, "tar": pack(folder, ATTRIBUTION_FILES)}
    except Exception as err:
        return {"ok": False, "stage": "attribute", "error": f"attribute: {stage_error(err)}"}


def run_resources(target: str) -> dict[str, Any]:
    """Ray options of a run task: a CPU for llvm; a GPU plus one unit of the target's resource."""
    if target.startswith("llvm"):
        return {"num_cpus": 1}
    return {"num_cpus": 1, "num_gpus": 1, "resources": {target: 1}}


MAX_IN_FLIGHT = 32  # pairs with tasks on the cluster at once (each pins its build's tar until done)


def run_on_ray(sweep: Sweep, out: Path, shared: Path | None = None, until: str = "attribute",
               retry_failed: bool = False, max_retries: int = 3,
               on_row: Callable[[int, dict[str, Any]], None] | None = None,
               max_in_flight: int = MAX_IN_FLIGHT) -> list[dict[str, Any] | None]:
    """Every pair's stages as Ray tasks on the cluster ray.init connected to (the caller's
    job), at most max_in_flight pairs submitted at once (the next when one finishes). Finished
    stages are published into the pair folders as they arrive."""
    import ray

    if max_in_flight < 1:
        raise UsageError(f"--max-in-flight: must be >= 1, got {max_in_flight}")
    pairs_root = (shared or out) / "pairs"
    shared_arg = str(pairs_root) if shared else None
    tasks = {"build": ray.remote(num_cpus=1, max_retries=max_retries)(_task_build),
             "run": ray.remote(max_retries=max_retries)(_task_run),
             "attribute": ray.remote(num_cpus=1, max_retries=max_retries)(_task_attribute)}
    offered = ray.cluster_resources()
    rows: list[dict[str, Any] | None] = [None] * len(sweep.pairs)

    def submit(i: int) -> list[tuple[str, Any]]:
        """The pair's remaining stages as chained tasks ([] when nothing is left to submit)."""
        rows[i] = _row_without_tasks(sweep.pairs[i], pairs_root, until, retry_failed, offered)
        if rows[i] is not None and on_row:
            on_row(i, rows[i])
        return [] if rows[i] is not None else _chain(sweep.pairs[i], pairs_root, shared_arg, until, tasks)

    _collect(sweep, pairs_root, submit, rows, shared is not None, on_row, max_in_flight)
    return rows


def _row_without_tasks(pair: Pair, pairs_root: Path, until: str, retry_failed: bool,
                       offered: dict[str, float]) -> dict[str, Any] | None:
    """The pair's row when it needs no tasks: done earlier, or a target no node offers."""
    folder = pairs_root / pair.id
    row = _resume_row(pair, folder, retry_failed)
    if row is not None:
        return row
    missing = [r for r in run_resources(pair.target).get("resources", {}) if r not in offered]
    if "run" in STAGES[: STAGES.index(until) + 1] and "run" not in done_stages(pair, folder) and missing:
        return failed_row(pair, "run", f"run: no node of the Ray cluster offers the resource '{missing[0]}' "
                          f"(start GPU nodes with ray start --num-gpus N --resources "
                          f"'{{\"{missing[0]}\": N}}')", folder)
    return None


def _chain(pair: Pair, pairs_root: Path, shared: str | None, until: str,
           tasks: dict[str, Any]) -> list[tuple[str, Any]]:
    """(stage, object ref) of each stage still to run, each task fed its predecessors' refs."""
    import ray

    folder = pairs_root / pair.id
    done = done_stages(pair, folder)
    wanted = STAGES[: STAGES.index(until) + 1]
    chain: list[tuple[str, Any]] = []
    built = (ray.put({"ok": True} if shared else {"ok": True, "tar": pack(folder)}) if "build" in done
             else tasks["build"].remote(pair, shared))
    if "build" not in done:
        chain.append(("build", built))
    if "run" in wanted:
        ran = (ray.put({"ok": True} if shared else {"ok": True, "tar": pack(folder / "run")}) if "run" in done
               else tasks["run"].options(**run_resources(pair.target)).remote(pair, built, shared))
        if "run" not in done:
            chain.append(("run", ran))
        if "attribute" in wanted:
            chain.append(("attribute", tasks["attribute"].remote(pair, built, ran, shared, str(folder))))
    return chain


def _collect(sweep: Sweep, pairs_root: Path, submit: Callable[[int], list[tuple[str, Any]]],
             rows: list[dict[str, Any] | None], shared: bool,
             on_row: Callable[[int, dict[str, Any]], None] | None, max_in_flight: int) -> None:
    """Publish each pair's stages in order as their tasks finish; a failure ends its pair.
    Pairs are submitted in order, a new one whenever fewer than max_in_flight have tasks out."""
    import ray

    chains: dict[int, list[tuple[str, Any]]] = {}
    waiting = list(range(len(sweep.pairs)))
    while waiting or chains:
        while waiting and len(chains) < max_in_flight:
            i = waiting.pop(0)
            chain = submit(i)
            if chain:
                chains[i] = chain
        if not chains:
            continue
        heads = {chain[0][1]: i for i, chain in chains.items()}
        ready, _ = ray.wait(list(heads), num_returns=1)
        i = heads[ready[0]]
        pair, folder = sweep.pairs[i], pairs_root / sweep.pairs[i].id
        stage, ref = chains[i].pop(0)
        result = _result(ref, stage)
        if not result["ok"]:
            pipeline.progress(f"{pair.id}: {result['error']}")
            rows[i] = failed_row(pair, result["stage"], result["error"], folder)
            for _, rest in chains[i]:
                ray.cancel(rest)
            chains[i] = []
        else:
            pipeline.progress(f"{pair.id}: {stage} done")
            if not shared:
                {"build": publish_build, "run": publish_run, "attribute": publish_attribution}[stage](
                    result["tar"], folder)
            if stage == "attribute":
                rows[i] = result["row"]
        if not chains[i]:
            del chains[i]
            if on_row and rows[i] is not None:
                on_row(i, rows[i])


def _result(ref: Any, stage: str) -> dict[str, Any]:
    """A task's returned dict, or a failed one for a task that died past its retries."""
    import ray

    try:
        return ray.get(ref)
    except ray.exceptions.RayError as err:
        return {"ok": False, "stage": stage, "error": f"{stage}: {stage_error(err).splitlines()[0][:300]}"}


def ray_map(fn: Callable[..., dict[str, Any]], items: list[tuple], max_in_flight: int = MAX_IN_FLIGHT,
            max_retries: int = 3, stage: str = "build") -> list[dict[str, Any]]:
    """fn(*item) for every item as one-CPU Ray tasks, at most max_in_flight at once; the
    results in the items' order (a task that died past its retries: ok False and its error).
    For work outside a sweep's pairs, e.g. the builds of a bisection."""
    import ray

    task = ray.remote(num_cpus=1, max_retries=max_retries)(fn)
    results: list[dict[str, Any] | None] = [None] * len(items)
    waiting, running = list(range(len(items))), {}
    while waiting or running:
        while waiting and len(running) < max_in_flight:
            i = waiting.pop(0)
            running[task.remote(*items[i])] = i
        ready, _ = ray.wait(list(running), num_returns=1)
        results[running.pop(ready[0])] = _result(ready[0], stage)
    return results  # type: ignore[return-value]


def init_ray(address: str, num_cpus: int | None) -> None:
    """Start (local) or join (auto, an address) the Ray cluster the stages run on."""
    try:
        import ray
    except ImportError:
        raise UsageError("--ray: Ray is not installed here; pip install 'rootcause[ray]'") from None
    if ray.is_initialized():
        return
    if address == "local":
        from rootcause.gpus import detect_gpu, gpu_count

        gpus = gpu_count()
        target = detect_gpu() if gpus else None
        ray.init(num_cpus=num_cpus, num_gpus=gpus, resources={target: gpus} if target else None,
                 include_dashboard=False)
        return
    if num_cpus is not None:
        raise UsageError("--num-cpus: only with --ray local (a running cluster has its own)")
    try:
        ray.init(address=address)
    except (ConnectionError, ValueError, RuntimeError) as err:
        raise UsageError(f"--ray {address}: cannot join the cluster: {' '.join(str(err).split())[:200]}") from None
