"""A `rootcause run` directory: measurement.json, env.json and the profiles measurement.json names.

measurement.json: {"bundles": {variant: path}, "devices": {variant: device}, "verification": {...},
"measurement": Measurement.to_dict() ({"variants": {name: {"median_s", "ci_s", "samples_s", ...}},
"protocol", "rounds", "budget_s", ...}), "env_warnings": [...], "profiles": {variant: {"profiler",
"ok", "file", "calls", "error"?}}}. env.json: NVML snapshots {"before", "measure_start", "after",
"warnings"}. A run directory is input to the analysis: nothing here writes into one except
`rootcause run` itself.
"""
from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

from rootcause.errors import OutputsDiffer, UsageError
from rootcause.artifacts import schema
from rootcause.artifacts.schema import NUM, Map, Opt
from rootcause.fileio import check_replaceable_file, read_json, write_json
from rootcause.model import Interval, MeasuredPair, WholeGraph

MEASUREMENT = "measurement.json"
ENV = "env.json"


def check_replaceable(run_dir: Path) -> None:
    """UsageError before a run starts when run_dir holds a measurement.json or env.json that
    rootcause did not write there (fileio.check_replaceable_file)."""
    for name in (MEASUREMENT, ENV):
        check_replaceable_file(Path(run_dir) / name)


def write_measurement(run_dir: Path, doc: dict[str, Any]) -> Path:
    return write_json(Path(run_dir) / MEASUREMENT, doc)


def write_env(run_dir: Path, doc: dict[str, Any]) -> Path:
    return write_json(Path(run_dir) / ENV, doc)


# What the analysis reads of measurement.json (artifacts.schema); the rest is carried as written.
VARIANT_TIMES = {"median_s?": Opt(NUM), "samples_s?": Opt([NUM]), "ci_s?": Opt([NUM]), "calls_per_sample?": Opt(int)}
PROFILE = {"profiler?": str, "ok?": bool, "file?": Opt(str), "error?": Opt(str), "calls?": Opt(int),
           "call_starts_ns?": Opt([NUM]), "end_ns?": Opt(NUM), "records?": Opt(int)}
MEASUREMENT_SHAPE = {"bundles?": Opt(Map(str)), "devices?": Opt(Map(Opt(str))), "verification?": Opt(dict),
                     "measurement": {"variants": Map(VARIANT_TIMES), "protocol?": Opt((dict, str)),
                                     "rounds?": Opt(int), "budget_s?": Opt(NUM), "ratios?": Opt([dict]),
                                     "timed_by?": Opt(Map(str))},
                     "profiles?": Opt(Map(PROFILE)), "env_warnings?": Opt([str])}


def read_measurement(run_dir: Path) -> dict[str, Any]:
    """measurement.json of a run directory, checked to hold a measurement of the shape the
    analysis reads."""
    path = Path(run_dir) / MEASUREMENT
    doc = read_json(path, f"no measurement here (is {run_dir} a `rootcause run` directory?)")
    if isinstance(doc, dict) and isinstance(doc.get("verification"), dict) and doc["verification"].get("ok") is False:
        raise OutputsDiffer(f"{path}: the run stopped at verification: {describe_verification(doc['verification'])}")
    if not isinstance(doc, dict) or not isinstance(doc.get("measurement"), dict):
        raise UsageError(f"{path}: no \"measurement\" (the run stopped before it measured)")
    schema.check(doc, MEASUREMENT_SHAPE, str(path))
    return doc


def describe_verification(record: dict[str, Any]) -> str:
    """One line for a failed verification record (measurement.json's "verification"): the variants
    that compute NaN, else each check that failed."""
    nan = record.get("nan") or _nan_in_checks(record)
    if nan:
        # variants alike (the same NaN counts) are named together
        groups: dict[str, list[str]] = {}
        for name, rows in nan.items():
            key = ", ".join(f"output {r['output']}: {r['nan']} of {r['size']} elements" for r in rows)
            groups.setdefault(key, []).append(name)
        return "NaN in the outputs of " + "; ".join(f"{', '.join(names)} ({key})" for key, names in groups.items()) \
            + ": a variant that computes NaN is not compared or measured"
    failed = [c for c in record.get("checks", []) if not all(r.get("ok") for r in c.get("outputs", []))]
    return "; ".join(f"{c['variant']} vs {c['against']} (rtol {c['rtol']:g}, atol {c['atol']:g}): "
                     + "; ".join(_output_problem(r) for r in c["outputs"] if not r.get("ok")) for c in failed)


def _nan_in_checks(record: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The NaN outputs a record written before it had "nan" shows in its checks (both sides')."""
    found: dict[str, dict[int, dict[str, Any]]] = {}
    for c in record.get("checks", []):
        for r in c.get("outputs", []):
            size = math.prod(r.get("shape") or [])
            for name, count in ((c.get("variant"), r.get("nan")), (c.get("against"), r.get("ref_nan"))):
                if name and count:
                    found.setdefault(name, {})[r["output"]] = {"output": r["output"], "nan": count, "size": size}
    return {name: list(rows.values()) for name, rows in found.items()}


def _output_problem(row: dict[str, Any]) -> str:
    return row.get("problem") or (f"output {row['output']}: max abs {row['max_abs']:.3g}, max rel {row['max_rel']:.3g}"
                                  + (f", {row['nan']} NaN" if row.get("nan") else "")
                                  + (f", {row['ref_nan']} NaN in what it is compared with" if row.get("ref_nan") else ""))


def measurement_digest(run_dir: Path) -> str:
    """sha256 of the run's measurement.json bytes: what results derived from it are keyed by."""
    return hashlib.sha256((Path(run_dir) / MEASUREMENT).read_bytes()).hexdigest()


def read_env(run_dir: Path) -> dict[str, Any] | None:
    path = Path(run_dir) / ENV
    return read_json(path, "no such file") if path.is_file() else None


def measured_whole_graph(v: Any, where: str) -> WholeGraph:
    """WholeGraph (ns) of one Measurement variant: median_s and ci_s, or ci from samples_s."""
    from rootcause.stats import median_ci

    if not isinstance(v, dict) or not isinstance(v.get("median_s"), (int, float)):
        raise UsageError(f"{where}: \"median_s\": missing or not a number")
    samples = v.get("samples_s")
    if samples is not None and (not isinstance(samples, list) or not samples
                                or not all(isinstance(x, (int, float)) for x in samples)):
        raise UsageError(f"{where}: \"samples_s\": not a non-empty list of numbers")
    ci = v.get("ci_s")
    if ci is None:
        if samples is None:
            raise UsageError(f"{where}: neither \"ci_s\" nor \"samples_s\": no interval")
        ci = median_ci(samples)
    if not isinstance(ci, (list, tuple)) or len(ci) != 2 or not all(isinstance(x, (int, float)) for x in ci):
        raise UsageError(f"{where}: \"ci_s\": expected [low, high] in seconds, got {ci!r}")
    return WholeGraph(float(v["median_s"]) * 1e9, float(ci[0]) * 1e9, float(ci[1]) * 1e9, "measured",
                      len(samples) if samples else None)


def measured_pair(doc: dict[str, Any], a: str, b: str) -> MeasuredPair | None:
    """The interval of B - A and of B / A where the measurement timed A and B side by side in one
    process (its timed_by says so) and recorded the pair's own delta interval (measure.paired_delta);
    None otherwise: then the delta's interval is the difference of the two variants' intervals."""
    timed_by = doc.get("timed_by") or {}
    if a not in timed_by or timed_by.get(a) != timed_by.get(b):  # not recorded, or two processes
        return None
    for r in doc.get("ratios") or []:
        if not isinstance(r, dict) or {r.get("a"), r.get("b")} != {a, b}:
            continue
        values = _numbers(r.get("delta_s"), *(r.get("delta_ci_s") or [None] * 2), r.get("ratio"), *(r.get("ci") or []))
        if values is None or len(values) != 6 or min(values[3:]) <= 0:
            return None
        delta, d_lo, d_hi, ratio, r_lo, r_hi = values
        sign = 1.0 if r["a"] == a else -1.0  # delta_s is median(r.b) - median(r.a); ratio is r.a / r.b
        lo, hi = sorted((sign * d_lo * 1e9, sign * d_hi * 1e9))
        ratios = (1 / ratio, 1 / r_hi, 1 / r_lo) if r["a"] == a else (ratio, r_lo, r_hi)
        return MeasuredPair(Interval(sign * delta * 1e9, lo, hi), Interval(*ratios))
    return None


def _numbers(*xs: Any) -> list[float] | None:
    """The values as floats where every one is a finite number; else None."""
    if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in xs):
        return None
    return [float(x) for x in xs]


def variant_whole_graph(doc: dict[str, Any], name: str, where: Path) -> WholeGraph:
    """Measured whole-graph latency of one variant of a read_measurement() document."""
    variants = doc["measurement"].get("variants") or {}
    if name not in variants:
        raise UsageError(f"{where}: measurement.variants: no variant '{name}' (it holds "
                         f"{', '.join(map(repr, variants)) or 'none'}); run the bundles in OUT/bundles, whose "
                         "manifests carry the spec names")
    return measured_whole_graph(variants[name], f"{where}: measurement.variants.{name}")


def measurement_meta(doc: dict[str, Any], file: Path | str, labels: tuple[str, str]) -> dict[str, Any]:
    """What attribution.json records of a measurement (file, protocol, rounds, budget)."""
    return {"file": str(file), "protocol": doc.get("protocol"), "rounds": doc.get("rounds"),
            "budget_s": doc.get("budget_s"), "variants": list(labels)}


def measurement_doc(path: str | Path) -> tuple[Any, Path]:
    """A Measurement document, bare or inside a run's measurement.json (a run directory means its
    measurement.json), and the file it was read from."""
    p = Path(path)
    if p.is_dir():
        p = p / MEASUREMENT
    doc = read_json(p, "no such measurement file")
    if isinstance(doc, dict) and isinstance(doc.get("measurement"), dict):
        doc = doc["measurement"]  # rootcause run's measurement.json
    elif isinstance(doc, dict) and doc.get("measurement") is not None:
        raise UsageError(f"{p}: measurement: not an object (the run recorded no measurement?)")
    return doc, p


def load_measurement(path: str | None, labels: tuple[str, str]
                     ) -> tuple[WholeGraph | None, WholeGraph | None, dict[str, Any] | None, MeasuredPair | None]:
    """Whole-graph latency of the variants named `labels` from a Measurement file, bare or inside
    a run's measurement.json (a run directory means its measurement.json), its meta, and the
    pair's own intervals where it timed them side by side (measured_pair)."""
    if path is None:
        return None, None, None, None
    doc, p = measurement_doc(path)
    where = f"{p}: measurement"
    table = doc.get("variants") if isinstance(doc, dict) else None
    if not isinstance(table, dict):
        raise UsageError(f"{p}: \"variants\": missing or not an object (not a rootcause Measurement)")
    out = []
    for key, label in zip("ab", labels):
        if label not in table:
            raise UsageError(f"{p}: no variant {label!r} (variant {key}); it holds {', '.join(map(repr, table))}: "
                             f"name them with --label-{key}")
        out.append(measured_whole_graph(table[label], f"{where}.variants.{label}"))
    return out[0], out[1], measurement_meta(doc, path, labels), measured_pair(doc, *labels)


def run_record(profile: str) -> tuple[dict[str, Any] | None, Path | None]:
    """The profiles.<variant> entry `rootcause run` wrote for this file (measurement.json in the
    same directory, matched by file name), and that measurement.json; (None, None) if none."""
    file = Path(profile)
    if not file.is_file():
        return None, None  # 'FILE#N': a segment of a shared capture, not one run profile
    mfile = file.parent / MEASUREMENT
    if not mfile.is_file():
        return None, None
    doc = read_json(mfile, "no such file")
    profiles = doc.get("profiles") if isinstance(doc, dict) else None
    for info in (profiles or {}).values() if isinstance(profiles, dict) else ():
        if isinstance(info, dict) and info.get("file") == file.name:
            return info, mfile
    return None, None


def run_environment(*profiles: str) -> dict[str, Any] | None:
    """env.json of the `rootcause run` directory the profiles lie in (the first that has one)."""
    for profile in profiles:
        file = Path(profile)
        if file.is_file() and (file.parent / ENV).is_file():
            return read_json(file.parent / ENV, "no such file")
    return None


def profile_file(run_dir: Path, doc: dict[str, Any], name: str, extra: dict[str, Any] | None = None) -> Path:
    """The per-kernel profile of variant `name`: the file the run recorded, else one named after it.

    extra: profiles recorded outside the run directory ({name: record with an absolute 'file'}),
    e.g. CPU profiles `analyze --from-run` takes here."""
    info = (extra or {}).get(name) or doc.get("profiles", {}).get(name)
    if info and info.get("ok") and info.get("file"):
        return Path(run_dir) / info["file"]  # an absolute 'file' stays itself
    candidates = sorted(Path(run_dir).glob(f"{name}.*.json")) + sorted(Path(run_dir).glob(f"{name}.*.csv")) + \
        sorted(Path(run_dir).glob(f"{name}.*.jsonl"))
    if candidates:
        return candidates[0]
    why = info.get("error") if info else "no profile recorded"
    raise UsageError(f"{Path(run_dir) / MEASUREMENT}: profiles.{name}: {why}; attribution needs a per-kernel "
                     f"profile of both variants (`rootcause run --profile cupti` on a GPU host)")
