"""Fit every law to a sweep or a CSV, store and reuse fits, and summarise them.

``fit_sweep`` is what ``scaling fit`` and the end of ``scaling sweep`` call. A stored fit is
reused when the sweep's data (the averaged points and curves, :meth:`FitData.fingerprint`) and
the fit's configuration (law, settings, bootstrap size and seed, :data:`FIT_VERSION`) are the same.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from scaling.errors import FitError, UserError
from scaling.fitting.core.backtest import backtest
from scaling.fitting.core.base import Law, jsonable
from scaling.fitting.core.measurements import R_STAR_DATA, FitData, from_csv, from_db
from scaling.fitting.loss.envelope import ChinchillaEnvelope
from scaling.fitting.hyperparams.hparams import MODES, HparamFit, fit_hparams
from scaling.fitting.loss.isoflop import ChinchillaIsoFLOP
from scaling.fitting.loss.kaplan import KaplanLaw
from scaling.fitting.loss.parametric import ChinchillaParametric
from scaling.fmt import Interval, num, se_text

#: Bumped when a change to the fitting code should invalidate stored fits.
FIT_VERSION = 5

#: Kinds of fit, in report order, with their classes and display names.
KINDS: dict[str, tuple[type[Law], str]] = {
    "kaplan": (KaplanLaw, "Kaplan"),
    "approach1": (ChinchillaEnvelope, "Chinchilla approach 1 (envelope)"),
    "approach2": (ChinchillaIsoFLOP, "Chinchilla approach 2 (IsoFLOP)"),
    "approach3": (ChinchillaParametric, "Chinchilla approach 3 (parametric)"),
}
#: Short names for narrow tables.
SHORT: dict[str, str] = {"kaplan": "Kaplan", "approach1": "Chinchilla 1 (envelope)",
                         "approach2": "Chinchilla 2 (IsoFLOP)", "approach3": "Chinchilla 3 (parametric)"}
CLASSES: dict[str, type[Law]] = {cls.__name__: cls for cls, _ in KINDS.values()}
LAW_CHOICES: dict[str, tuple[str, ...]] = {
    "all": tuple(KINDS),
    "kaplan": ("kaplan",),
    "chinchilla": ("approach1", "approach2", "approach3"),
    **{k: (k,) for k in KINDS if k != "kaplan"},
}


def from_dict(d: dict[str, Any]) -> Law:
    """Rebuild any fitted law from its ``to_dict()`` form (dispatch on its ``class`` field)."""
    if not isinstance(d, dict) or "class" not in d:
        raise FitError("a stored fit must be a dict with a 'class' field")
    cls = CLASSES.get(str(d["class"]))
    if cls is None:
        raise FitError(f"unknown law class {d['class']!r} (known: {', '.join(sorted(CLASSES))})")
    return cls.from_dict(d)


def kind_of(law: Law) -> str:
    for kind, (cls, _) in KINDS.items():
        if isinstance(law, cls):
            return kind
    return type(law).__name__


def _kinds(law: str) -> tuple[str, ...]:
    if law not in LAW_CHOICES:
        raise FitError(f"unknown law {law!r} (use one of {', '.join(LAW_CHOICES)})")
    return LAW_CHOICES[law]


@dataclass
class FitSummary:
    """The outcome of fitting one data set: the fitted laws, what was skipped and why, what was reused.

    Of a sweep (:func:`fit_sweep`) it is the sweep's :data:`SweepFit`: its loss laws, hyperparameter
    laws and downstream task laws, fitted once and handed to the recommendation, the report and the
    closing answer, none of which fits again.
    """

    source: str
    fingerprint: str
    n_points: int
    conventions: dict[str, Any]
    laws: dict[str, Law] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    reused: list[str] = field(default_factory=list)
    stored: dict[str, int] = field(default_factory=dict)
    sweep: str | None = None
    notes: list[str] = field(default_factory=list)
    #: Each hyperparameter group's optimum and the lr / batch laws (scaling.fitting.hyperparams.hparams), when the data have groups.
    hparams: HparamFit | None = None
    #: The downstream task laws (:class:`scaling.fitting.tasks.task_laws.TaskFits`; empty when no run evaluated a
    #: task); None when not fitted (a CSV's are fitted on their own).
    tasks: Any = None

    def to_dict(self, replicates: bool = False) -> dict[str, Any]:
        """JSON-ready; bootstrap replicates only when asked (they are stored with each fit)."""
        laws = {}
        for kind, law in self.laws.items():
            d = law.to_dict()
            if not replicates:
                d["bootstrap"] = {k: v for k, v in d["bootstrap"].items() if k != "replicates"}
            laws[kind] = d
        return jsonable({
            "sweep": self.sweep, "source": self.source, "fingerprint": self.fingerprint,
            "n_points": self.n_points, "conventions": self.conventions, "laws": laws,
            "skipped": self.skipped, "reused": self.reused, "stored": self.stored, "notes": self.notes,
            **({"hparams": self.hparams.to_dict()} if self.hparams is not None else {}),
        })

    def table(self) -> str:
        """Every fitted parameter with its bootstrap SE and 95% interval, as text tables."""
        from rich.table import Table

        from scaling.fmt import PlainText

        console = PlainText(width=110)
        head = f"{self.source}: {self.n_points} points (N in {self.conventions.get('params')} parameters, " \
               f"C = {self.conventions.get('flops_per_param_token', 6):.3g} N D)"
        console.print(head)
        for note in self.notes:
            console.print(note if note.startswith("warning: ") else f"note: {note}")
        for kind, law in self.laws.items():
            boot = law.bootstrap_info_ or {"n": 0}
            title = f"{KINDS[kind][1]}" + (" (reused stored fit)" if kind in self.reused else "")
            t = Table(title=title, title_justify="left", show_edge=False)
            for col in ("parameter", "value", "SE", "95% interval"):
                t.add_column(col, justify="left" if col == "parameter" else "right")
            for name, iv in law.reported_intervals().items():
                t.add_row(name, _num(iv["value"]), se_text(iv), interval_text(iv))
            console.print(t)
            logs = [n for n in law.log_names if n in law.param_names + law.derived_names]
            if logs and law.reliable():  # an unreliable law shows no SE to explain
                console.print(f"  SE (ln): the standard error of ln({', '.join(logs)}), the scale they are fitted on")
            extra = [f"bootstrap: {boot.get('n', 0)} replicates" + (f", {boot['failed']} failed" if boot.get("failed") else "")]
            bt = law.backtest_
            if bt and bt.get("mean_abs_rel_error") is not None:
                extra.append(f"backtest: mean |rel. error| of held-out loss {100 * bt['mean_abs_rel_error']:.2f}% "
                             f"({len(bt['held_out'])} largest-compute points, {bt['n_train']} fitted)")
                if bt.get("N_opt") and bt["N_opt"].get("rel_error") is not None:
                    extra.append(f"backtest: N_opt at C={bt['N_opt']['C']:.3g} off by {100 * bt['N_opt']['rel_error']:+.3g}%")
            elif bt and bt.get("error"):
                extra.append(f"backtest: not possible ({bt['error']})")
            extra.extend(law.notes_)
            for line in extra:
                console.print(f"  {line}")
            console.print()
        for kind, reason in self.skipped.items():
            console.print(f"{KINDS[kind][1]}: not fitted: {reason}")
        hparams = "\n" + self.hparams.table() if self.hparams is not None else ""  # its own width
        return console.text() + hparams


#: One sweep's fits: loss laws, hyperparameter laws and task laws, computed once by :func:`fit_sweep`.
SweepFit = FitSummary


def interval_text(iv: dict[str, Any]) -> str:
    """The interval cell: the 95% percentile interval, or what stands in its place (pinned, biased, no spread,
    unreliable law), as :meth:`scaling.fitting.core.intervals.Interval.text` writes it."""
    return Interval.of(iv).text(4, value=False)


def _num(v: float | None) -> str:
    return num(v, 4, "-")


def fit_data(data: FitData, law: str = "all", n_bootstrap: int = 200, seed: int = 0,
             settings: dict[str, dict[str, Any]] | None = None, run_backtest: bool = True) -> FitSummary:
    """Fit the chosen laws to ``data`` (nothing stored). A law the data cannot support is skipped
    with its reason, unless it was the only one asked for (then its FitError propagates)."""
    kinds = _kinds(law)
    summary = FitSummary(source=data.source or "data", fingerprint=data.fingerprint(), n_points=len(data.points),
                         conventions=data.conventions() | {"flops_per_param_token": data.flops_per_param_token},
                         notes=list(data.notes))
    for kind in kinds:
        try:
            summary.laws[kind] = _fit_one(kind, data, n_bootstrap, seed, (settings or {}).get(kind, {}), run_backtest)
        except FitError as exc:
            if len(kinds) == 1:
                raise
            summary.skipped[kind] = " ".join(str(exc).split())
    summary.hparams = hparam_fit(data, n_bootstrap, seed)
    if not summary.laws and summary.hparams is None:  # hyperparameter groups alone are still an answer
        raise FitError("no law could be fitted: " + "; ".join(f"{KINDS[k][1]}: {r}" for k, r in summary.skipped.items()))
    return summary


def hparam_fit(data: FitData, n_bootstrap: int = 200, seed: int = 0) -> HparamFit | None:
    """The hyperparameter groups' optima and laws of ``data`` (None when its runs form no group)."""
    if data.hparam_runs is None:
        return None
    return fit_hparams(data.hparam_runs, n_bootstrap, seed)


def _fit_one(kind: str, data: FitData, n_bootstrap: int, seed: int, settings: dict[str, Any], run_backtest: bool) -> Law:
    cls = KINDS[kind][0]
    law = cls(**settings).fit(data)
    if n_bootstrap:
        law.bootstrap(n_bootstrap, seed)
    if run_backtest:
        backtest(law, data)
    return law


def fit_csv(path: str, law: str = "all", n_bootstrap: int = 200, seed: int = 0, *,
            flops_convention: str = "6N", unique_tokens: float | None = None, hparams: str = "tuned") -> FitSummary:
    """Fit a CSV of anyone's measurements (column aliases in :data:`scaling.fitting.core.measurements.ALIASES`)."""
    return fit_data(from_csv(path, flops_convention=flops_convention, unique_tokens=unique_tokens, hparams=hparams),
                    law, n_bootstrap, seed)


def _config_hash(law: Law, n_bootstrap: int, seed: int) -> str:
    cfg = {"class": type(law).__name__, "settings": law.get_settings(), "n_bootstrap": n_bootstrap, "seed": seed,
           "version": FIT_VERSION}
    return hashlib.sha256(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:12]


def fit_sweep(url: str, sweep: str | None = None, law: str = "all", n_bootstrap: int = 200, seed: int = 0,
              effective_data: bool = False, save: bool = True, *, r_star: float = R_STAR_DATA,
              fit_r_star: bool = False, r_star_n: float | None = None, fit_r_star_n: bool = False,
              hparams: str = "tuned", tasks: bool | list[str] = True, task_recipe: str = "grid") -> SweepFit:
    """Fit a sweep's completed runs, store each fit with its data fingerprint, reuse unchanged ones.

    ``save=False`` reuses stored fits but stores none of the new ones (a report that was not
    asked to write to the database).

    ``effective_data``: fit on Muennighoff et al.'s D' from the runs' unique tokens, with R*_D =
    ``r_star`` or estimated (``fit_r_star``), and excess parameters N' with R*_N = ``r_star_n`` or
    estimated (``fit_r_star_n``), as :func:`scaling.fitting.loss.effective.fit_effective` does for a CSV.
    The R*s found are part of the data's conventions, so of the fingerprint.

    The stored fingerprint is ``<data fingerprint>-<configuration hash>``: the same data fitted
    with other settings, bootstrap size or seed is a different fit.

    ``hparams``: a sweep with hyperparameter groups has its loss laws fitted on each group's tuned
    loss (``tuned``) or on the setting at its grid's centre (``fixed``); the groups' optima and the
    lr / batch laws are in ``summary.hparams``, stored and reused like the loss laws (the fits table's
    law ``hparams``), keyed by the data's fingerprint and a hash of the groups' runs.

    ``tasks``: the downstream task laws are fitted too (``summary.tasks``) with the same bootstrap
    size and seed and step 1 searched by ``task_recipe`` (``True``: every task the runs evaluated; a
    list: those tasks; ``False``: none), stored and reused (law ``tasks``) keyed by the data's
    fingerprint and a hash of the task evaluations. A sweep whose tasks cannot be fitted keeps its
    loss laws, with the reason among its notes, unless tasks were named.
    """
    from scaling.db import Store, connect

    kinds = _kinds(law)
    constrained = fit_r_star or fit_r_star_n or r_star_n is not None
    if (constrained or r_star != R_STAR_DATA) and not effective_data:
        raise FitError("R*_D and R*_N apply to effective data: fit the sweep with effective_data (--effective-data)")
    if hparams not in MODES:
        raise FitError(f"unknown hyperparameter mode {hparams!r} (use one of {', '.join(MODES)})")
    data, sweep = from_db(url, sweep, effective_data=effective_data, r_star=r_star, hparams=hparams)
    if constrained:
        from scaling.fitting.loss.effective import fit_effective

        data = fit_effective(data, fit_d=fit_r_star, r_star_n=r_star_n, fit_n=fit_r_star_n)
    data_fp = data.fingerprint()
    summary = FitSummary(source=f"sweep {sweep!r}", fingerprint=data_fp, n_points=len(data.points),
                         conventions=data.conventions() | {"flops_per_param_token": data.flops_per_param_token},
                         sweep=sweep, notes=list(data.notes))
    store, stored_fits = Store(url), connect(url)
    try:
        summary.hparams = _stored_or_fitted(
            stored_fits, store if save else None, sweep, HPARAMS_KEY, _hparams_fingerprint(data, n_bootstrap, seed),
            lambda: hparam_fit(data, n_bootstrap, seed), lambda h: h.to_dict(), HparamFit.from_dict)
        if tasks is not False:
            summary.tasks = _sweep_tasks(url, sweep, summary, None if tasks is True else list(tasks), n_bootstrap, seed,
                                         task_recipe, stored_fits, store if save else None)
        for kind in kinds:
            cls = KINDS[kind][0]
            proto = cls()
            fp = f"{data_fp}-{_config_hash(proto, n_bootstrap, seed)}"
            found = stored_fits.find_fit(sweep, cls.law, cls.method, fp)
            if found is not None:
                try:
                    restored = from_dict(found["result"])
                    restored.data_ = data  # same fingerprint: the very data it was fitted to
                    summary.laws[kind] = restored
                    summary.reused.append(kind)
                    summary.stored[kind] = int(found["id"])
                    continue
                except (UserError, KeyError, TypeError, ValueError):
                    pass  # an unreadable stored fit is refitted
            try:
                fitted = _fit_one(kind, data, n_bootstrap, seed, {}, True)
            except FitError as exc:
                if len(kinds) == 1:
                    raise
                summary.skipped[kind] = " ".join(str(exc).split())
                continue
            summary.laws[kind] = fitted
            if save:
                summary.stored[kind] = store.save_fit(sweep, cls.law, cls.method, fitted.to_dict(), fp)
    finally:
        close = getattr(store, "close", None)
        if close is not None:
            close()
        stored_fits.close()
    if not summary.laws and summary.hparams is None:  # hyperparameter groups alone are still an answer
        raise FitError(f"sweep {sweep!r}: no law could be fitted: "
                       + "; ".join(f"{KINDS[k][1]}: {r}" for k, r in summary.skipped.items()))
    return summary



#: The fits table's (law, method) of a sweep's hyperparameter fit and of its task fits.
HPARAMS_KEY = ("hparams", "groups")
TASKS_KEY = ("tasks", "two steps")


def _digest(payload: Any) -> str:
    return hashlib.sha256(json.dumps(jsonable(payload), sort_keys=True).encode()).hexdigest()[:12]


def _frame_digest(frame: Any) -> str:
    import pandas as pd

    if frame is None or not len(frame):
        return "none"
    return hashlib.sha256(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes()
                          + ",".join(map(str, frame.columns)).encode()).hexdigest()[:12]


def _hparams_fingerprint(data: FitData, n_bootstrap: int, seed: int) -> str:
    cfg = {"fit": "hparams", "n_bootstrap": n_bootstrap, "seed": seed, "version": FIT_VERSION}
    return f"{data.fingerprint()}-{_frame_digest(data.hparam_runs)}-{_digest(cfg)}"


def _stored_or_fitted(results: Any, store: Any, sweep: str, key: tuple[str, str], fingerprint: str,
                      fit: Any, to_dict: Any, from_stored: Any) -> Any:
    """The fit stored under ``key`` and ``fingerprint`` when readable, else ``fit()`` (stored when a
    ``store`` is given; None is not stored)."""
    found = results.find_fit(sweep, key[0], key[1], fingerprint)
    if found is not None:
        try:
            return from_stored(found["result"])
        except (UserError, KeyError, TypeError, ValueError, AttributeError):
            pass  # an unreadable stored fit is refitted
    out = fit()
    if out is not None and store is not None:
        store.save_fit(sweep, key[0], key[1], jsonable(to_dict(out)), fingerprint)
    return out


def _sweep_tasks(url: str, sweep: str, summary: FitSummary, names: list[str] | None, n_bootstrap: int, seed: int,
                 recipe: str, results: Any, store: Any) -> Any:
    """The sweep's task laws (empty without task metrics), stored or reused; a failure is a note unless
    tasks were named."""
    from scaling.fitting.tasks.task_laws import TaskFits, fit_tasks, tasks_from_db

    k = float(summary.conventions.get("flops_per_param_token") or 6.0)
    try:
        td = tasks_from_db(url, sweep, FitData(points=pd.DataFrame(), flops_per_param_token=k))
        if names and not td.tasks():
            raise FitError(f"sweep {sweep!r}: --task given but its runs evaluated no task")
        if not td.tasks():
            return fit_tasks(td, tasks=names)  # nothing evaluated: nothing to fit or store
        cfg = {"fit": "tasks", "tasks": sorted(names or []), "n_bootstrap": n_bootstrap, "seed": seed,
               "recipe": recipe, "k": k, "version": FIT_VERSION}
        fingerprint = f"{summary.fingerprint}-{_frame_digest(td.evals)}-{_digest(cfg)}"
        return _stored_or_fitted(results, store, sweep, TASKS_KEY, fingerprint,
                                 lambda: fit_tasks(td, tasks=names, n_bootstrap=n_bootstrap, seed=seed, recipe=recipe),
                                 stored_tasks, tasks_from_stored)
    except UserError as exc:
        if names:
            raise
        summary.notes.append(f"downstream tasks: not fitted: {' '.join(str(exc).split())}")
        return TaskFits(source=f"sweep {sweep!r}")


def stored_tasks(fits: Any) -> dict[str, Any]:
    """Task fits (:class:`~scaling.fitting.tasks.task_laws.TaskFits`) as the fits table stores them: each task's two
    steps with their replicates, and its evaluations (for the figures)."""
    out = fits.to_dict(replicates=True)
    for task, law in fits.laws.items():
        out["laws"][task]["evals"] = None if law.evals is None else law.evals.to_dict("list")
    return jsonable(out)


def _frame(columns: dict[str, list[Any]]) -> pd.DataFrame:
    """A stored frame's columns, JSON's nulls in a numeric column NaN again."""
    out = pd.DataFrame(columns)
    for col in out.columns:
        if out[col].dtype == object and all(v is None or isinstance(v, (int, float)) for v in out[col]):
            out[col] = pd.to_numeric(out[col])
    return out


def tasks_from_stored(d: dict[str, Any]) -> Any:
    """:func:`stored_tasks` read back."""
    from scaling.fitting.tasks.task_curves import AccuracyCurve
    from scaling.fitting.tasks.task_laws import TaskFits, TaskLaw

    laws = {}
    for task, t in (d.get("laws") or {}).items():
        evals = t.get("evals")
        laws[task] = TaskLaw(task=str(t["task"]), accuracy=str(t["accuracy"]), loss_source=str(t["loss_source"]),
                             step1=from_dict(t["step1"]),
                             curves={f: AccuracyCurve.from_dict(c) for f, c in (t.get("step2") or {}).items()},
                             skipped=dict(t.get("skipped") or {}), backtest=t.get("backtest"),
                             evals=None if evals is None else _frame(evals),
                             chance=t.get("chance"))
    return TaskFits(source=str(d.get("source") or ""), laws=laws, skipped=dict(d.get("skipped") or {}),
                    notes=list(d.get("notes") or []))
