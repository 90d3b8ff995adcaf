"""Where the stages of many pairs run, and how their folders travel: the pieces rootcause.sweep
and rootcause.bisect share.

- In process: nothing to move.
- On Ray: each stage a task (builds and attributions one CPU; a GPU run num_gpus=1 plus one unit
  of a custom resource named after the target, e.g. {"cuda:sm_90": 1}: run_resources), at most
  MAX_IN_FLIGHT pairs out at once; `ray_map` runs one-CPU tasks for work outside pairs (a
  bisection's builds). Between tasks a folder travels as a tar archive in Ray's object store
  (pack, unpack) and is published whole into its final place (publish: staged beside it, then one
  rename), or, with a shared folder every node mounts, the tasks read and write it in place.
"""
from __future__ import annotations

import io
import logging
import os
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from rootcause.errors import OutputsDiffer, UsageError
from rootcause.fileio import check_replaceable, make_folder, mark_owned

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


def staging_folder(final: Path, stage: str) -> Path:
    """A fresh staging folder beside final (stale ones from killed attempts removed)."""
    make_folder(final.parent)
    for stale in final.parent.glob(f".{final.name}.{stage}.*"):
        shutil.rmtree(stale, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f".{final.name}.{stage}.", dir=final.parent))


def replace_folder(staging: Path, final: Path) -> None:
    """staging becomes final in one rename (the old final, if any, moved aside first); a final
    that holds files rootcause did not write is refused (fileio.check_replaceable)."""
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


def publish(data: bytes, folder: Path, stage: str) -> None:
    """A packed folder unpacked beside `folder` and renamed into its place whole."""
    staging = staging_folder(folder, stage)
    unpack(data, staging)
    replace_folder(staging, folder)


def where_running() -> dict[str, Any]:
    """Where this code runs, for a stage's record: host, process and, inside a Ray task, the
    node's id (several nodes may share one host)."""
    ray = sys.modules.get("ray")  # imported by a Ray worker; never imported for this
    node = None
    if ray is not None and ray.is_initialized():
        node = ray.get_runtime_context().get_node_id()
    return {"host": os.uname().nodename, "pid": os.getpid(), "ray_node": node}


def run_resources(target: str) -> dict[str, Any]:
    """Ray options of a run task: a CPU for llvm; a GPU plus one unit of the target's resource."""
    if target.startswith("llvm"):
        return {"num_cpus": 1}
    return {"num_cpus": 1, "num_gpus": 1, "resources": {target: 1}}


MAX_IN_FLIGHT = 32  # pairs with tasks on the cluster at once (each pins its build's tar until done)


def task_result(ref: Any, stage: str) -> dict[str, Any]:
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
        results[running.pop(ready[0])] = task_result(ready[0], stage)
    return results  # type: ignore[return-value]


# The driver says what each stage did; the workers' own output (each task's progress lines,
# prefixed, coloured and deduplicated by Ray) stays in Ray's session logs
# (/tmp/ray/session_latest/logs/worker-*.out); of Ray's own lines only errors are printed.
QUIET = {"log_to_driver": False, "logging_level": logging.ERROR}


def init_ray(address: str, num_cpus: int | None) -> None:
    """Start (local) or join (auto, an address) the Ray cluster the stages run on."""
    try:
        import ray
    except ImportError:
        raise UsageError("--ray: Ray is not installed here; pip install 'rootcause[ray]'") from None
    if ray.is_initialized():
        return
    if address == "local":
        from rootcause import localcluster
        from rootcause.gpus import detect_gpu, gpu_count

        if not localcluster.inside():
            raise UsageError("--ray local: the cluster starts only inside the namespace localcluster.run_private makes")
        localcluster.remove_folder_at_exit()

        gpus = gpu_count()
        target = detect_gpu() if gpus else None
        # address "local": a new instance even where a cluster already runs on this host (without
        # it, ray.init joins that cluster and refuses the CPU and GPU counts)
        ray.init(address="local", num_cpus=num_cpus, num_gpus=gpus, resources={target: gpus} if target else None,
                 include_dashboard=False, _temp_dir=str(localcluster.ray_folder() / "ray"),
                 _node_ip_address="127.0.0.1", **QUIET)
        return
    if num_cpus is not None:
        raise UsageError("--num-cpus: only with --ray local (a running cluster has its own)")
    try:
        ray.init(address=address, **QUIET)
    except (ConnectionError, ValueError, RuntimeError) as err:
        raise UsageError(f"--ray {address}: cannot join the cluster: {' '.join(str(err).split())[:200]}") from None
