"""The attribution of one pair: the typed result attribute() returns and the checks refine."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

import rootcause
from rootcause.artifacts.attribution import SCHEMA_VERSION
from rootcause.model import COUNTER_COLUMNS, KERNEL_EVENT_COLUMNS, Interval
from rootcause.stats import LEVEL


@dataclass(frozen=True)
class Withdrawal:
    """A verdict a check takes back (verdict.withdraw applies it; Attribution.withdrawals keeps it).

    unit: the unit's id, or None for the whole graph. For a unit, `why` is its cannot-conclude
    line. For the whole graph, `why` is the headline's reason; `measured`: the measured delta is
    withdrawn as not significant (a cannot-conclude line says so, the closure line is said again),
    where without it no verdict was reached at all."""
    # the check that took it back: as-profiled, measured-interval, calls, samples, shared-basis, repeat, floor,
    # clear-of-floor
    check: str
    why: str
    unit: int | None = None
    measured: bool = False


@dataclass(frozen=True)
class Finding:
    """What one rule found: its name, the sentence a report prints, the unit it is of (None for
    the whole graph) and the numbers behind the sentence (JSON values)."""
    rule: str
    sentence: str
    unit: int | None = None
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "unit": self.unit, "sentence": self.sentence, "evidence": self.evidence}


@dataclass
class Unit:
    """One aligned unit: the kernels of A and of B that compute the same ops (analysis.align), their
    time per graph call and the delta B - A, in ns with 95% intervals; attribution.json's units[].

    significant: the delta's interval excludes 0 and it is at least the minimum effect, until a
    check withdraws it (verdict.withdraw). The fields after `findings` are set by later steps and
    written only once set."""
    unit: int
    kernels_a: list[str]
    kernels_b: list[str]
    source_ops: list[str]
    method: str  # the alignment tier that joined the unit
    flagged: bool  # its kernels are of one variant only
    time_a_ns: Interval
    time_b_ns: Interval
    launches_a: float  # median launches per graph call
    launches_b: float
    idle_before_a_ns: float  # median per profiled call: the device's idle time just before the launches
    idle_before_b_ns: float
    delta_ns: Interval
    significant: bool
    share: float | None  # of the whole-graph delta
    findings: list[Finding] = field(default_factory=list)
    unexplained: bool | None = None  # diagnose: significant, and no rule named a mechanism
    repeat_delta_ns: Interval | None = None  # verdict.require_repeat: the second pair of profiles' delta

    def time_ns(self, v: str) -> Interval:
        """Side v's ('a' or 'b') time per graph call."""
        return self.time_a_ns if v == "a" else self.time_b_ns

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "unit": self.unit, "kernels_a": self.kernels_a, "kernels_b": self.kernels_b,
            "source_ops": self.source_ops, "method": self.method, "flagged": self.flagged,
            "time_a_ns": self.time_a_ns.to_dict(), "time_b_ns": self.time_b_ns.to_dict(),
            "launches_a": self.launches_a, "launches_b": self.launches_b,
            "idle_before_a_ns": self.idle_before_a_ns, "idle_before_b_ns": self.idle_before_b_ns,
            "delta_ns": self.delta_ns.to_dict(), "significant": self.significant, "share": self.share,
            "findings": [f.to_dict() for f in self.findings]}
        if self.unexplained is not None:
            out["unexplained"] = self.unexplained
        if self.repeat_delta_ns is not None:
            out["repeat_delta_ns"] = self.repeat_delta_ns.to_dict()
        return out


@dataclass
class WholeGraphDelta:
    """The whole graph per call: A's and B's times and B - A, in ns with 95% intervals, where they
    came from, and whether the delta is called significant; attribution.json's whole_graph.

    significant holds until a check withdraws it (verdict.withdraw); undetermined is then why no
    verdict was reached, which the headline says instead of a direction."""
    source: str  # what A's time is (model.WholeGraph.source, verdict.BASES)
    note: str | None  # what that time covers, where it is not a measured latency
    a: Interval
    b: Interval
    delta_ns: Interval
    significant: bool
    ratio: float | None  # B's median over A's
    unit_delta_sum_ns: float
    ratio_b_over_a: Interval | None = None  # A and B timed side by side: the pair's own interval
    basis: dict[str, str] | None = None  # each side's source (verdict.require_shared_basis)
    undetermined: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "source": self.source, "note": self.note, "a": self.a.to_dict(), "b": self.b.to_dict(),
            "delta_ns": self.delta_ns.to_dict(), "significant": self.significant, "ratio": self.ratio,
            "unit_delta_sum_ns": self.unit_delta_sum_ns}
        if self.ratio_b_over_a is not None:
            out["delta_interval"] = "paired"
            out["ratio_b_over_a"] = self.ratio_b_over_a.to_dict()
        if self.basis is not None:
            out["basis"] = self.basis
        if self.undetermined is not None:
            out["undetermined"] = self.undetermined
        return out


@dataclass
class Residual:
    """Whole-graph time minus kernel busy time per call, in ns with 95% intervals: launch
    overhead, gaps between kernels, host work; attribution.json's residual."""
    a: Interval
    b: Interval
    delta_ns: Interval
    significant: bool
    share: float | None  # of the whole-graph delta
    launches_per_call: dict[str, float]  # per side: median kernel launches per graph call

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a.to_dict(), "b": self.b.to_dict(), "delta_ns": self.delta_ns.to_dict(),
                "significant": self.significant, "share": self.share, "launches_per_call": self.launches_per_call,
                "what": "whole-graph time minus kernel busy time: launch overhead, gaps, host"}


@dataclass
class Variant:
    """One side of the pair as profiled: attribution.json's variants.a and variants.b. The fields
    after span_ns name the files it was read from; the pipeline sets them, and they are written
    only once set."""
    label: str
    calls: int  # profiled graph calls
    profilers: list[str]  # what recorded its kernels (cupti, ncu, kineto, the CPU's ...)
    launches_per_call: float  # median
    kernel_busy_ns: Interval  # per call: the union of its kernels' times
    span_ns: Interval  # per call: first kernel start to last kernel end
    profile: str | None = None
    catalog: str | None = None
    entry: str | None = None
    source: list[str] | None = None  # the profiles' event sources

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "label": self.label, "calls": self.calls, "profilers": self.profilers,
            "launches_per_call": self.launches_per_call, "kernel_busy_ns": self.kernel_busy_ns.to_dict(),
            "span_ns": self.span_ns.to_dict()}
        if self.profile is not None:
            out.update({"profile": self.profile, "catalog": self.catalog, "entry": self.entry, "source": self.source})
        return out


@dataclass(frozen=True)
class Concurrency:
    """Kernel time hidden by units running at once (several streams or threads) per call, in ns
    with 95% intervals: the units' summed time minus the busy time; attribution.json's concurrency."""
    a: Interval
    b: Interval
    delta_ns: Interval
    significant: bool

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a.to_dict(), "b": self.b.to_dict(), "delta_ns": self.delta_ns.to_dict(),
                "significant": self.significant,
                "what": "kernel time hidden by units running concurrently (several streams or threads): the "
                        "units' summed time minus the busy time (their union); a unit's own time is already "
                        "the union of its kernels"}


@dataclass
class Attribution:
    variants: dict[str, Variant]  # 'a' and 'b'
    whole_graph: WholeGraphDelta
    units: list[Unit]
    residual: Residual
    closure: float | None
    kernels: pd.DataFrame  # per (variant, kernel) launch statistics, see KERNEL_STAT_COLUMNS
    findings: list[Finding] = field(default_factory=list)
    cannot_conclude: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    environment: dict[str, Any] | None = None
    min_effect_ns: float = 0.0
    whole_min_effect_ns: float = 0.0  # the whole graph's (larger on the CPU)
    timeline: dict[str, Any] | None = None  # per variant: one_call() of its events
    device: str | None = None  # rootcause.gpus.DEVICES key the profiles came from, when known
    device_b: str | None = None  # B's, where B's profile came from another GPU than A's
    measurement: dict[str, Any] | None = None  # where the whole-graph latency came from
    command: str | None = None  # the command line that produced this attribution
    concurrency: Concurrency | None = None
    # per unit id and side ('a', 'b'): the unit's ns in each profiled call, per launch as the
    # alignment split it (what the unit rows take medians of; confirmation judges hybrids on it)
    unit_calls_ns: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)
    # what the checks took back, in the order they were applied (the findings' and headline's own
    # words are in cannot_conclude and whole_graph.undetermined)
    withdrawals: list[Withdrawal] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "rootcause_version": rootcause.__version__,
            "delta_convention": "B - A in ns per graph call; positive means B is slower",
            "variants": {v: side.to_dict() for v, side in self.variants.items()},
            "whole_graph": self.whole_graph.to_dict(),
            "units": [u.to_dict() for u in self.units],
            "residual": self.residual.to_dict(),
            "concurrency": self.concurrency.to_dict() if self.concurrency is not None else None,
            "closure": self.closure,
            "significance": {"rule": "interval excludes 0 and |delta| >= min_effect_ns (the whole graph: "
                                     "whole_min_effect_ns)",
                             "min_effect_ns": self.min_effect_ns, "level": LEVEL,
                             "whole_min_effect_ns": self.whole_min_effect_ns},
            "findings": [f.to_dict() for f in self.findings],
            "cannot_conclude": self.cannot_conclude,
            "withdrawals": [{"check": w.check, "why": w.why, **({"unit": int(w.unit)} if w.unit is not None else {}),
                             "measured": w.measured} for w in self.withdrawals],
            "notes": self.notes,
            "environment": self.environment,
            "kernels": kernel_rows(self.kernels),
            "timeline": self.timeline,
            "device": self.device,
            **({"device_b": self.device_b} if self.device_b else {}),
            "measurement": self.measurement,
            "command": self.command,
        }


def json_value(x: Any) -> Any:
    """A JSON value: numpy scalars as Python numbers, NA/NaN as None, tuples as lists."""
    if isinstance(x, (tuple, list, np.ndarray)):
        return [json_value(v) for v in x]
    if x is None or x is pd.NA or (isinstance(x, (float, np.floating)) and np.isnan(x)):
        return None
    return x.item() if isinstance(x, np.generic) else x


def json_column(values: pd.Series) -> list[Any]:
    """json_value of every value of a column, converted a column at a time where its dtype allows
    (a per-value walk of a 2,000-kernel table's 16 columns takes a tenth of a second)."""
    if isinstance(values.dtype, np.dtype) and values.dtype.kind in "iub":  # no NA in these
        return values.to_numpy().tolist()
    if values.dtype.kind in "iufb":  # NaN, or a nullable dtype's NA
        return values.astype(object).where(values.notna(), None).tolist()
    return [json_value(v) for v in values.tolist()]


def kernel_rows(kernels: pd.DataFrame) -> list[dict[str, Any]]:
    """KERNEL_STAT_COLUMNS rows as plain JSON objects (attribution.json 'kernels')."""
    cols = [c for c in KERNEL_STAT_COLUMNS if c in kernels.columns]
    columns = [json_column(kernels[c]) for c in cols]
    return [dict(zip(cols, row)) for row in zip(*columns)]


KERNEL_STAT_COLUMNS: dict[str, str] = {
    "variant": "'a' or 'b'", "kernel": "kernel name", "unit": "unit id",
    "launches_per_call": "median launches per graph call",
    "duration_ns": "median duration of one launch", "time_per_call_ns": "median per-call sum",
    "grid": "most common (x, y, z) grid", "block": "most common (x, y, z) block",
    "registers": "most common registers per thread (NA when not recorded)",
    "shared_bytes": "most common shared memory per block", "local_bytes": "local bytes/thread",
    **{c: f"median per launch: {KERNEL_EVENT_COLUMNS[c]} (NA without a counter profile)" for c in COUNTER_COLUMNS},
}
