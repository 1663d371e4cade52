"""Several sweeps side by side: their laws' exponents and the difference of exponents between them.

Porian et al. (2024) explain the Kaplan-Chinchilla gap by running one ladder under several setups
and comparing the fitted exponents. :func:`scaling.reports.compare_page.compare_sweeps` does that for sweeps in one database:
each sweep's analysis is loaded as the report loads it (:func:`scaling.reports.report_data.load_fits`),
every exponent is shown with its 95% bootstrap interval, and each pair of sweeps gets the
difference of every exponent with a percentile interval of the difference. The two fits'
bootstraps resample different runs, so their replicates are independent: every pairing of a
replicate of one with a replicate of the other is a draw of the difference, and the percentile
interval is taken over all pairs. A difference is significant when its interval excludes 0. A law
the data cannot pin down (flagged unreliable) gets no difference and no interval.

Each side is its sweep's :class:`~scaling.fitting.analysis.Analysis`, the answer the report and
``scaling fit`` show: its loss laws and its downstream task laws are read from it, and nothing is
fitted here. Sweeps are compared in one set of conventions (N counts non-embedding or total
parameters; C = 6ND or 6ND plus attention). A sweep in another convention is converted exactly from
each run's stored shape and analysed in memory (:func:`scaling.fitting.analyse` of the converted
points); where that is not exact (a convention this version does not know, a run without its shape)
the comparison is refused, saying why.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy as np
import pandas as pd

from scaling.accounting import FLOPS_CONVENTIONS, PARAMS_CONVENTIONS, Shape, family_fields
from scaling.db import connect
from scaling.errors import NotFoundError, UserError, mask_url
from scaling.fitting import Law, from_db
from scaling.fitting.analysis import analyse
from scaling.fitting.core.base import jsonable
from scaling.fitting.core.measurements import prepare
from scaling.fitting.core.intervals import summarise
from scaling.fmt import Interval
from scaling.reports.report_data import REPORT_ANALYSIS, REPORT_BOOTSTRAP, analysis_fits, load_fits, normalise_runs
from scaling.reports.fitview import LABELS

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    from scaling.db.results import Results
    from scaling.fitting.analysis import Analysis

#: The exponents compared for each kind of law (as :meth:`Law.intervals` names them).
EXPONENTS: dict[str, tuple[str, ...]] = {
    "kaplan": ("alpha_N", "alpha_D", "a"),
    "approach1": ("a", "b", "alpha_L"),
    "approach2": ("a", "b", "alpha_L"),
    "approach3": ("alpha", "beta", "a", "b"),
}
#: A sweep with fewer completed runs than this cannot fit a law worth comparing (approach 3 has 5 parameters).
MIN_COMPLETED_RUNS = 6
#: Pairs of replicates used for a difference's interval at most (all pairs below this).
MAX_PAIRS = 1_000_000
#: Sweeps the page's figures draw at most (a colour each); its tables and the JSON have every sweep.
MAX_FIGURE_SWEEPS = 12
#: Differences the page lists at most, significant ones first; the JSON has every one (pairs grow as sweeps squared).
MAX_PAGE_DIFFERENCES = 300
#: Differences the page's figure draws at most (a row each), the first of those listed.
MAX_FIGURE_DIFFERENCES = 60
#: A difference's verdict, in the order lists of differences show them.
VERDICTS = ("significant", "not significant", "no interval")
#: Interval kinds that carry no interval (see :func:`scaling.fitting.core.intervals.summarise`).
NO_INTERVAL = {"pinned": "pinned at a bound", "biased": "its bootstrap is biased", "no spread": "its replicates do not vary"}


class CompareError(UserError):
    """A comparison that cannot be made as asked (too few sweeps, unknown sweep, conventions)."""


@dataclass
class SweepSide:
    """One sweep as compared: its runs and laws in the comparison's conventions."""

    name: str
    runs: pd.DataFrame  # normalised (scaling.reports.report_data.normalise_runs), N and C in the shared conventions
    laws: dict[str, Law]  # its analysis' loss laws, in report order
    conventions: dict[str, str]  # as stored with the sweep
    converted: bool = False
    notes: list[str] = field(default_factory=list)
    #: The analysis the laws are read from (None: none could be had; the notes say why).
    analysis: Optional["Analysis"] = None

    @property
    def completed(self) -> pd.DataFrame:
        r = self.runs
        return r[(r["status"] == "completed") & np.isfinite(r["final_loss"].astype(float))]


@dataclass
class Comparison:
    """What :func:`~scaling.reports.compare_page.compare_sweeps` found: the sides, each law's exponents and the pairwise differences."""

    sides: list[SweepSide]
    conventions: dict[str, str]
    exponents: list[dict[str, Any]]
    differences: list[dict[str, Any]]
    notes: list[str]
    source: str = ""
    path: Path | None = None  # the page, once written

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record: NaN and infinities written as null."""
        return jsonable({
            "conventions": self.conventions,
            "source": self.source,
            "sweeps": [{"sweep": s.name, "conventions": s.conventions, "converted": s.converted,
                        "runs": int(len(s.runs)), "completed": int(len(s.completed)),
                        "laws": sorted(s.laws), "notes": s.notes} for s in self.sides],
            "exponents": [_flat(x, "interval") for x in self.exponents],
            "differences": [_flat(d, "difference") for d in self.differences],
            "notes": self.notes,
        })

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)


# -- loading ---------------------------------------------------------------------------------------
def load_comparison(url: str, sweeps: Sequence[str], *, fit: str = "sweep", params: str | None = None,
                    flops: str | None = None) -> Comparison:
    """Read ``sweeps`` from the database at ``url`` and compare their laws (nothing is written).

    ``fit`` is the report's (``sweep``, ``stored`` or ``memory``; see :func:`load_fits`).
    ``params`` / ``flops``: the conventions to compare in (default: the first sweep's).
    """
    names = [str(s) for s in sweeps]
    if len(names) < 2:
        raise CompareError(f"compare needs at least two sweeps, got {len(names)}")
    dupes = sorted({s for s in names if names.count(s) > 1})
    if dupes:
        raise CompareError(f"sweep {dupes[0]!r} is named twice; name each sweep once")
    results = connect(url)
    known = set(results.sweeps()["sweep"].astype(str))
    for s in names:
        if s not in known:
            raise NotFoundError(f"no sweep named {s!r} in the database at {mask_url(url)}")
    infos = {s: results.sweep_info(s) for s in names}
    first = infos[names[0]]
    target = {"params": params or str(first.get("params_convention") or "non_embedding"),
              "flops": flops or str(first.get("flops_convention") or "6N")}
    if target["params"] not in PARAMS_CONVENTIONS:
        raise CompareError(f"--params {target['params']!r}: use one of {', '.join(PARAMS_CONVENTIONS)}")
    if target["flops"] not in FLOPS_CONVENTIONS:
        raise CompareError(f"--flops {target['flops']!r}: use one of {', '.join(FLOPS_CONVENTIONS)}")
    runs = {s: normalise_runs(results.runs(sweep=s)) for s in names}
    for s in names:  # refused before any fit is made
        done = _completed(runs[s])
        if len(done) < MIN_COMPLETED_RUNS:
            raise CompareError(f"sweep {s!r} has {len(done)} completed run(s); comparing its laws needs at least "
                               f"{MIN_COMPLETED_RUNS}")
        own = _conventions(infos[s])
        if own != target:
            runs[s] = convert_runs(runs[s], own, target, s)  # refuses what cannot be converted exactly
    sides = [_side(results, url, s, runs[s], _conventions(infos[s]), target, fit) for s in names]
    comparison = build_comparison(sides, target, source=mask_url(url))
    from scaling.reports.compare_tasks import task_differences  # downstream task laws, when the runs evaluated tasks

    rows, notes = task_differences({side.name: side.analysis.tasks if side.analysis else None for side in sides},
                                   exponent_difference)
    comparison.differences += rows
    comparison.notes += notes
    return comparison


def _conventions(info: dict[str, Any]) -> dict[str, str]:
    return {"params": str(info.get("params_convention") or "non_embedding"),
            "flops": str(info.get("flops_convention") or "6N")}


def _completed(runs: pd.DataFrame) -> pd.DataFrame:
    return runs[(runs["status"] == "completed") & np.isfinite(runs["final_loss"].astype(float))]


def convert_runs(runs: pd.DataFrame, source: dict[str, str], target: dict[str, str], sweep: str) -> pd.DataFrame:
    """``runs`` with N and C recounted in the ``target`` conventions from each run's stored shape
    (its columns, and the family fields of its stored spec's model section).

    Exact: the shape gives both parameter counts and both FLOP counts. Refused (one line) when the
    sweep's conventions are not ones this version counts, when a run has no shape, or when a run's
    stored N or C is not what its shape gives under the sweep's own conventions (then its shape is
    not the whole story, and recounting it would not be exact).
    """
    if source["params"] not in PARAMS_CONVENTIONS or source["flops"] not in FLOPS_CONVENTIONS:
        raise CompareError(f"sweep {sweep!r} counts N as {source['params']!r} and C as {source['flops']!r}: no exact "
                           f"conversion to N = {target['params']}, C = {target['flops']} is known")
    out = runs.copy()
    cols = ("n_layer", "d_model", "n_head", "vocab_size", "context")
    for i, row in runs.iterrows():
        try:
            spec = row.get("spec")
            family = family_fields(spec.get("model")) if isinstance(spec, dict) else {}
            shape = Shape(*(int(row[c]) for c in cols), **family)  # type: ignore[arg-type]
        except (KeyError, TypeError, ValueError):
            raise CompareError(f"sweep {sweep!r}: run {row['run_key']} has no stored shape, so its N and C cannot be "
                               f"converted to N = {target['params']}, C = {target['flops']}") from None
        D = float(row["D"])
        n_own = shape.params(source["params"])  # type: ignore[arg-type]
        c_own = shape.training_flops(D, source["flops"], source["params"])  # type: ignore[arg-type]
        if not (math.isclose(n_own, float(row["N"]), rel_tol=1e-9) and math.isclose(c_own, float(row["C"]), rel_tol=1e-6)):
            raise CompareError(f"sweep {sweep!r}: run {row['run_key']}'s stored N and C are not what its shape gives "
                               f"under the sweep's conventions, so they cannot be converted exactly")
        out.at[i, "N"] = float(shape.params(target["params"]))  # type: ignore[arg-type]
        out.at[i, "C"] = float(shape.training_flops(D, target["flops"], target["params"]))  # type: ignore[arg-type]
    out["tokens_per_param"] = out["D"] / out["N"]
    return out


def _side(results: "Results", url: str, sweep: str, runs: pd.DataFrame, own: dict[str, str], target: dict[str, str],
          fit: str) -> SweepSide:
    """One sweep's side: its analysis as the report has it (``fit``), or, counted in other conventions, the
    analysis of its runs recounted in the target conventions."""
    if own == target:
        made: dict[str, Any] = {}
        laws, _, notes = load_fits(results, url, sweep, fit=fit, made=made)
        return SweepSide(sweep, runs, laws, own, notes=notes, analysis=made.get("sweep_fit"))
    analysis, laws, notes = _analyse_converted(url, sweep, runs, target)
    return SweepSide(sweep, runs, laws, own, converted=True, analysis=analysis, notes=[
        f"converted from N = {own['params']} parameters, C = {own['flops']} to N = {target['params']}, "
        f"C = {target['flops']} from each run's shape, and analysed for this comparison"
        + (" (approach 2 groups runs into budgets by their converted C)" if own["flops"] != target["flops"] else ""),
        *notes])


def _analyse_converted(url: str, sweep: str, runs: pd.DataFrame,
                       target: dict[str, str]) -> tuple[Optional["Analysis"], dict[str, Law], list[str]]:
    """The analysis, in memory, of a sweep recounted in the target conventions (its task laws not fitted:
    its task evaluations are not recounted), its loss laws in report order and notes; a failure is a note."""
    done = _completed(runs).copy()
    loss = done["final_loss"].astype(float)
    if "final_train_loss" in done:
        loss = loss.fillna(done["final_train_loss"].astype(float))
    done["loss"] = loss
    try:
        own, _ = from_db(url, sweep)  # for approach 1's loss curves, recounted below
        curves = _convert_curves(own.curves, done)
        data = prepare(done[["N", "D", "C", "loss"]], flops_convention=target["flops"],
                       params_convention=target["params"], source=f"sweep {sweep!r} (converted)", curves=curves)
        analysis = analyse(data, replace(REPORT_ANALYSIS, tasks=False))
    except UserError as exc:
        return None, {}, [f"No law could be fitted to the converted sweep: {' '.join(str(exc).split())}"]
    notes = [f"analysed in memory with {REPORT_BOOTSTRAP} bootstrap replicates; downstream task laws, if any, are "
             "not compared (task evaluations are not recounted)"]
    laws, _, fit_notes = analysis_fits(analysis)
    return analysis, laws, notes + fit_notes


def _convert_curves(curves: pd.DataFrame | None, runs: pd.DataFrame) -> pd.DataFrame | None:
    """Loss curves (run_key, N, tokens, flops, loss) with N and FLOPs of each run recounted."""
    if curves is None or curves.empty or "run_key" not in curves.columns:
        return curves
    per_run = runs.set_index("run_key")
    fpt = (per_run["C"] / per_run["D"]).astype(float)  # FLOPs per token in the target conventions
    out = curves[curves["run_key"].isin(per_run.index)].copy()
    out["N"] = out["run_key"].map(per_run["N"]).astype(float)
    out["flops"] = out["tokens"].astype(float) * out["run_key"].map(fpt).astype(float)
    return out


# -- exponents and their differences ---------------------------------------------------------------
def build_comparison(sides: list[SweepSide], conventions: dict[str, str], *, source: str = "") -> Comparison:
    """Each side's exponents and every pair's differences (later sweep minus earlier)."""
    exponents = []
    for side in sides:
        for kind, law in side.laws.items():
            ivs = law.reported_intervals()
            doubts = law.doubts()
            for name in EXPONENTS.get(kind, ()):
                if name in ivs:
                    exponents.append({"sweep": side.name, "law": kind, "label": LABELS.get(kind, kind), "exponent": name,
                                      "interval": ivs[name], "reliable": not doubts,
                                      "doubts": doubts})
    differences = []
    intervals = {(i, kind): law.intervals() for i, side in enumerate(sides) for kind, law in side.laws.items()}
    for (i, a), (j, b) in itertools.combinations(enumerate(sides), 2):
        for kind in EXPONENTS:
            if kind in a.laws and kind in b.laws:
                for name in EXPONENTS[kind]:
                    differences.append({"law": kind, "label": LABELS.get(kind, kind), "exponent": name,
                                        "first": a.name, "second": b.name,
                                        **exponent_difference(a.laws[kind], b.laws[kind], name, a.name, b.name,
                                                              intervals=(intervals[i, kind], intervals[j, kind]))})
    notes = [f"{s.name}: {n}" for s in sides for n in s.notes]
    missing = [f"{LABELS[k]} is not fitted for {', '.join(s.name for s in sides if k not in s.laws)}: no difference"
               for k in EXPONENTS if any(k in s.laws for s in sides) and not all(k in s.laws for s in sides)]
    return Comparison(sides, dict(conventions), exponents, differences, notes + missing, source)


def verdict(difference: dict[str, Any]) -> str:
    """One of :data:`VERDICTS` for a row of :attr:`Comparison.differences`."""
    if difference["difference"].kind != "percentile":
        return "no interval"
    return "significant" if difference.get("significant") else "not significant"


def ranked(differences: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The differences significant first, then not significant, then without an interval (else in order)."""
    return sorted(differences, key=lambda d: VERDICTS.index(verdict(d)))


def verdict_counts(differences: Sequence[dict[str, Any]]) -> dict[str, int]:
    counts = dict.fromkeys(VERDICTS, 0)
    for d in differences:
        counts[verdict(d)] += 1
    return counts


def exponent_difference(first: Law, second: Law, name: str, first_name: str = "first",
                        second_name: str = "second", *,
                        intervals: tuple[dict[str, Interval], dict[str, Interval]] | None = None) -> dict[str, Any]:
    """``second`` minus ``first`` for exponent ``name``, with a 95% percentile interval, or why none.

    The fits' bootstraps are independent, so the distribution of the difference is the one of
    (second replicate - first replicate) over all pairs of replicates. Returns ``difference`` (an
    :class:`~scaling.fmt.Interval` of kind ``percentile``, or of why there is no interval: ``unreliable``,
    ``no interval``, ``biased``, ``no spread``), significant (True/False, None without an interval) and
    reason. ``intervals``: the two laws' :meth:`Law.intervals`, when the caller has them (they take a
    while to compute).
    """
    all1, all2 = intervals if intervals is not None else (first.intervals(), second.intervals())
    iv1, iv2 = all1[name], all2[name]
    value = float(iv2.value) - float(iv1.value)

    def none(why: str, kind: str = "no interval", **extra: Any) -> dict[str, Any]:
        return {"difference": Interval(value if kind != "unreliable" else math.nan, withheld=why, kind=kind),
                "significant": None, "reason": why, **extra}

    for law, who in ((first, first_name), (second, second_name)):
        if law.doubts():
            return none(f"the law of {who!r} is flagged unreliable", "unreliable", detail=law.doubts()[0])
    for iv, who in ((iv1, first_name), (iv2, second_name)):
        if iv.kind in NO_INTERVAL:
            return none(f"{name} of {who!r} has no interval ({NO_INTERVAL[iv.kind]})")
    r1, r2 = first.replicate_values(name), second.replicate_values(name)
    for reps, who in ((r1, first_name), (r2, second_name)):
        if reps is None or np.isfinite(reps).sum() < 2:
            return none(f"{who!r} has no usable bootstrap replicates")
    r1, r2 = r1[np.isfinite(r1)], r2[np.isfinite(r2)]
    if r1.size * r2.size > MAX_PAIRS:  # a random subset of the pairs: every pair is an equally valid draw
        rng = np.random.default_rng(0)
        diffs = r2[rng.integers(0, r2.size, MAX_PAIRS)] - r1[rng.integers(0, r1.size, MAX_PAIRS)]
    else:
        diffs = (r2[None, :] - r1[:, None]).ravel()
    iv = summarise(diffs, value)
    if iv.kind != "percentile" or iv.interval is None:
        return {"difference": iv, "significant": None, "reason": iv.withheld or "no interval"}
    lo, hi = iv.interval
    return {"difference": Interval(value, lo, hi, kind="percentile"), "significant": bool(lo > 0 or hi < 0),
            "reason": "the interval excludes 0" if (lo > 0 or hi < 0) else "the interval includes 0"}


def _flat(row: dict[str, Any], key: str) -> dict[str, Any]:
    """A row of exponents or differences as the JSON writes it: its interval ``key`` as value, lo, hi and kind
    (and what a pinned exponent is pinned at)."""
    iv: Interval = row[key]
    kind = iv.kind if iv.kind != "none" else "percentile" if iv.interval is not None else "none"
    out = {k: v for k, v in row.items() if k != key}
    out |= {"value": iv.value, "lo": iv.lo, "hi": iv.hi, "kind": kind}
    return out | ({"pinned": iv.pinned} if iv.pinned else {})


# -- writing --------------------------------------------------------------------------------------
__all__ = ["Comparison", "CompareError", "SweepSide", "load_comparison", "exponent_difference",
           "convert_runs", "EXPONENTS"]
