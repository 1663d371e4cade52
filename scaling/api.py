"""The notebook API: load a plan, run a sweep, read its results, fit, recommend, report.

Everything here is also reachable as ``scaling.<name>`` (``import scaling; scaling.fit(...)``),
imported on first use so that ``import scaling`` stays light. Results are typed: an
:class:`Estimate` is a value with its bounds (or the reason it has none), not a nested dict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from scaling.fmt import Interval

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    import pandas as pd

    from scaling.db.results import Results
    from scaling.fitting import FitSummary, Law, Recommendation
    from scaling.fitting.hparams import HparamFit
    from scaling.fitting.tasks import TaskFits
    from scaling.orchestrator.plan import Plan
    from scaling.orchestrator.sweep import SweepResult


#: A fitted or predicted quantity: value, 95% bounds and SE where honest, else why not (one type with the fits').
Estimate = Interval


@dataclass(frozen=True)
class FittedLaw:
    """One fitted law: its parameters as estimates, whether the data determine it, and the estimator."""

    kind: str
    name: str
    reliable: bool
    params: dict[str, Estimate]
    notes: list[str]
    #: The scikit-learn-style estimator (``predict(N, D)``, ``optimal(C)``, ``to_dict()``).
    estimator: "Law" = field(repr=False)

    def optimal(self, compute: float) -> dict[str, Estimate]:
        """N*, D* and predicted loss at ``compute`` FLOPs; an unreliable law gives values without intervals."""
        from scaling.fitting.intervals import withheld

        ivs = self.estimator.optimal_interval(float(compute))
        if not self.reliable:
            why = "the law is flagged unreliable: " + self.estimator.doubts()[0]
            ivs = {q: withheld(iv, why) for q, iv in ivs.items()}
        return {q: Estimate.from_interval(iv) for q, iv in ivs.items()}


@dataclass(frozen=True)
class Fit:
    """The laws fitted to one sweep or CSV, what was not fitted and why."""

    source: str
    sweep: Optional[str]
    n_points: int
    laws: dict[str, FittedLaw]
    skipped: dict[str, str]
    notes: list[str]
    summary: "FitSummary" = field(repr=False)

    @property
    def estimators(self) -> dict[str, "Law"]:
        """The fitted estimators by law, as the figures of :mod:`scaling.reports.figures` take them."""
        return {kind: law.estimator for kind, law in self.laws.items()}

    def table(self) -> str:
        """Every parameter with its SE and interval, as ``scaling fit`` prints it."""
        return self.summary.table()

    @property
    def hparams(self) -> Optional["Hparams"]:
        """The hyperparameter groups' optima and lr / batch laws (None when the runs form no group)."""
        return None if self.summary.hparams is None else _typed_hparams(self.summary.hparams)

    def to_frame(self) -> "pd.DataFrame":
        """One row per (law, parameter): value, lo, hi, se, withheld."""
        import pandas as pd

        rows = [{"law": kind, "parameter": name, "value": e.value, "lo": e.lo, "hi": e.hi, "se": e.se,
                 "withheld": e.withheld} for kind, law in self.laws.items() for name, e in law.params.items()]
        columns = ["law", "parameter", "value", "lo", "hi", "se", "withheld"]  # no law fitted: no rows, same columns
        return pd.DataFrame(rows, columns=columns).set_index(["law", "parameter"])


@dataclass(frozen=True)
class Advice:
    """The next run at ``compute`` FLOPs: N*, D* and loss of the law it follows, and the concrete run."""

    compute: float
    law: Optional[str]
    reason: str
    N: Optional[Estimate]
    D: Optional[Estimate]
    loss: Optional[Estimate]
    #: Every fitted law's N*, D* and loss (an unreliable law's without intervals).
    per_law: dict[str, dict[str, Estimate]]
    #: Laws left out of the choice, with why.
    left_out: dict[str, str]
    run: Optional[dict[str, Any]]
    notes: list[str]
    recommendation: "Recommendation" = field(repr=False)

    def table(self) -> str:
        """The comparison ``scaling recommend`` prints."""
        return self.recommendation.table()

    @property
    def hparams(self) -> Optional[dict[str, Optional[Estimate]]]:
        """lr and batch for the recommended run from the hyperparameter laws (None without groups)."""
        h = self.recommendation.hparams
        if h is None:
            return None
        return {q: None if h[q] is None else Estimate.from_interval(h[q]) for q in ("lr", "batch")}

    @property
    def tasks(self) -> dict[str, dict[str, Estimate]]:
        """Each downstream task's predicted accuracy at the recommended run, by step-2 form ({} without tasks)."""
        return {task: {form: Estimate.from_interval(p[form]) for form in ("sigmoid", "exp") if form in p}
                for task, p in self.recommendation.tasks.items()}


@dataclass(frozen=True)
class HparamGroup:
    """One hyperparameter group (the runs of one (N, D) that differ in lr, batch or beta2) and its optimum."""

    label: str
    N: float
    D: float
    runs: int
    #: ``fitted`` (used by the laws), ``edge``, ``no minimum`` or ``one setting``; ``message`` says why.
    status: str
    message: str
    loss: Estimate
    lr: Estimate
    batch: Estimate
    #: Settings within the near-optimal fraction of L*: count and lr / batch ranges.
    near: dict[str, float]


@dataclass(frozen=True)
class Hparams:
    """Every group's tuned loss, lr* and B*, and the laws lr*(N, D), B*(D), lr*(C), B*(C) over them."""

    groups: list[HparamGroup]
    #: law name (``lr_ND``, ``batch_D``, ``lr_C``, ``batch_C``) -> parameter -> estimate.
    laws: dict[str, dict[str, Estimate]]
    #: Laws the groups do not determine, with why (no interval, nothing recommended from them).
    flagged: dict[str, list[str]]
    skipped: dict[str, str]
    notes: list[str]
    fit: "HparamFit" = field(repr=False)

    def groups_frame(self) -> "pd.DataFrame":
        """One row per group: N, D, status, L*, lr*, B* with bounds, the near-optimal region."""
        return self.fit.groups_frame()

    def laws_frame(self) -> "pd.DataFrame":
        """One row per (law, parameter): value, lo, hi, flagged."""
        return self.fit.laws_frame()

    def recommend(self, N: float, D: float, C: Optional[float] = None) -> dict[str, Optional[Estimate]]:
        """lr and batch for a run of N parameters and D tokens (None where the law is not fitted)."""
        h = self.fit.recommend(float(N), float(D), float(C if C is not None else 6.0 * N * D))
        return {q: None if h[q] is None else Estimate.from_interval(h[q]) for q in ("lr", "batch")}


def load_plan(path: str | Path) -> "Plan":
    """Read and validate a plan file (a bad plan raises :class:`~scaling.errors.PlanError` naming the line)."""
    from scaling.orchestrator.plan import load_plan as load

    return load(path)[0]


def run_sweep(plan: "str | Path | Plan", *, db: Optional[str] = None, address: Optional[str] = None,
              fit: bool = True, report: bool = True, echo: Callable[[str], None] = print) -> "SweepResult":
    """Train every run of ``plan`` not completed yet, then fit and report. A Ray already started in this
    process (``ray.init``) is joined and left running; a local one started here is shut down at the end."""
    from scaling.orchestrator.sweep import run_sweep as run

    return run(plan, db=db, address=address, fit=fit, report=report, echo=echo)


def connect(db: Optional[str] = None) -> "Results":
    """The results database for reading (``runs()``, ``metrics()``, ``events()``... as DataFrames)."""
    from scaling.db import connect as open_results, resolve_url

    return open_results(resolve_url(cli=db))


def fit(db: Optional[str] = None, sweep: Optional[str] = None, *, csv: Optional[str] = None, law: str = "all",
        bootstrap: int = 200, seed: int = 0) -> Fit:
    """Fit a sweep (the latest in ``db`` unless named) or a CSV of measurements."""
    from scaling.db import resolve_url
    from scaling.fitting import fit_csv, fit_sweep

    summary = fit_csv(csv, law, bootstrap, seed) if csv is not None else \
        fit_sweep(resolve_url(cli=db), sweep, law, bootstrap, seed, tasks=False)
    return _typed_fit(summary)


def recommend(compute: Optional[float] = None, *, db: Optional[str] = None, sweep: Optional[str] = None,
              csv: Optional[str] = None, bootstrap: int = 200, seed: int = 0) -> Advice:
    """The compute-optimal run at ``compute`` FLOPs (default: ten times the largest run), as ``scaling recommend``."""
    from scaling.fitting import recommend as advise

    if csv is not None:
        rec = advise(compute, csv=csv, n_bootstrap=bootstrap, seed=seed, next_runs=False)
    else:
        from scaling.db import resolve_url
        from scaling.orchestrator.expand import size_run

        rec = advise(compute, url=resolve_url(cli=db), sweep=sweep, n_bootstrap=bootstrap, seed=seed,
                     next_runs=False, size_run=size_run)
    return _typed_advice(rec)


def report(db: Optional[str] = None, sweep: Optional[str] = None, path: str | Path = "report.html") -> Path:
    """Write the sweep's self-contained HTML report; returns its path."""
    from scaling.db import resolve_url
    from scaling.reports import write_report

    write_report(resolve_url(cli=db), sweep, path)
    return Path(path)


def hparams(db: Optional[str] = None, sweep: Optional[str] = None, *, csv: Optional[str] = None,
            bootstrap: int = 200, seed: int = 0) -> Optional[Hparams]:
    """The hyperparameter groups of a sweep (or a CSV with lr / batch columns): each group's optimum
    and the lr / batch laws; None when the runs form no group. Fits no loss law."""
    from scaling.fitting.data import from_csv, from_db
    from scaling.fitting.api import hparam_fit

    if csv is not None:
        data = from_csv(csv)
    else:
        from scaling.db import resolve_url

        data, _ = from_db(resolve_url(cli=db), sweep)
    fitted = hparam_fit(data, bootstrap, seed)
    return None if fitted is None else _typed_hparams(fitted)


def _typed_hparams(fit: "HparamFit") -> Hparams:
    groups = [HparamGroup(g.label, g.N, g.D, g.n_runs, g.status, g.message, Estimate.from_interval(g.loss),
                          Estimate.from_interval(g.lr), Estimate.from_interval(g.batch), dict(g.near))
              for g in fit.groups]
    laws = {name: {p: Estimate.from_interval(iv) for p, iv in law.params.items()} for name, law in fit.laws.items()}
    flagged = {name: list(law.doubts) for name, law in fit.laws.items() if law.doubts}
    return Hparams(groups, laws, flagged, dict(fit.skipped), list(fit.notes), fit)


def _typed_fit(summary: "FitSummary") -> Fit:
    from scaling.fitting.api import KINDS

    laws = {kind: FittedLaw(kind, KINDS[kind][1], law.reliable(),
                            {name: Estimate.from_interval(iv) for name, iv in law.reported_intervals().items()},
                            list(law.notes_), law)
            for kind, law in summary.laws.items()}
    return Fit(summary.source, summary.sweep, summary.n_points, laws, dict(summary.skipped), list(summary.notes),
               summary)


def _typed_advice(rec: "Recommendation") -> Advice:
    per_law = {kind: {q: Estimate.from_interval(_withheld_if(kind in rec.unreliable, r[q])) for q in ("N", "D", "loss")}
               for kind, r in rec.per_law.items()}
    chosen = per_law.get(rec.chosen) if rec.chosen else None
    return Advice(rec.compute, rec.chosen, rec.chosen_reason, *(chosen[q] if chosen else None for q in ("N", "D", "loss")),
                  per_law=per_law, left_out=dict(rec.unreliable), run=rec.run, notes=list(rec.notes),
                  recommendation=rec)


def _withheld_if(unreliable: bool, iv: dict[str, Any]) -> dict[str, Any]:
    """An unreliable law's interval measures nothing the data determine: its value only."""
    from scaling.fitting.intervals import withheld

    return withheld(iv, "the law is flagged unreliable") if unreliable else iv


@dataclass(frozen=True)
class TaskPrediction:
    """One task's predicted accuracy at (N, D) by one step-2 form, and the task loss it comes from."""

    task: str
    form: str
    accuracy: Estimate
    task_loss: Estimate
    reliable: bool
    notes: list[str]


@dataclass(frozen=True)
class Tasks:
    """Fitted downstream tasks: per task, step 1 (task loss from N, D) and step 2 (accuracy from task loss)."""

    source: str
    #: task -> step -> parameter -> Estimate (steps: ``step1``, ``sigmoid``, ``exp``; withheld where flagged).
    params: dict[str, dict[str, dict[str, Estimate]]]
    #: task -> why it could not be fitted.
    skipped: dict[str, str]
    fits: "TaskFits" = field(repr=False)

    def predict(self, N: float, D: float) -> list[TaskPrediction]:
        """Each task's accuracy at (N, D), with 95% intervals through both steps' bootstraps."""
        out = []
        for task, p in self.fits.predictions(N, D).items():
            law = self.fits.laws[task]
            for form in law.curves:
                out.append(TaskPrediction(task, form, Estimate.from_interval(p[form]),
                                          Estimate.from_interval(p["task_loss"]), law.reliable(form), list(p["notes"])))
        return out

    def to_frame(self, N: float, D: float) -> "pd.DataFrame":
        """:meth:`predict` as a DataFrame (task, form, accuracy, lo, hi, kind, reliable, task_loss)."""
        return self.fits.frame(N, D)

    def table(self) -> str:
        """What ``scaling fit`` prints for the tasks."""
        return self.fits.table()


def tasks(db: Optional[str] = None, sweep: Optional[str] = None, *, csv: Optional[str] = None,
          task: Optional[list[str]] = None, bootstrap: int = 200, seed: int = 0, step1_recipe: str = "grid") -> Tasks:
    """Fit the downstream tasks of a sweep (its ``task/<task>/<kind>`` metrics) or of a CSV's task columns.

    ``step1_recipe``: how step 1's Chinchilla form is searched, ``grid`` or ``ladder`` (OLMo's model-ladder
    recipe; see docs/downstream.md).
    """
    from scaling.fitting.tasks import fit_tasks_csv, fit_tasks_sweep

    if csv is not None:
        from scaling.fitting.data import from_csv

        fits = fit_tasks_csv(csv, from_csv(csv), tasks=task, n_bootstrap=bootstrap, seed=seed, recipe=step1_recipe)
    else:
        from scaling.db import connect as open_results, resolve_url

        url = resolve_url(cli=db)
        with open_results(url) as res:
            sweep = res.sweep_name(sweep)
        fits = fit_tasks_sweep(url, sweep, tasks=task, n_bootstrap=bootstrap, seed=seed, recipe=step1_recipe)
    params = {t: {"step1": {n: Estimate.from_interval(iv) for n, iv in law.step1.reported_intervals().items()},
                  **{f: {n: Estimate.from_interval(iv) for n, iv in c.reported_intervals().items()}
                     for f, c in law.curves.items()}}
              for t, law in fits.laws.items()}
    return Tasks(fits.source, params, dict(fits.skipped), fits)
