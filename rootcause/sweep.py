"""Sweeps: the pairs of a sweep file (rootcause.sweepfile) analyzed in this process or as tasks
on a Ray cluster (rootcause.executors).

Each pair is one `analyze` through rootcause.pipeline, in three stages: build (CPU),
run (one GPU of the pair's target, or a CPU for llvm), attribution (CPU). Each stage
publishes its part of the pair's folder whole (rootcause.artifacts.sweep), so an interrupted
sweep resumes from the stages that finished; a failed stage makes its pair a row with the
error, and the other pairs go on.

Two orchestrators: `run_sequential` (here, one pair after another) and `run_on_ray` (each
stage a Ray task, its folder carried as executors describe).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from rootcause import executors, frontends, pipeline, sweepfile
from rootcause.artifacts import attribution, cpu_profiles, sweep as records
from rootcause.executors import MAX_IN_FLIGHT, pack, replace_folder, run_resources, stage_error, staging_folder, \
    task_result, unpack
from rootcause.errors import UsageError
from rootcause.fileio import write_atomic
from rootcause.spec import VariantSpec
from rootcause.sweepfile import Pair, Sweep

STAGES = records.STAGES


def load(path: str | Path, resolve_target: Callable[[str, VariantSpec], str]) -> Sweep:
    """The sweep file (sweepfile.read), each pair with its stage keys."""
    sweep = sweepfile.read(path, resolve_target)
    digests: dict[int, str] = {}  # id(spec) -> its digest: a spec many pairs share is hashed once
    for pair in sweep.pairs:
        pair.keys = _stage_keys(pair, sweep.file.parent, digests)
    return sweep


# ---- stage keys ----------------------------------------------------------------------------------

def _stage_keys(pair: Pair, folder: Path, digests: dict[int, str] | None = None) -> dict[str, str]:
    """One key per stage: what decides the stage's output. Paths are taken relative to the
    sweep file's folder, so a sweep built in one checkout resumes in another."""
    digests = {} if digests is None else digests
    h = hashlib.sha256()
    for spec in (pair.spec_a, pair.spec_b):
        if id(spec) not in digests:
            one = hashlib.sha256(json.dumps(_relative(canonical(spec), str(folder)), sort_keys=True).encode())
            for path in _spec_files(spec):
                one.update(Path(path).read_bytes())
            digests[id(spec)] = one.hexdigest()
        h.update(digests[id(spec)].encode())
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
    staging = staging_folder(folder, "build")
    pipeline.build_variants(pair.spec_a, pair.spec_b, staging, pair.options.hybrids == 0, pair.options.hybrids)
    records.write_record(staging / records.BUILD_RECORD, pair.keys["build"], pair=pair.id,
                         ran_on=executors.where_running())
    replace_folder(staging, folder)


def run_stage(pair: Pair, folder: Path) -> None:
    """The run stage on the built bundles into folder/run (replaced whole)."""
    from rootcause.artifacts import plan as plans

    plan = plans.read_plan(folder)
    staging = staging_folder(folder / "run", "run")
    pipeline.run_variants(plan, folder, staging, pair.options.budget_s, pair.options.profile_calls)
    records.write_record(staging / records.RUN_RECORD, pair.keys["run"], pair=pair.id,
                         ran_on=executors.where_running())
    replace_folder(staging, folder / "run")


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
    records.write_record(folder / records.RESULT, pair.keys["attribute"], row=row, ran_on=executors.where_running())
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


def publish_build(data: bytes, folder: Path) -> None:
    executors.publish(data, folder, "build")


def publish_run(data: bytes, folder: Path) -> None:
    executors.publish(data, folder / "run", "run")


ATTRIBUTION_FILES = [cpu_profiles.FOLDER, *attribution.REPORT_FILES, records.RESULT]


def publish_attribution(data: bytes, folder: Path) -> None:
    """The attribution stage's files into folder: each entry renamed into place, result.json last."""
    staging = staging_folder(folder / "attribution", "attribute")
    unpack(data, staging)
    for name in ATTRIBUTION_FILES:
        if (staging / name).exists():
            replace_folder(staging / name, folder / name)
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

def _in_task(stage: str, pair: Pair, shared: str | None, final: str,
             work: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """A stage's work as a Ray task: on the shared pair folder, or on a fresh copy in this
    worker's temporary folder; {'ok': True, ...what work returned}, or the failure in one line,
    naming the pair's folder as the driver publishes it, not the worker's copy."""
    copy = None
    try:
        if shared:
            return {"ok": True, **work(Path(shared) / pair.id)}
        with tempfile.TemporaryDirectory(prefix="rootcause-sweep-") as tmp:
            copy = str(Path(tmp) / pair.id)
            return {"ok": True, **work(Path(copy))}
    except Exception as err:
        text = stage_error(err)
        return {"ok": False, "stage": stage, "error": f"{stage}: {text.replace(copy, final) if copy else text}"}


def _task_build(pair: Pair, shared: str | None, final: str) -> dict[str, Any]:
    """Ray task: the build stage; the pair folder as a tar (or, shared, written in place)."""
    def work(folder: Path) -> dict[str, Any]:
        build_stage(pair, folder)
        return {} if shared else {"tar": pack(folder)}
    return _in_task("build", pair, shared, final, work)


def _task_run(pair: Pair, built: dict[str, Any], shared: str | None, final: str) -> dict[str, Any]:
    """Ray task: the run stage on the built folder; the run directory as a tar."""
    if not built["ok"]:
        return built

    def work(folder: Path) -> dict[str, Any]:
        if not shared:
            unpack(built["tar"], folder)
        run_stage(pair, folder)
        return {} if shared else {"tar": pack(folder / "run")}
    return _in_task("run", pair, shared, final, work)


def _task_attribute(pair: Pair, built: dict[str, Any], ran: dict[str, Any], shared: str | None,
                    final: str) -> dict[str, Any]:
    """Ray task: the attribution stage; its files (reports, result.json) as a tar, and the row."""
    for earlier in (built, ran):
        if not earlier["ok"]:
            return earlier

    def work(folder: Path) -> dict[str, Any]:
        if shared:
            return {"row": attribute_stage(pair, folder)}
        unpack(built["tar"], folder)
        unpack(ran["tar"], folder / "run")
        row = attribute_stage(pair, folder, shown_as=Path(final))
        return {"row": row, "tar": pack(folder, ATTRIBUTION_FILES)}
    return _in_task("attribute", pair, shared, final, work)


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
             else tasks["build"].remote(pair, shared, str(folder)))
    if "build" not in done:
        chain.append(("build", built))
    if "run" in wanted:
        ran = (ray.put({"ok": True} if shared else {"ok": True, "tar": pack(folder / "run")}) if "run" in done
               else tasks["run"].options(**run_resources(pair.target)).remote(pair, built, shared, str(folder)))
        if "run" not in done:
            chain.append(("run", ran))
        if "attribute" in wanted:
            chain.append(("attribute", tasks["attribute"].remote(pair, built, ran, shared, str(folder))))
    return chain


POLL_S = 5.0  # how often a sweep waiting on Ray checks that its run tasks still have a node


def _stranded(sweep: Sweep, chains: dict[int, list[tuple[str, Any]]]) -> list[int]:
    """The pairs whose run task waits for a resource no live node offers any more (its node
    died): Ray would keep such a task pending for ever."""
    import ray

    offered = ray.cluster_resources()
    out = []
    for i, chain in chains.items():
        needs = run_resources(sweep.pairs[i].target).get("resources", {})
        if any(stage == "run" for stage, _ in chain) and any(offered.get(r, 0) < n for r, n in needs.items()):
            out.append(i)
    return out


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
        ready, _ = ray.wait(list(heads), num_returns=1, timeout=POLL_S)
        if not ready:  # a task waits: for a node that left?
            for i in _stranded(sweep, chains):
                pair = sweep.pairs[i]
                rows[i] = failed_row(pair, "run", f"run: no node of the Ray cluster offers '{pair.target}' any more "
                                     "(the node that did left during the sweep)", pairs_root / pair.id)
                pipeline.progress(f"{pair.id}: {rows[i]['error']}")
                for _, rest in chains.pop(i):
                    ray.cancel(rest)
                if on_row:
                    on_row(i, rows[i])
            continue
        i = heads[ready[0]]
        pair, folder = sweep.pairs[i], pairs_root / sweep.pairs[i].id
        stage, ref = chains[i].pop(0)
        result = task_result(ref, stage)
        if not result["ok"]:
            pipeline.progress(f"{pair.id}: {result['error']}")
            rows[i] = failed_row(pair, result["stage"], result["error"], folder)
            # The pair's later stages are left to return this failure themselves (their input
            # says it), not cancelled: a cancel that races a task's reply aborts Ray's driver,
            # the sweep's own process (a RAY_CHECK in its task manager).
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


