"""The loss laws by kind: fitting each one, reading a stored one back, and their tables.

:func:`scaling.fitting.analysis.analyse` fits them (with the hyperparameter and task laws and the
recommendation) and stores the whole analysis; :class:`FitSummary` is the laws' part of it as
``scaling fit`` prints it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import pandas as pd

from scaling.errors import FitError
from scaling.fitting.core.backtest import backtest
from scaling.fitting.core.base import Law, jsonable
from scaling.fitting.core.conventions import Conventions
from scaling.fitting.core.measurements import FitData
from scaling.fitting.core.predicted import propagate
from scaling.fitting.core.notes import Note, NoteKind
from scaling.fitting.loss.envelope import ChinchillaEnvelope
from scaling.fitting.hyperparams.hparams import HparamFit, fit_hparams
from scaling.fitting.loss.isoflop import ChinchillaIsoFLOP
from scaling.fitting.loss.kaplan import KaplanLaw
from scaling.fitting.loss.parametric import ChinchillaParametric
from scaling.fmt import Interval, num, se_text

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    from scaling.fitting.tasks.task_laws import TaskFits

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
    return law_from_dict(d)


def law_from_dict(d: dict[str, Any], data: FitData | None = None) -> Law:
    """:func:`from_dict`, with ``data`` the very data it was fitted to (:meth:`Law.restore`)."""
    if not isinstance(d, dict) or "class" not in d:
        raise FitError("a stored fit must be a dict with a 'class' field")
    cls = CLASSES.get(str(d["class"]))
    if cls is None:
        raise FitError(f"unknown law class {d['class']!r} (known: {', '.join(sorted(CLASSES))})")
    return cls.restore(d, data)


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
    """The loss laws fitted to one data set, what was skipped and why, what was reused: the laws' part of
    an :class:`~scaling.fitting.analysis.Analysis` (:meth:`~scaling.fitting.analysis.Analysis.laws_fit`),
    or the laws alone fitted by :func:`fit_data` (a comparison, a quick look)."""

    source: str
    fingerprint: str
    n_points: int
    conventions: Conventions
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
    tasks: TaskFits | None = None
    #: A summary of laws holds no recommendation of its own (an analysis does).
    recommendation: ClassVar[None] = None

    @property
    def k(self) -> float:
        """FLOPs per parameter per token (C = k N D), from the conventions."""
        return self.conventions.k

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
            "n_points": self.n_points, "conventions": self.conventions.to_json(), "laws": laws,
            "skipped": self.skipped, "reused": self.reused, "stored": self.stored, "notes": self.notes,
            **({"hparams": self.hparams.to_dict()} if self.hparams is not None else {}),
        })

    def table(self) -> str:
        """Every fitted parameter with its bootstrap SE and 95% interval, as text tables."""
        from rich.table import Table

        from scaling.fmt import PlainText

        console = PlainText(width=110)
        head = f"{self.source}: {self.n_points} points (N in {self.conventions.params} parameters, " \
               f"C = {self.conventions.k:.3g} N D)"
        console.print(head)
        for note in self.notes:
            console.print(note if isinstance(note, Note) and note.kind is NoteKind.WARNING else f"note: {note}")
        for kind, law in self.laws.items():
            boot = law.bootstrap_info_ or {"n": 0}
            title = f"{KINDS[kind][1]}" + (" (reused stored fit)" if kind in self.reused else "")
            t = Table(title=title, title_justify="left", show_edge=False)
            for col in ("parameter", "value", "SE", "95% interval"):
                t.add_column(col, justify="left" if col == "parameter" else "right")
            for name, iv in law.reported_intervals().items():
                t.add_row(name, _num(iv.value), se_text(iv), interval_text(iv))
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



def _num(v: float | None) -> str:
    return num(v, 4, "-")


def fit_data(data: FitData, law: str = "all", n_bootstrap: int = 200, seed: int = 0,
             settings: dict[str, dict[str, Any]] | None = None, run_backtest: bool = True) -> FitSummary:
    """Fit the chosen laws to ``data`` (nothing stored). A law the data cannot support is skipped
    with its reason, unless it was the only one asked for (then its FitError propagates)."""
    kinds = _kinds(law)
    summary = FitSummary(source=data.source or "data", fingerprint=data.fingerprint(), n_points=len(data.points),
                         conventions=Conventions.of(data),
                         notes=list(data.notes))
    for kind in kinds:
        try:
            summary.laws[kind] = fit_one(kind, data, n_bootstrap, seed, (settings or {}).get(kind, {}), run_backtest)
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


def fit_one(kind: str, data: FitData, n_bootstrap: int, seed: int, settings: dict[str, Any], run_backtest: bool) -> Law:
    """One law of ``kind`` fitted to ``data``, bootstrapped (with the uncertainty of predicted points carried in)
    and backtested (a FitError when the data cannot support it)."""
    cls = KINDS[kind][0]
    law = cls(**settings).fit(data)
    if n_bootstrap:
        law.bootstrap(n_bootstrap, seed)
        propagate(law, data, lambda d: cls(**settings).fit(d))  # predicted points: their own uncertainty too
    if run_backtest:
        law.keep_backtest(*backtest(law, data))
    return law


def frame_digest(frame: pd.DataFrame | None) -> str:
    """A short digest of a frame's values and columns ("none" for none)."""
    if frame is None or not len(frame):
        return "none"
    return hashlib.sha256(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes()
                          + ",".join(map(str, frame.columns)).encode()).hexdigest()[:12]


def interval_text(iv: Interval) -> str:
    """The interval cell: the 95% percentile interval, or what stands in its place (pinned, biased, no spread,
    unreliable law), as :meth:`scaling.fmt.Interval.text` writes it."""
    return iv.text(4, value=False)


def stored_tasks(fits: TaskFits) -> dict[str, Any]:
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


def tasks_from_stored(d: dict[str, Any]) -> TaskFits:
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
