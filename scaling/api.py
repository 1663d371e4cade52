"""The notebook API: load a plan, run a sweep, read its results, fit, recommend, report.

Everything here is also reachable as ``scaling.<name>`` (``import scaling; scaling.fit(...)``),
imported on first use so that ``import scaling`` stays light. Results are typed: an
:class:`Estimate` is a value with its bounds (or the reason it has none), not a nested dict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from scaling.accounting import FLOPS_PER_PARAM_TOKEN
from scaling.arguments import check_resampling, check_size
from scaling.fitting.tasks.task_laws import TaskFits, TaskPrediction
from scaling.fmt import Interval

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    import pandas as pd

    from scaling.db.results import Results
    from scaling.fitting.curves import CurveLaw, CurveLaws
    from scaling.fitting import Law, Recommendation
    from scaling.fitting.analysis import Analysis, Settings
    from scaling.fitting.sweep_fit import FitSummary
    from scaling.fitting.hyperparams.hparams import HparamFit
    from scaling.orchestrator.plan import Plan
    from scaling.orchestrator.sweep import SweepResult

#: The notebook API; ``scaling`` exports exactly these names (read from this list, see scaling/__init__.py).
__all__ = ["load_plan", "run_sweep", "connect", "fit", "recommend", "next_plan", "report", "hparams", "tasks", "curves",
           "Estimate", "FittedLaw", "Fit", "Advice", "HparamGroup", "Hparams", "Tasks", "TaskPrediction"]


#: A fitted or predicted quantity: value, 95% bounds and SE where honest, else why not (one type with the fits').
Estimate = Interval
#: The downstream task laws as the analysis holds them (``scaling.tasks()`` returns the analysis' own).
Tasks = TaskFits

#: The quantity (:data:`scaling.fmt.WRITERS`) of each named estimate: printed alone, it reads as everywhere else.
QUANTITIES = {"N": "count", "D": "count", "batch": "count", "loss": "loss", "task_loss": "loss"}


def _estimate(iv: Interval, name: str = "") -> Estimate:
    """The estimate ``iv``, written as the quantity ``name`` is everywhere."""
    return Estimate.of(iv, QUANTITIES.get(name))


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
        from scaling.fitting.core.intervals import withheld

        compute = check_size(compute, "compute", f"{self.kind}.optimal")
        ivs = self.estimator.optimal_interval(compute)
        if not self.reliable:
            why = "the law is flagged unreliable: " + self.estimator.doubts()[0]
            ivs = {q: withheld(iv, why) for q, iv in ivs.items()}
        return {q: _estimate(iv, q) for q, iv in ivs.items()}


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
        return {q: None if h[q] is None else _estimate(h[q], q) for q in ("lr", "batch")}

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
        N, D = check_size(N, "N", "Hparams.recommend"), check_size(D, "D", "Hparams.recommend")
        C = check_size(C if C is not None else FLOPS_PER_PARAM_TOKEN * N * D, "C", "Hparams.recommend")
        h = self.fit.recommend(N, D, C)
        return {q: None if h[q] is None else _estimate(h[q], q) for q in ("lr", "batch")}


def load_plan(path: str | Path) -> "Plan":
    """Read and validate a plan file (a bad plan raises :class:`~scaling.errors.PlanError` naming the line).

    Args:
        path: the plan's YAML file.

    Returns:
        The validated ``Plan`` (frozen; ``plan.model_copy(update=...)`` makes a variant).

    Raises:
        PlanError: the file is not a valid plan; the message names the field and line.

    Example:
        ```python
        import scaling

        plan = scaling.load_plan("examples/plan.yaml")
        print(plan.name, len(plan.grid), plan.train.batch_tokens)   # example 3 256
        ```
    """
    from scaling.orchestrator.plan import load_plan as load

    return load(path)[0]


def run_sweep(plan: "str | Path | Plan", *, db: Optional[str] = None, address: Optional[str] = None,
              fit: bool = True, report: bool = True, echo: Callable[[str], None] = print) -> "SweepResult":
    """Train every run of ``plan`` not completed yet, then fit and report. A Ray already started in this
    process (``ray.init``) is joined and left running; a local one started here is shut down at the end.

    Args:
        plan: a plan file or a :class:`~scaling.orchestrator.plan.Plan` from :func:`load_plan`.
        db: database URL (default: the plan's ``db``, ``$SCALING_DB``, else ``sqlite:///scaling.db``).
        address: a Ray cluster to join (``ray://host:10001`` or ``auto``); default a local Ray.
        fit: fit the laws after the last run and store them.
        report: write the sweep's HTML report after the fit.
        echo: where progress lines go.

    Returns:
        A ``SweepResult`` with the sweep's name, its runs' outcome (completed, failed), and the report's
            path when one was written.

    Example:
        ```python
        import scaling

        result = scaling.run_sweep("examples/plan.yaml", db="sqlite:///scaling.db")
        print(result.outcome.completed)   # the keys of the runs trained (or already done)
        ```
    """
    from scaling.orchestrator.sweep import run_sweep as run

    return run(plan, db=db, address=address, fit=fit, report=report, echo=echo)


def connect(db: Optional[str] = None) -> "Results":
    """The results database for reading (``runs()``, ``metrics()``, ``events()``... as DataFrames).

    Args:
        db: database URL or SQLite path (default: ``$SCALING_DB``, else ``sqlite:///scaling.db``).

    Returns:
        A ``Results``, also a context manager that closes the connection.

    Example:
        ```python
        import scaling

        with scaling.connect("sqlite:///scaling.db") as res:
            runs = res.runs(sweep="example")           # one row per run: N, D, C, status, final loss
            curves = res.metrics(sweep="example", names=["train/loss"])
        runs[["N", "D", "final_loss"]].head()
        ```
    """
    from scaling.db import connect as open_results, resolve_url

    return open_results(resolve_url(cli=db))


def fit(db: Optional[str] = None, sweep: Optional[str] = None, *, csv: Optional[str] = None, law: str = "all",
        bootstrap: Optional[int] = None, seed: Optional[int] = None) -> Fit:
    """Fit a sweep (the latest in ``db`` unless named) or a CSV of measurements.

    Args:
        db: database URL (default: ``$SCALING_DB``, else ``sqlite:///scaling.db``).
        sweep: the sweep to fit (default: the latest).
        csv: a CSV with columns N, D and loss (C optional) to fit instead of a sweep.
        law: ``all``, ``chinchilla`` (its three approaches), or one of ``kaplan``, ``approach1``,
            ``approach2``, ``approach3``.
        bootstrap: bootstrap replicates behind each 95% interval (default: the stored analysis', else 200).
        seed: seed of the bootstrap.

    Returns:
        A ``Fit`` with each law's parameters as ``Estimate`` values, whether the data determine it
            (``reliable``), the laws not fitted and why, and ``table()`` / ``to_frame()``.

    Example:
        ```python
        import scaling

        fit = scaling.fit(csv="chinchilla.csv")          # or fit(db=..., sweep=...)
        print(fit.table())
        law = fit.laws["approach3"]
        print(law.params["alpha"], law.reliable)      # e.g. 0.34 [0.31, 0.37] True
        fit.to_frame()                                # one row per (law, parameter)
        ```
    """
    analysis = _analysis(db, sweep, csv, _settings(bootstrap, seed, "fit", law=law))
    return _typed_fit(analysis.laws_fit())


def recommend(compute: Optional[float] = None, *, db: Optional[str] = None, sweep: Optional[str] = None,
              csv: Optional[str] = None, bootstrap: Optional[int] = None, seed: Optional[int] = None) -> Advice:
    """The compute-optimal run at ``compute`` FLOPs (default: ten times the largest run), as ``scaling recommend``.

    Args:
        compute: the budget C in FLOPs (default: ten times the sweep's largest run).
        db: database URL (default: ``$SCALING_DB``, else ``sqlite:///scaling.db``).
        sweep: the sweep whose laws advise (default: the latest).
        csv: a CSV of measurements (N, D, loss) instead of a sweep.
        bootstrap: bootstrap replicates behind each 95% interval (default: the stored analysis', else 200).
        seed: seed of the bootstrap.

    Returns:
        An ``Advice`` with N*, D* and the predicted loss with their intervals, the law chosen and why,
            the laws left out, and (from a sweep) the concrete run, lr and batch.

    Example:
        ```python
        import scaling

        advice = scaling.recommend(1e21, db="sqlite:///scaling.db")
        print(advice.law, advice.N, advice.D)     # approach3 1.1e+09 [8.9e+08, 1.4e+09] ...
        print(advice.table())                     # every law side by side
        ```
    """
    # the choice between laws is the narrowest interval: there must be intervals
    settings = _settings(bootstrap, seed, "recommend", least=2)
    compute = None if compute is None else check_size(compute, "compute", "recommend")
    analysis = _analysis(db, sweep, csv, settings)
    if csv is not None:  # the run is the sweep's alone
        from scaling.fitting import recommend as advise

        rec = advise(analysis, compute)
    else:  # the sweep's analysis, its run sized by the plan stored with it
        from scaling.db import resolve_url
        from scaling.orchestrator.expand import sweep_recommendation

        rec = sweep_recommendation(resolve_url(cli=db), analysis, compute)
    return _typed_advice(rec)


def next_plan(path: str | Path, compute: Optional[float] = None, *, db: Optional[str] = None,
              sweep: Optional[str] = None, runs: str = "run", bootstrap: Optional[int] = None,
              seed: Optional[int] = None) -> Path:
    """Write the sweep's answer as its next plan, as ``scaling recommend --emit-plan``; returns the path.

    Built on the plan stored with the sweep (data, model, recipe, resources kept): ``runs="run"``
    plans the recommended run (its shape, D*, lr and batch); ``runs="narrow"`` the runs that would
    narrow approach 3's interval on N* most. The file is validated as ``scaling plan`` reads it
    before it replaces ``path`` in one step.

    Args:
        path: the YAML file to write.
        compute: the budget C in FLOPs (default: ten times the sweep's largest run).
        db: database URL (default: ``$SCALING_DB``, else ``sqlite:///scaling.db``).
        sweep: the sweep whose laws advise (default: the latest).
        runs: ``"run"`` or ``"narrow"``.
        bootstrap: bootstrap replicates behind each 95% interval (default: the stored analysis', else 200).
        seed: seed of the bootstrap.

    Returns:
        The path written.

    Raises:
        UserError: nothing to plan (no stored plan, a run from a law flagged unreliable, no runs suggested).

    Example:
        ```python
        import scaling

        path = scaling.next_plan("next.yaml", db="sqlite:///scaling.db")
        scaling.load_plan(path).grid[0].models        # the recommended shape
        ```
    """
    from scaling.db import resolve_url
    from scaling.orchestrator.expand import sweep_recommendation
    from scaling.orchestrator.next_plan import check_plan_output, write_sweep_plan

    url = resolve_url(cli=db)
    check_plan_output(path, url, "path")
    analysis = _analysis(db, sweep, None, _settings(bootstrap, seed, "next_plan", least=2))
    rec = sweep_recommendation(url, analysis, compute)
    return write_sweep_plan(url, analysis.sweep, rec, path, runs)


def _settings(bootstrap: Optional[int], seed: Optional[int], where: str, *, least: int = 0, **given: Any) -> Optional[Settings]:
    """The analysis' settings as asked (bootstrap and seed checked); None where nothing is asked (a sweep's
    stored analysis, whatever its settings)."""
    from scaling.fitting import Settings

    asked = {k: v for k, v in given.items() if v != Settings.__dataclass_fields__[k].default}
    if bootstrap is None and seed is None and not asked:
        return None
    n_bootstrap, seed = check_resampling(200 if bootstrap is None else bootstrap, 0 if seed is None else seed, where,
                                         least=least)
    return Settings(n_bootstrap=n_bootstrap, seed=seed, **asked)


def _analysis(db: Optional[str], sweep: Optional[str], csv: Optional[str], settings: Optional[Settings]) -> Analysis:
    """The analysis of a sweep (stored, or made and stored: as ``scaling fit`` makes it) or of a CSV, on the
    CLI's one path (:func:`scaling.fitting.source_of`)."""
    from scaling.fitting import analyse, source_of

    return analyse(source_of(db, sweep, csv), settings)


def report(db: Optional[str] = None, sweep: Optional[str] = None, path: str | Path = "report.html") -> Path:
    """Write the sweep's self-contained HTML report; returns its path.

    The file opens without a network (plotly.js inlined); its figures are drawn as they scroll
    into view.

    Args:
        db: database URL (default: ``$SCALING_DB``, else ``sqlite:///scaling.db``).
        sweep: the sweep to report (default: the latest).
        path: the HTML file to write (parent folders are created).

    Returns:
        The path written.

    Example:
        ```python
        import scaling

        path = scaling.report(db="sqlite:///scaling.db", sweep="example", path="report.html")
        from IPython.display import IFrame
        IFrame(str(path), width="100%", height=600)   # or open it in a browser
        ```
    """
    from scaling.db import resolve_url
    from scaling.orchestrator.sweep import report_inputs
    from scaling.reports import write_report

    url = resolve_url(cli=db)
    write_report(url, sweep, path, **report_inputs(url, sweep)._asdict())  # the run `scaling sweep` ends with
    return Path(path)


def hparams(db: Optional[str] = None, sweep: Optional[str] = None, *, csv: Optional[str] = None,
            bootstrap: Optional[int] = None, seed: Optional[int] = None) -> Optional[Hparams]:
    """The hyperparameter groups of a sweep (or a CSV with lr / batch columns): each group's optimum
    and the lr / batch laws; None when the runs form no group. Fits no loss law.

    Args:
        db: database URL (default: ``$SCALING_DB``, else ``sqlite:///scaling.db``).
        sweep: the sweep (default: the latest).
        csv: a CSV with columns N, D, loss and lr and / or batch instead of a sweep.
        bootstrap: bootstrap replicates behind each 95% interval (default: the stored analysis', else 200).
        seed: seed of the bootstrap.

    Returns:
        ``Hparams`` (each group's L*, lr*, B* and the laws lr*(N, D), B*(D) over them), or None when
            no two runs differ only in lr, batch or beta2.

    Example:
        ```python
        import scaling

        hp = scaling.hparams(db="sqlite:///scaling.db", sweep="sim-hparams")
        hp.groups_frame()                        # one row per group
        print(hp.recommend(N=1e8, D=2e9))        # {'lr': Estimate(...), 'batch': Estimate(...)}
        ```
    """
    fitted = _analysis(db, sweep, csv, _settings(bootstrap, seed, "hparams")).hparams  # the stored analysis'
    return None if fitted is None else _typed_hparams(fitted)


def _typed_hparams(fit: "HparamFit") -> Hparams:
    groups = [HparamGroup(g.label, g.N, g.D, g.n_runs, g.status, g.message, _estimate(g.loss, "loss"),
                          _estimate(g.lr, "lr"), _estimate(g.batch, "batch"), dict(g.near))
              for g in fit.groups]
    laws = {name: {p: Estimate.from_interval(iv) for p, iv in law.params.items()} for name, law in fit.laws.items()}
    flagged = {name: list(law.doubts()) for name, law in fit.laws.items() if not law.reliable()}
    return Hparams(groups, laws, flagged, dict(fit.skipped), list(fit.notes), fit)


def _typed_fit(summary: "FitSummary") -> Fit:
    from scaling.fitting.sweep_fit import KINDS

    laws = {kind: FittedLaw(kind, KINDS[kind][1], law.reliable(),
                            {name: Estimate.from_interval(iv) for name, iv in law.reported_intervals().items()},
                            list(law.notes_), law)
            for kind, law in summary.laws.items()}
    return Fit(summary.source, summary.sweep, summary.n_points, laws, dict(summary.skipped), list(summary.notes),
               summary)


def _typed_advice(rec: "Recommendation") -> Advice:
    per_law = {kind: {q: _estimate(_withheld_if(kind in rec.unreliable, r[q]), q) for q in ("N", "D", "loss")}
               for kind, r in rec.per_law.items()}
    chosen = per_law.get(rec.chosen) if rec.chosen else None
    return Advice(rec.compute, rec.chosen, rec.chosen_reason, *(chosen[q] if chosen else None for q in ("N", "D", "loss")),
                  per_law=per_law, left_out=dict(rec.unreliable), run=rec.run, notes=list(rec.notes),
                  recommendation=rec)


def _withheld_if(unreliable: bool, iv: Interval) -> Interval:
    """An unreliable law's interval measures nothing the data determine: its value only."""
    from scaling.fitting.core.intervals import withheld

    return withheld(iv, "the law is flagged unreliable") if unreliable else iv


def tasks(db: Optional[str] = None, sweep: Optional[str] = None, *, csv: Optional[str] = None,
          task: Optional[list[str]] = None, bootstrap: Optional[int] = None, seed: Optional[int] = None, step1_recipe: str = "grid") -> TaskFits:
    """Fit the downstream tasks of a sweep (its ``task/<task>/<kind>`` metrics) or of a CSV's task columns.

    Args:
        db: database URL (default: ``$SCALING_DB``, else ``sqlite:///scaling.db``).
        sweep: the sweep (default: the latest).
        csv: a CSV with N, D and task columns instead of a sweep.
        task: the tasks to fit (default: every task recorded).
        bootstrap: bootstrap replicates behind each 95% interval (default: the stored analysis', else 200).
        seed: seed of the bootstrap.
        step1_recipe: how step 1's Chinchilla form is searched, ``grid`` or ``ladder`` (OLMo's
            model-ladder recipe; see docs/downstream.md).

    Returns:
        The analysis' ``TaskFits`` (also ``scaling.Tasks``): per task, step 1 (task loss from N, D) and
            step 2 (accuracy from task loss) as fitted laws (``laws``) and as ``params`` (``Estimate``
            values), the tasks not fitted and why, ``predict(N, D)``, ``to_frame(N, D)`` and ``table()``.

    Example:
        ```python
        import scaling

        tasks = scaling.tasks(db="sqlite:///scaling.db")
        for p in tasks.predict(N=1e9, D=2e10):
            print(p.task, p.form, p.accuracy)      # e.g. hellaswag sigmoid 0.41 [0.38, 0.44]
        ```
    """
    settings = _settings(bootstrap, seed, "tasks", tasks=tuple(task) if task else True, task_recipe=step1_recipe)
    analysis = _analysis(db, sweep, csv, settings)  # the stored analysis'
    return analysis.tasks if analysis.tasks is not None else TaskFits(source=analysis.source)


def curves(db: Optional[str] = None, sweep: Optional[str] = None, *, csv: Optional[str] = None,
           bootstrap: int = 100, seed: int = 0) -> "CurveLaw | CurveLaws":
    """Fit the loss curves of a sweep's runs (or of a CSV) in their learning-rate schedules.

    Both published forms are fitted (Luo et al.'s multi-power law, Tissue et al.'s annealing law),
    each curve left out in turn to measure how well each predicts an unseen curve, and the better
    one chosen; see docs/curves.md.

    Args:
        db: database URL (default: ``$SCALING_DB``, else ``sqlite:///scaling.db``).
        sweep: the sweep (default: the latest); each run's eval-loss curve with the learning rate
            its trainer used at every step, rebuilt from its spec.
        csv: a CSV of ``run, step, lr, loss`` instead of a sweep (``loss`` empty where only the
            rate is known; the rate is interpolated between rows and warms up linearly from 0
            before a run's first row).
        bootstrap: replicates behind each 95% interval (over whole curves; 0: none).
        seed: seed of the bootstrap.

    Returns:
        The fitted ``CurveLaw``: ``form_`` (the chosen form), ``params_``, ``held_out_``,
            ``doubts()``, ``table()``, and ``predict(schedules)``: a DataFrame of ``run, step, loss,
            lo, hi`` for schedules given as a CSV path or a table of ``run, step, lr`` (optional
            ``predict`` 0/1). Curves of several model sizes (their ``N`` differ) give a
            ``CurveLaws``: one law per size in ``laws``, whose ``predict`` needs each schedule's ``N``.

    Example:
        ```python
        import scaling

        law = scaling.curves(csv="curves.csv")
        law.predict("schedules.csv")               # run, step, loss, lo, hi
        ```
    """
    from scaling.fitting.curves.output import curve_law

    if csv is not None:
        return curve_law(csv=csv, bootstrap=bootstrap, seed=seed)
    from scaling.db import resolve_url

    return curve_law(url=resolve_url(cli=db), sweep=sweep, bootstrap=bootstrap, seed=seed)
