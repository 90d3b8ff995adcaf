"""Bisection over compiler versions: which release (or wheel, or environment) first shows the
change that separates a good toolchain from a bad one.

Every candidate is the spec's variant with its `toolchain` replaced (rootcause.envs makes the
environment, rootcause.build builds there, cached). Each is measured against the good version
with the interleaved protocol (rootcause.runner); the ratio candidate/good and its interval
decide: first the good/bad pair itself fixes the direction of the change (slower or faster by
more than the threshold), then a candidate whose interval lies beyond the threshold in that
direction is bad, one whose interval lies inside it is good, and one whose interval straddles it
is measured once more with twice the budget, then judged by its median (and said so). A
candidate that cannot be built is skipped, as `git bisect skip` does. Measurements are cached
under <cache>/bisect/ by the two bundles' build keys and the budget, so a rerun is instant.

`by="catalog"` bisects without timing: a candidate is bad when its kernel catalog's formation
(how many kernels, and the pipeline or rule that scheduled each) differs from the good
version's, which finds the release that changed dispatch formation, deterministically.

With Ray (`parallel`), the builds a bisection is about to need run side by side as one-CPU
tasks through rootcause.sweep's executor: good, bad and the first probes together, then before
each probe the probes of both halves that could follow it (LOOKAHEAD levels). Each bundle comes
back as a tar through the object store. Measurements stay here, one at a time, interleaved, so
the search and its verdicts are the sequential one's.
"""
from __future__ import annotations

import dataclasses
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rootcause import envs
from rootcause.artifacts import bisect as bisect_files
from rootcause.artifacts.bundle import read_bundle
from rootcause.build import build_bundle
from rootcause.errors import OutputsDiffer, UsageError
from rootcause.fileio import safe_name
from rootcause.runner import RunRequest, run_bundles
from rootcause.spec import VariantSpec, pinned, toolchain_packages

LOOKAHEAD = 2  # with Ray: probe levels whose builds are submitted ahead of the measurement


@dataclass
class Candidate:
    label: str  # '3.8.0', a wheel's file name, an environment's folder
    toolchain: list[str] = field(default_factory=list)
    python: Path | None = None
    status: str = "untested"  # untested | good | bad | skip
    ratio: dict[str, Any] | None = None  # {'median', 'low', 'high'} of candidate time / good time
    note: str = ""

    def spec(self, base: VariantSpec) -> VariantSpec:
        name = f"{base.name}@{self.label}"
        return dataclasses.replace(base, name=name, toolchain=list(self.toolchain), python=self.python)


def progress(text: str) -> None:
    print(f"[bisect] {text}", file=sys.stderr, flush=True)


def registry_candidates(spec: VariantSpec, good: str, bad: str) -> list[Candidate]:
    """The compiler's released versions from good to bad (both included), in that order;
    pre-releases only when good or bad is one."""
    dist = toolchain_packages(spec.frontend)[0][0]
    releases = list(envs.registry_versions(dist))
    for flag, version in (("--good", good), ("--bad", bad)):
        if version not in releases:
            raise UsageError(f"{flag}: {dist} {version} is not a release the registry has for this Python "
                             f"(it has {', '.join(releases[-8:])}{' ...' if len(releases) > 8 else ''})")
    lo, hi = sorted((releases.index(good), releases.index(bad)))
    keep_pre = envs.is_prerelease(good) or envs.is_prerelease(bad)
    chosen = [v for v in releases[lo:hi + 1] if keep_pre or not envs.is_prerelease(v) or v in (good, bad)]
    if releases.index(good) > releases.index(bad):
        chosen.reverse()
    return [Candidate(v, [f"{dist}=={v}"]) for v in chosen]


def listed_candidates(spec: VariantSpec, items: list[str]) -> list[Candidate]:
    """--versions: each a version of the spec's compiler, 'PKG==VERSION', a wheel or an
    environment's python, good first and bad last."""
    compiler, runtime = toolchain_packages(spec.frontend)
    out = []
    for item in items:
        if item.endswith(".whl"):
            path = Path(item).resolve()
            got = pinned(str(path))
            if not path.is_file() or got is None or got[0] not in compiler:
                raise UsageError(f"--versions: {item}: not a wheel file of {', '.join(compiler)}")
            out.append(Candidate(path.name, [str(path)]))
        elif "/" in item:
            path = Path(item).absolute()
            if not path.is_file():
                raise UsageError(f"--versions: {item}: no python there")
            out.append(Candidate(path.parent.parent.name or str(path), python=path))
        else:
            got = pinned(item if "==" in item else f"{compiler[0]}=={item}")
            if got is None or got[0] not in compiler + runtime:
                raise UsageError(f"--versions: {item!r}: not a version of {compiler[0]} (or PKG==VERSION of "
                                 f"{', '.join(compiler + runtime)})")
            out.append(Candidate(got[1], [f"{got[0]}=={got[1]}"]))
    if len(out) < 2:
        raise UsageError("--versions: give at least two, good first and bad last")
    return out


class Bisection:
    """The state of one bisection: candidates good..bad, their bundles under out/bundles/."""

    def __init__(self, spec: VariantSpec, candidates: list[Candidate], out: Path, budget_s: float,
                 threshold: float, by: str = "time", parallel: dict[str, int] | None = None):
        """parallel: {'max_in_flight': N, 'max_retries': M} to build on the Ray cluster ray.init
        joined; None builds here, one at a time."""
        if threshold <= 0:
            raise UsageError(f"--min-change: must be > 0, got {threshold:g}")
        if by not in ("time", "catalog"):
            raise UsageError(f"--by: 'time' or 'catalog', got {by!r}")
        self.by = by
        self.spec, self.candidates, self.out = spec, candidates, out
        self.budget_s, self.threshold = budget_s, threshold
        self.bundles: dict[str, Path] = {}
        self.direction = ""  # 'slower' | 'faster': what bad shows against good
        self.parallel = parallel

    def bundle(self, c: Candidate) -> Path | None:
        if c.label not in self.bundles:
            progress(f"{c.label}: building")
            try:
                self.bundles[c.label] = build_bundle(c.spec(self.spec), self.out / "bundles" / safe_name(c.label))
            except UsageError as err:
                c.status, c.note = "skip", f"cannot build: {err}"
                progress(f"{c.label}: skipped ({c.note})")
                return None
        return self.bundles[c.label]

    def prebuild(self, indices: list[int]) -> None:
        """With Ray: the bundles of these candidates built side by side, each published into
        out/bundles/. A candidate that cannot be built is skipped as bundle() would; one whose
        task failed otherwise is left for bundle() to build here."""
        from rootcause import executors

        todo = [self.candidates[i] for i in dict.fromkeys(indices)
                if self.candidates[i].label not in self.bundles and self.candidates[i].status != "skip"]
        if not self.parallel or not todo:
            return
        progress(f"building on Ray: {', '.join(c.label for c in todo)}")
        results = executors.ray_map(_build_task, [(c.spec(self.spec),) for c in todo], **self.parallel)
        for c, result in zip(todo, results):
            if result["ok"]:
                path = self.out / "bundles" / safe_name(c.label)
                executors.publish(result["tar"], path, "build")
                self.bundles[c.label] = path
            elif result.get("skip"):
                c.status, c.note = "skip", f"cannot build: {result['error']}"
                progress(f"{c.label}: skipped ({c.note})")
            else:
                progress(f"{c.label}: Ray build failed ({result['error']}); building here")

    def probes(self, lo: int, hi: int, depth: int = LOOKAHEAD) -> list[int]:
        """The candidates the bisection of (lo, hi) tests in its next `depth` steps, whichever
        way each goes: the middle, then the middles of both halves."""
        between = [i for i in range(lo + 1, hi) if self.candidates[i].status != "skip"]
        if not between or depth == 0:
            return []
        i = between[len(between) // 2]
        return [i] + self.probes(lo, i, depth - 1) + self.probes(i, hi, depth - 1)

    def measure(self, c: Candidate, budget_s: float) -> dict[str, Any] | None:
        """candidate time / good time with its interval (cached); None when outputs differ."""
        good = self.candidates[0]
        paths = [self.bundle(good), self.bundle(c)]
        if None in paths:
            return None
        keys = [read_bundle(p).manifest.get("cache_key") for p in paths]
        cached = bisect_files.cached_measurement(keys, budget_s)
        if cached is not None:
            return cached
        progress(f"{c.label}: measuring against {good.label} ({budget_s:g} s, interleaved)")
        try:
            result = run_bundles(RunRequest(bundles=paths, out=self.out / "runs" / safe_name(c.label), profile="none",
                                            budget_s=budget_s))
        except OutputsDiffer:
            record = {"outputs_differ": True}
        else:
            row = result["measurement"]["ratios"][0]  # a/b: good time / candidate time
            record = {"median": 1 / row["ratio"], "low": 1 / row["ci"][1], "high": 1 / row["ci"][0],
                      "good_median_s": result["measurement"]["variants"][paths[0].name]["median_s"]
                      if paths[0].name in result["measurement"]["variants"] else None}
        bisect_files.cache_measurement(keys, budget_s, record)
        return record

    def judge(self, ratio: dict[str, Any]) -> str:
        """'bad' beyond the threshold in the change's direction, 'good' inside, 'unsure' across."""
        up = 1 + self.threshold
        if self.direction == "slower":
            return "bad" if ratio["low"] > up else "good" if ratio["high"] < up else "unsure"
        down = 1 / up
        return "bad" if ratio["high"] < down else "good" if ratio["low"] > down else "unsure"

    def judge_opposite(self, ratio: dict[str, Any]) -> bool:
        up = 1 + self.threshold
        return ratio["high"] < 1 / up if self.direction == "slower" else ratio["low"] > up

    def test(self, c: Candidate) -> str:
        ratio = self.measure(c, self.budget_s)
        if c.status == "skip":
            return "skip"
        if ratio is not None and ratio.get("outputs_differ"):
            c.status, c.note = "bad", "outputs differ from the good version's"
            progress(f"{c.label}: bad ({c.note})")
            return c.status
        verdict, ratio, c.note = settle(ratio, self.judge, lambda factor: self.measure(c, factor * self.budget_s),
                                        c.label, self.budget_s)
        c.status, c.ratio = verdict, ratio
        if verdict == "good" and self.judge_opposite(ratio):
            c.note = (c.note + "; " if c.note else "") + "changed the other way beyond the threshold (another change)"
        progress(f"{c.label}: {verdict} ({_ratio_text(ratio)} of {self.candidates[0].label}'s time"
                 f"{'; ' + c.note if c.note else ''})")
        return verdict

    def formation(self, c: Candidate) -> list[str] | None:
        """The catalog's formation: one 'pipeline-or-rule' per kernel, sorted (None: not built)."""
        path = self.bundle(c)
        if path is None:
            return None
        kernels = read_bundle(path).manifest["kernels"]
        return sorted(str((k.get("schedule") or {}).get("pipeline") or (k.get("schedule") or {}).get("rule")
                          or "unscheduled") for k in kernels)

    def test_catalog(self, c: Candidate) -> str:
        got = self.formation(c)
        if got is None:
            return "skip"
        c.status = "good" if got == self.formation(self.candidates[0]) else "bad"
        c.note = _formation_text(got)
        progress(f"{c.label}: {c.status} ({c.note})")
        return c.status

    def run(self) -> dict[str, Any]:
        good, bad = self.candidates[0], self.candidates[-1]
        if self.by == "catalog":
            return self.run_catalog()
        last = len(self.candidates) - 1
        self.prebuild([0, last] + self.probes(0, last))
        ratio = self.measure(bad, self.budget_s)
        for c, flag in ((good, "good"), (bad, "bad")):
            if c.status == "skip":
                raise UsageError(f"the {flag} version {c.label}: {c.note}")
        good.status = "good"
        if ratio.get("outputs_differ"):
            self.direction = "outputs"
        elif ratio["low"] > 1 + self.threshold:
            self.direction = "slower"
        elif ratio["high"] < 1 / (1 + self.threshold):
            self.direction = "faster"
        else:
            raise UsageError(f"--bad {bad.label}: {_ratio_text(ratio)} of {good.label}'s time is not beyond the "
                             f"threshold ({self.threshold:.0%}); nothing to bisect (raise --budget-s or lower "
                             "--min-change)")
        bad.status, bad.ratio = "bad", ratio
        progress(f"{bad.label} against {good.label}: {_ratio_text(ratio)} ({self.direction}); "
                 f"{len(self.candidates) - 2} versions between")
        lo, hi = 0, len(self.candidates) - 1
        while True:
            between = [i for i in range(lo + 1, hi) if self.candidates[i].status != "skip"]
            if not between:
                break
            i = between[len(between) // 2]
            self.prebuild(self.probes(lo, hi))
            verdict = self.tester()(self.candidates[i])
            if verdict == "bad":
                hi = i
            elif verdict == "good":
                lo = i
            elif verdict == "undecided":  # no side to go on to: the first bad one is i, or after it
                return self.result(lo, hi, undecided=i)
        return self.result(lo, hi)

    def tester(self):
        return {"outputs": self.test_outputs, "catalog": self.test_catalog}.get(self.direction, self.test)

    def run_catalog(self) -> dict[str, Any]:
        good, bad = self.candidates[0], self.candidates[-1]
        last = len(self.candidates) - 1
        self.prebuild([0, last] + self.probes(0, last))
        forms = [self.formation(good), self.formation(bad)]
        for c, flag, form in ((good, "good", forms[0]), (bad, "bad", forms[1])):
            if form is None:
                raise UsageError(f"the {flag} version {c.label}: {c.note}")
        if forms[0] == forms[1]:
            raise UsageError(f"--bad {bad.label}: its catalog has the same formation as {good.label}'s "
                             f"({_formation_text(forms[0])}); nothing to bisect by catalog")
        self.direction = "catalog"
        good.status, good.note = "good", _formation_text(forms[0])
        bad.status, bad.note = "bad", _formation_text(forms[1])
        progress(f"{good.label}: {good.note}; {bad.label}: {bad.note}; {len(self.candidates) - 2} versions between")
        lo, hi = 0, len(self.candidates) - 1
        while True:
            between = [i for i in range(lo + 1, hi) if self.candidates[i].status != "skip"]
            if not between:
                return self.result(lo, hi)
            i = between[len(between) // 2]
            self.prebuild(self.probes(lo, hi))
            if self.test_catalog(self.candidates[i]) == "bad":
                hi = i
            elif self.candidates[i].status == "good":
                lo = i

    def result(self, lo: int, hi: int, undecided: int | None = None) -> dict[str, Any]:
        """The bisection's document. undecided: a version whose ratio still straddled the
        threshold at the longest timing; the first bad one is then between it and hi, first_bad
        is None and nothing is analyzed."""
        skipped = [c.label for c in self.candidates[lo + 1:hi] if c.status == "skip"]
        return {"by": self.by, "spec": str(self.spec.spec_file) + (f"#{self.spec.variant}" if self.spec.variant else ""),
                "direction": self.direction, "threshold": self.threshold, "budget_s": self.budget_s,
                "last_good": self.candidates[lo].label,
                "first_bad": None if undecided is not None else self.candidates[hi].label,
                "undecided": None if undecided is None else self.candidates[undecided].label,
                "bad_by": self.candidates[hi].label,
                "skipped_between": skipped,
                "candidates": [{"label": c.label, "toolchain": c.toolchain, "python": str(c.python or ""),
                                "status": c.status, "ratio": c.ratio, "note": c.note} for c in self.candidates]}

    def test_outputs(self, c: Candidate) -> str:
        """For a bisection of differing outputs: bad when the candidate's outputs differ from good's."""
        ratio = self.measure(c, self.budget_s)
        if c.status == "skip":
            return "skip"
        c.status = "bad" if ratio.get("outputs_differ") else "good"
        progress(f"{c.label}: {c.status}")
        return c.status

    def specs(self, result: dict[str, Any]) -> tuple[VariantSpec, VariantSpec]:
        by_label = {c.label: c for c in self.candidates}
        return by_label[result["last_good"]].spec(self.spec), by_label[result["first_bad"]].spec(self.spec)


def _build_task(spec: VariantSpec) -> dict[str, Any]:
    """Ray task: one candidate's bundle, as a tar (rootcause.sweep's packing)."""
    from rootcause import executors

    try:
        with tempfile.TemporaryDirectory(prefix="rootcause-bisect-") as tmp:
            return {"ok": True, "tar": executors.pack(build_bundle(spec, Path(tmp) / "bundle"))}
    except UsageError as err:
        return {"ok": False, "skip": True, "error": str(err)}
    except Exception as err:  # anything else: the driver builds it here and sees the error itself
        return {"ok": False, "error": executors.stage_error(err)}


# A version whose interval straddles the threshold is timed again this many times as long,
# until its interval leaves the threshold; after the last it is undecided.
LONGER = (2, 4)


def settle(ratio: dict[str, Any], judge: Callable[[dict[str, Any]], str],
           measure: Callable[[int], dict[str, Any] | None], label: str,
           budget_s: float) -> tuple[str, dict[str, Any], str]:
    """(verdict, the ratio it rests on, a note): the first run's verdict where its interval is
    clear of the threshold, else that of a longer run (LONGER), else 'undecided'. Never the
    median of a straddling interval: that would name a first bad version the timing cannot."""
    verdict = judge(ratio)
    for factor in LONGER:
        if verdict != "unsure":
            break
        progress(f"{label}: {_ratio_text(ratio)} straddles the threshold: timed again for {factor * budget_s:g} s")
        again = measure(factor)
        if again is None or again.get("outputs_differ"):
            break
        ratio, verdict = again, judge(again)
    if verdict == "unsure":
        return "undecided", ratio, (f"its interval still straddles the threshold after {LONGER[-1] * budget_s:g} s "
                                    "of timing")
    return verdict, ratio, ""


def _formation_text(form: list[str]) -> str:
    counts = {p: form.count(p) for p in dict.fromkeys(form)}
    return f"{len(form)} kernel(s): " + ", ".join(f"{p} x{n}" if n > 1 else p for p, n in counts.items())


def _ratio_text(r: dict[str, Any]) -> str:
    return f"{r['median']:.3f}x [{r['low']:.3f}, {r['high']:.3f}]"



