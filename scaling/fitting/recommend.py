"""The compute-optimal next run: N*, D*, loss at a budget from every law, and the runs worth adding.

For a budget C (default :data:`NEXT_BUDGET_FACTOR` times the largest run), each fitted law gives
N*, D* and its predicted loss with bootstrap intervals; their spread says how far the methods
agree. The recommendation follows the best-determined law (:func:`compare_laws`): among the laws
allowed to recommend, the one with the narrowest 95% interval on N*; it says which and why. A law is
allowed when no note calls it unreliable, or when its only doubts are about its parameters and its
bootstrap determines what is asked, N*, D* and the loss at the budget (:func:`undetermined_at_budget`):
the doubts then stay in the recommendation's notes.
:func:`recommend` takes a sweep's :class:`~scaling.fitting.analysis.Analysis` (fitted once) and a budget:
it fits nothing and reads no database or file (at the analysis' own budget it is the analysis'
recommendation, made when the analysis was). With a sweep, it sizes the run
for that N* with the default shape policy and memory model of :mod:`scaling.accounting`; the plan's
own rules (shape, learning rate, batch, memory and strategy on the plan's device) belong to the
orchestrator, which replaces that run by the plan's
(:func:`scaling.orchestrator.expand.size_recommendation`, through :meth:`Recommendation.with_run`):
values flow one way, fit -> recommendation -> sized run, and the fits never import the orchestrator.

Which runs would narrow the interval on N* most (a heuristic, stated with its result): for a few
candidate IsoFLOP slices (budgets 2x, 4x and 8x the largest measured that lie below the target,
else the target itself; five sizes each around the approach-3 N* there, spaced by a factor e^0.5), add the points approach 3 predicts for them, redo
the same bootstrap (refits started at the full-data optimum) and compare the width of the 95%
interval of log N* at the target budget with and without them (at most :data:`CANDIDATE_BOOTSTRAP`
replicates, and no more than the analysis' own bootstrap). Predicted points carry no noise, so the
reductions are optimistic in scale but comparable across candidates. This refits approach 3's
bootstrap per candidate, so it is done once, when the analysis is made, at its own budget
(:func:`next_runs_for`); a recommendation at another budget lists none and says where they are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence

import numpy as np
import pandas as pd

from scaling.errors import FitError, UserError
from scaling.fmt import num
from scaling.fitting.sweep_fit import KINDS, SHORT
from scaling.accounting import FLOPS_PER_PARAM_TOKEN
from scaling.fitting.core.base import MIN_OK_FRACTION, check_budget, jsonable
from scaling.fitting.core.doubts import Doubt, DoubtKind
from scaling.fitting.core.notes import Note, NoteKind
from scaling.fitting.core.measurements import prepare
from scaling.fmt import Interval, bounds, flops, size

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    from scaling.fitting.core.base import Law
    from scaling.fitting.hyperparams.hparams import HparamFit
    from scaling.fitting.tasks.task_laws import TaskFits

#: The default budget, as a multiple of the largest measured run's compute.
NEXT_BUDGET_FACTOR = 10.0
#: Candidate budgets for extra runs, as multiples of the largest measured compute.
CANDIDATE_MULTIPLES = (2.0, 4.0, 8.0)
#: Sizes of a candidate slice around its predicted N*, in natural-log offsets.
CANDIDATE_OFFSETS = (-1.0, -0.5, 0.0, 0.5, 1.0)
#: Bootstrap replicates per candidate in the heuristic.
CANDIDATE_BOOTSTRAP = 100
#: A law whose only doubts are about its parameters (:attr:`~scaling.fitting.core.doubts.DoubtKind.about_parameters`:
#: not identified, pinned, a near-singular Fisher information) still recommends when its
#: bootstrap determines what ``recommend`` is asked, N*, D* and the loss at the budget: at least
#: MIN_OK_FRACTION of the drawn replicates give a finite, positive optimum, each reported interval (model
#: error of the backtest included) is a percentile one holding its estimate, and spans at most these
#: factors (hi / lo). Its parameter doubts then stay in the recommendation's notes.
AT_BUDGET_SPAN = {"N": 10.0, "D": 10.0, "loss": 1.15}
#: Where a run sized by :func:`default_run` comes from, as the recommendation says it.
DEFAULT_RUN_SOURCE = "defaults: ShapePolicy() on one worker (micro-batch 8, bf16, one 80 GiB device)"


class Fitted(Protocol):
    """What a recommendation reads of fitted laws: an analysis (:class:`scaling.fitting.analysis.Analysis`,
    which imports this module) or a summary of laws (:class:`scaling.fitting.sweep_fit.FitSummary`, which
    holds no recommendation): its laws, its k and what else it fitted."""

    source: str
    sweep: str | None
    laws: Mapping[str, Law]
    skipped: Mapping[str, str]
    hparams: HparamFit | None
    tasks: TaskFits | None
    recommendation: Recommendation | None

    @property
    def k(self) -> float:
        """FLOPs per parameter per token (C = k N D), from the conventions."""


@dataclass(frozen=True)
class RunTarget:
    """What a recommendation's concrete run is sized for, and what :meth:`Recommendation.with_run`
    applies again to a run sized elsewhere."""

    #: The recommended N (the chosen law's N*, else the consensus), its D at the budget, the budget.
    N: float
    D: float
    C: float
    #: The N comes from a law flagged unreliable: the hyperparameter laws' values are withheld.
    flagged: bool
    hparams: HparamFit | None
    #: Where the run's notes (how it was sized, where its lr and batch come from) sit in the notes.
    notes_at: int
    n_notes: int = 0


@dataclass(frozen=True)
class Reach:
    """How far N* reaches across the reliable laws: the lowest lower and highest upper end of their 95%
    intervals (model uncertainty between methods, not a 95% interval of its own)."""

    lo: float
    hi: float
    n_laws: int

    def to_dict(self) -> dict[str, float]:
        return {"lo": self.lo, "hi": self.hi, "n_laws": float(self.n_laws)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Reach | None":
        """:meth:`to_dict` read back; None for the empty form of no reach."""
        return cls(float(d["lo"]), float(d["hi"]), int(d["n_laws"])) if d else None


@dataclass
class Recommendation:
    """What to train next at ``compute`` FLOPs, and which runs would firm up the answer."""

    compute: float
    source: str
    #: Each law's N*, D* and loss at the budget (:meth:`~scaling.fitting.core.base.Law.optimal_interval`).
    per_law: dict[str, dict[str, Interval]] = field(default_factory=dict)
    #: The law the recommendation follows, and why it was chosen over the others.
    chosen: str | None = None
    chosen_reason: str = ""
    #: Why the law followed was chosen, without its name (a line that names it already).
    chosen_why: str = ""
    #: Laws left out of the choice and the consensus, with the first note that says why.
    unreliable: dict[str, Doubt] = field(default_factory=dict)
    #: Laws that give no compute-optimal point at this budget (left out of everything), with why.
    no_optimum: dict[str, str] = field(default_factory=dict)
    #: Laws whose notes doubt their parameters but whose bootstrap determines N*, D* and the loss at
    #: this budget (:func:`undetermined_at_budget`), with those doubts: they may recommend.
    determined_at_budget: dict[str, str] = field(default_factory=dict)
    #: N* across the reliable laws: the lowest lower and highest upper end of their 95% intervals.
    across_laws: Reach | None = None
    agreement: dict[str, float] = field(default_factory=dict)
    consensus: dict[str, float] = field(default_factory=dict)
    run: dict[str, Any] | None = None
    run_source: str | None = None
    next_runs: list[dict[str, Any]] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    #: lr and batch for the recommended (N, D) from the hyperparameter laws, each an
    #: :class:`~scaling.fmt.Interval` or None, with why (:meth:`scaling.fitting.hyperparams.hparams.HparamFit.recommend`); None without groups.
    hparams: dict[str, Any] | None = None
    #: Each downstream task's predicted accuracy at the recommended run (scaling.fitting.tasks.task_laws).
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: A sweep's schedule advice for the recommended run (:func:`scaling.fitting.curves.advice.run_schedule_advice`):
    #: each schedule's predicted final loss and the best, or ``why_not``; None for a CSV.
    schedule: dict[str, Any] | None = None
    #: What the concrete run is sized for (None without an N*); not part of the answer (``to_dict``).
    target: RunTarget | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The answer as ``scaling recommend --format json`` prints it (notes as text)."""
        out = {k: v for k, v in self.__dict__.items() if k not in ("target", "no_optimum", "chosen_why")}
        return jsonable(out | {"across_laws": {} if self.across_laws is None else self.across_laws.to_dict()})

    def to_record(self) -> dict[str, Any]:
        """Everything, to store: :meth:`to_dict` with the notes' kinds, the laws without an optimum and
        the target a plan sizes the run for (its hyperparameter laws are the analysis' own)."""
        t = self.target
        return jsonable(self.to_dict() | {"notes": [n.to_dict() for n in self.notes], "no_optimum": self.no_optimum,
                                          "chosen_why": self.chosen_why,
                                          "unreliable": {k: as_doubt(d).to_dict() for k, d in self.unreliable.items()},
                                          "target": None if t is None else {f: getattr(t, f) for f in
                                                                            ("N", "D", "C", "flagged", "notes_at", "n_notes")}})

    @classmethod
    def from_record(cls, d: dict[str, Any], hparams: HparamFit | None = None) -> "Recommendation":
        """:meth:`to_record` read back; ``hparams``: the hyperparameter laws the target applies again."""
        t = d.get("target")
        fields = {f: d[f] for f in cls.__dataclass_fields__ if f in d and f not in ("notes", "target")}
        for f in ("per_law", "agreement", "consensus", "hparams", "tasks"):
            fields[f] = _nan_back(fields.get(f))
        fields["per_law"] = {k: {q: Interval.of(iv) for q, iv in r.items()} for k, r in (d.get("per_law") or {}).items()}
        fields["hparams"] = stored_hparams(fields.get("hparams"))
        fields["across_laws"] = Reach.from_dict(d.get("across_laws") or {})
        if fields.get("tasks"):
            from scaling.fitting.tasks.task_laws import stored_predictions

            fields["tasks"] = stored_predictions(fields["tasks"])
        fields["unreliable"] = {k: Doubt.from_dict(v) for k, v in (d.get("unreliable") or {}).items()}
        return cls(**fields, notes=[Note.from_dict(n) for n in d.get("notes") or []],
                   target=None if t is None else RunTarget(hparams=hparams, **t))

    def with_run(self, run: dict[str, Any] | None, run_source: str | None, note: str | None = None) -> Recommendation:
        """This recommendation with ``run`` as its concrete run, sized from ``run_source`` (``note``: why
        so, if it needs saying); the hyperparameter laws applied to it again and the run's notes replaced.

        The orchestrator sizes a run by a plan's rules for :attr:`target` and hands it here
        (:func:`scaling.orchestrator.expand.size_recommendation`); nothing else changes.
        """
        t = self.target
        if t is None:
            raise FitError("this recommendation has no N* to size a run for")
        run = None if run is None else dict(run)
        notes = [Note(NoteKind.RUN, note)] if note else []
        from scaling.fitting.hyperparams.hparams import apply_to_run

        hparams, hp_note = apply_to_run(t.hparams, run, t.N, t.D, t.C, t.flagged, run_source)
        if hp_note:
            notes.append(Note(NoteKind.RUN_HPARAMS, hp_note))
        return replace(self, run=run, run_source=run_source, hparams=hparams,
                       notes=self.notes[:t.notes_at] + notes + self.notes[t.notes_at + t.n_notes:],
                       target=replace(t, n_notes=len(notes)))

    def table(self) -> str:
        from rich.table import Table

        from scaling.fmt import PlainText

        con = PlainText(width=150)
        con.print(f"Compute-optimal run at C = {flops(self.compute)} FLOPs ({self.source})")
        t = Table(show_edge=False)
        for col in ("method", "N* [95% interval]", "D* [95% interval]", "loss [95% interval]"):
            t.add_column(col, justify="left" if col == "method" else "right", no_wrap=True)
        for kind, r in self.per_law.items():
            unreliable = kind in self.unreliable
            at_budget = ", determined at this budget" if kind in self.determined_at_budget else ""
            mark = (" (chosen, unreliable)" if kind == self.chosen and unreliable else f" (chosen{at_budget})"
                    if kind == self.chosen else " (unreliable)" if unreliable else f" ({at_budget[2:]})" if at_budget
                    else "")
            cells = [SHORT.get(kind, kind) + mark]
            for q, write, digits in (("N", size, 3), ("D", size, 3), ("loss", num, 4)):
                iv = r[q]  # an unreliable law's interval measures nothing the data determine: not shown
                cells.append(write(iv.value, digits) if unreliable else iv.text(digits, write))
            t.add_row(*cells)
        con.print(t)
        if self.chosen:
            con.print(f"recommended: {self.chosen_reason}")
        if self.across_laws:
            con.print(f"across the reliable laws, N* lies in {bounds(self.across_laws.lo, self.across_laws.hi, fmt=size)} "
                      "(the widest reach of their 95% intervals: model uncertainty between methods)")
        for kind, why in self.unreliable.items():
            con.print(f"left out: {SHORT.get(kind, kind)}: {why}")
        if self.agreement:
            a = self.agreement
            con.print(f"agreement: N* spans a factor {a['N_ratio']:.2f}, D* a factor {a['D_ratio']:.2f}, "
                      f"predicted loss {100 * a['loss_spread']:.2f}% across {int(a['n_methods'])} methods")
        c = self.consensus
        if c:
            con.print(f"consensus (geometric mean over the {int(c['n_methods'])} reliable methods): N* = {size(c['N'])}, "
                      f"D* = {size(c['D'])} ({c['D'] / c['N']:.1f} tokens per parameter)")
        if self.run:
            from scaling.fitting.core.wording import run_line

            con.print(f"concrete run: {run_line(self.run, self.run_source, self.hparams)}")
        if self.schedule is not None:
            from scaling.fitting.curves.advice import advice_lines

            for line in advice_lines(self.schedule, indent=""):
                con.print(line)
        if self.next_runs:
            con.print("runs that would narrow approach 3's interval on N* most (see `scaling.fitting.recommend` for the "
                      "heuristic):")
            for i, cand in enumerate(self.next_runs[:3]):
                sizes = ", ".join(size(n) for n in cand["sizes"])
                con.print(f"  {i + 1}. budget {flops(cand['C'])} FLOPs, sizes {sizes}: 95% interval of N* "
                          f"{100 * cand['reduction']:.0f}% narrower (costs {flops(cand['cost_flops'])} FLOPs)")
        if self.tasks:
            from scaling.fitting.tasks.task_laws import task_lines

            for line in task_lines(self.tasks):
                con.print(line)
        if self.hparams is not None:
            def shown(iv: Interval | None, write: Callable[..., str] = num) -> str:  # a withheld value is
                # not printed (its reason says why)
                return "none" if iv is None or iv.kind == "unreliable" else iv.text(3, write)

            h = self.hparams
            batch = shown(h["batch"], size)
            con.print(f"hyperparameters for N = {size(h['N'])}, D = {size(h['D'])}: lr = {shown(h['lr'])} "
                      f"({h['lr_why']}); batch = {batch}{'' if batch == 'none' else ' tokens'} ({h['batch_why']})")
        for note in self.notes:
            con.print(f"note: {note}")
        return con.text()


def _num(v: float | None) -> str:
    return num(v, 3, "-")


#: The numbers of an interval or a summary that JSON stores as null when they are NaN.
_NUMBERS = frozenset({"value", "se", "lo", "hi", "se_log", "lo_param", "hi_param", "quantile", "N", "D", "loss",
                      "N_ratio", "D_ratio", "loss_spread", "n_methods", "n_laws"})


def stored_hparams(h: dict[str, Any] | None) -> dict[str, Any] | None:
    """A stored recommendation's lr and batch (:meth:`HparamFit.recommend`) with their intervals read back."""
    if h is None:
        return None
    return h | {q: None if h.get(q) is None else Interval.of(h[q]) for q in ("lr", "batch")}


def as_doubt(doubt: object) -> Doubt:
    """``doubt`` as a :class:`Doubt` (a bare message is one of kind ``STORED``)."""
    return doubt if isinstance(doubt, Doubt) else Doubt(DoubtKind.STORED, str(doubt))


def _nan_back(obj: object) -> Any:
    """A stored summary with its numbers NaN again where JSON wrote null (as :func:`jsonable` wrote them)."""
    if isinstance(obj, dict):
        return {k: math.nan if v is None and k in _NUMBERS else _nan_back(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_nan_back(v) for v in obj]
    return obj


def recommend(
    fit: Fitted,
    compute: float | None = None,
    *,
    next_runs: Sequence[dict[str, Any]] | None = None,
    tasks: TaskFits | None = None,
) -> Recommendation:
    """N*, D* and loss at ``compute`` FLOPs from every law of ``fit``; of a sweep, a run sized by the defaults.

    ``fit`` is an :class:`~scaling.fitting.analysis.Analysis` (or the laws it is made of, while it is
    being made): nothing is fitted and nothing is read. An analysis' own recommendation is returned as it
    is for its own budget. ``compute`` defaults to ten times the largest run. The concrete run (only for a
    sweep) is sized by :func:`default_run`; the orchestrator sizes it by the sweep's plan
    (:func:`scaling.orchestrator.expand.size_recommendation`). ``tasks``: fitted downstream tasks
    (:class:`scaling.fitting.tasks.task_laws.TaskFits`) whose accuracy at the recommended run is predicted;
    by default the fit's own. ``next_runs``: the runs worth adding, ranked by :func:`candidate_runs` when
    the analysis was made; at another budget the analysis' ranking is not this budget's, so none are listed.
    """
    own = fit.recommendation
    if own is not None and tasks is None and next_runs is None and (compute is None or compute == own.compute):
        return own
    if not fit.laws:  # the hyperparameter groups alone give lr* and B*, not a run's size
        raise FitError("no loss law could be fitted, so there is no N* to recommend: "
                       + "; ".join(f"{KINDS[kind][1]}: {why}" for kind, why in fit.skipped.items()))
    compute = _budget(fit, compute)
    k = fit.k
    rec = compare_laws(fit.laws, compute, source=fit.source, k=k)
    N_run = rec.per_law[rec.chosen]["N"].value if rec.chosen else rec.consensus.get("N")
    if N_run is not None:
        rec.target = RunTarget(N=N_run, D=compute / (k * N_run), C=compute,
                               flagged=rec.chosen in rec.unreliable, hparams=fit.hparams, notes_at=len(rec.notes))
        if fit.sweep is not None:  # a sweep's run: sized here by the defaults, by its plan in the orchestrator
            rec = rec.with_run(default_run(N_run), DEFAULT_RUN_SOURCE,
                               "the run is sized with the defaults: no plan was given to size it")
            from scaling.fitting.curves.advice import run_schedule_advice

            rec.schedule = run_schedule_advice(getattr(fit, "curves", None), N_run, compute / (k * N_run))
        else:
            rec = rec.with_run(None, None)
    tasks = fit.tasks if tasks is None else tasks
    if tasks:
        from scaling.fitting.tasks.task_laws import predict_for_recommendation

        rec.tasks, note = predict_for_recommendation(tasks, rec, k)
        if note:
            rec.notes.append(Note(NoteKind.TASKS, note))
    if next_runs is not None:
        rec.next_runs = list(next_runs)
    elif own is not None and own.next_runs:
        rec.notes.append(Note(NoteKind.NEXT_RUNS, f"the runs worth adding are ranked at the analysis' budget, "
                                                  f"C = {flops(own.compute)} FLOPs (`scaling recommend` without "
                                                  "--compute lists them)"))
    return rec


def next_runs_for(fit: Fitted, compute: float, seed: int = 0,
                  n_bootstrap: int = CANDIDATE_BOOTSTRAP) -> tuple[list[dict[str, Any]], Note | None]:
    """The runs worth adding at ``compute`` (:func:`candidate_runs`, judged with approach 3 by a bootstrap of
    at most ``n_bootstrap`` replicates per candidate), or none and why.

    This refits approach 3's bootstrap per candidate: :func:`scaling.fitting.analysis.analyse` calls it
    once, for the analysis' own budget, and keeps the ranking in the recommendation."""
    n_bootstrap = min(n_bootstrap, CANDIDATE_BOOTSTRAP)
    if n_bootstrap < 2:
        return [], Note(NoteKind.NEXT_RUNS, "which runs to add is judged by how much they narrow a 95% bootstrap "
                                            "interval: without a bootstrap, none are suggested")
    law3 = fit.laws.get("approach3")
    if law3 is not None and law3.doubts():
        return [], Note(NoteKind.NEXT_RUNS, "which runs to add is judged with approach 3, whose fit notes say the "
                                            "data cannot pin it down: no runs suggested")
    if law3 is None or law3.data_ is None:
        return [], Note(NoteKind.NEXT_RUNS, "which runs to add is judged with approach 3, which is not fitted here")
    points = _data_of(fit)
    return candidate_runs(law3, float(compute), float(points["C"].max()), seed, n_bootstrap=n_bootstrap), None


def _budget(fit: Fitted, compute: float | None) -> float:
    """``compute``, checked against the measured budgets, or ten times the largest run."""
    points = _data_of(fit)
    c_max = float(points["C"].max()) if points is not None else math.nan
    if compute is None:
        if not math.isfinite(c_max):
            raise FitError("no budget given and no data to take ten times the largest run from")
        compute = default_budget(c_max)
    if not (compute > 0 and math.isfinite(compute)):
        raise FitError(f"--compute must be a positive number of FLOPs, got {compute}")
    if points is not None:
        check_budget(float(compute), points["C"])
    return float(compute)


def default_budget(c_max: float) -> float:
    """The budget a recommendation is for when none is given: ten times the largest run's compute."""
    return NEXT_BUDGET_FACTOR * float(c_max)


def _width(iv: Interval) -> float:
    """ln(hi / lo) of a positive quantity's interval (inf without one)."""
    width = iv.log_width()
    return width if math.isfinite(width) else math.inf


def undetermined_at_budget(law: Law, iv: dict[str, Interval], compute: float) -> str | None:
    """Why ``law``'s bootstrap does not determine N*, D* and the loss at ``compute`` (None when it does).

    ``iv`` is ``law.optimal_interval(compute)``. Beyond the fitted budgets the law must also have a
    backtest: its error is what widens the intervals for extrapolating
    (:meth:`~scaling.fitting.core.base.Law.extrapolation_error`).
    """
    other = [d for d in law.doubts() if not d.kind.about_parameters]
    if other:
        return other[0]
    c_max = (law.c_range_ or (math.nan, math.nan))[1]
    rates = law.extrapolation_ or {}
    if not compute <= c_max * (1 + 1e-9) and not all(_finite(rates.get(q)) for q in ("N", "loss")):
        return "no backtest sizes its error beyond the fitted budgets"
    reps = law.optimal_replicates(compute)
    if not reps[0].size:
        return "no usable bootstrap"
    ok = np.logical_and.reduce([np.isfinite(r) & (r > 0) for r in reps])
    if ok.sum() < MIN_OK_FRACTION * ok.size:
        return f"only {int(ok.sum())} of {ok.size} bootstrap replicates give a finite optimum at this budget"
    for q in ("N", "D", "loss"):
        lo, hi = iv[q].lo, iv[q].hi
        if iv[q].kind != "percentile":
            return f"the bootstrap does not reproduce its {q} at this budget ({iv[q].withheld or iv[q].kind})"
        if lo is None or hi is None or not (lo > 0 and math.isfinite(hi)):  # an end at 0 or beyond float range
            return f"its 95% interval of {q} at this budget reaches {bounds(lo, hi)}"
        span = hi / lo
        if not span <= AT_BUDGET_SPAN[q]:
            return (f"its 95% interval of {q} at this budget spans a factor {span:.3g} (more than "
                    f"{AT_BUDGET_SPAN[q]:g})")
    return None


def _finite(v: object) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def _doubt_text(doubt: Doubt | str) -> str:
    """A doubt's reason (a bare message where it has none, e.g. a stored note)."""
    return (doubt.reason if isinstance(doubt, Doubt) else None) or str(doubt)


def compare_laws(laws: Mapping[str, Law], compute: float, *, source: str = "", k: float | None = None) -> Recommendation:
    """Each law's N*, D* and loss at ``compute``, the law to follow, the spread and the consensus.

    The law followed is the best-determined one: among laws no note calls unreliable
    (:meth:`~scaling.fitting.core.base.Law.doubts`), or whose doubts are about parameters only and whose
    bootstrap determines N*, D* and the loss at ``compute`` (:func:`undetermined_at_budget`; those
    doubts become notes), and with an interval on N*, the narrowest 95%
    interval on N* (in ln units). When every law is unreliable, the narrowest interval overall is
    shown, saying that no law is reliable. ``laws`` maps a kind (``approach2``...) to a fitted law;
    ``k`` (FLOPs per parameter per token, for the consensus D*) defaults to the laws' own.
    """
    if k is None:
        k = float(next((law.k_ for law in laws.values() if law.k_), FLOPS_PER_PARAM_TOKEN))
    rec = Recommendation(compute=float(compute), source=source)
    for kind, law in laws.items():
        try:
            iv = law.optimal_interval(compute)
        except (ValueError, FloatingPointError, AttributeError) as e:
            _no_optimum(rec, kind, f"it gives no compute-optimal point here ({e})")
            continue
        if all(math.isfinite(iv[q].value) and iv[q].value > 0 for q in ("N", "D", "loss")):
            rec.per_law[kind] = iv
        else:
            values = ", ".join(f"{q} = {iv[q].value:.3g}" for q in ("N", "D", "loss"))
            _no_optimum(rec, kind, f"its compute-optimal point at this budget is not a positive, finite one ({values})")
    if not rec.per_law:
        raise FitError("no fitted law gives a compute-optimal point at this budget")
    for kind in rec.per_law:
        doubts = laws[kind].doubts()
        if not doubts:
            continue
        if undetermined_at_budget(laws[kind], rec.per_law[kind], compute) is None:
            rec.determined_at_budget[kind] = "; ".join(_doubt_text(d) for d in doubts)
            rec.notes.append(Note(NoteKind.AT_BUDGET, f"{SHORT.get(kind, kind)}: {rec.determined_at_budget[kind]}; "
                                  "but its bootstrap determines N*, D* and the loss at this budget, so it may "
                                  "recommend (its parameters stay without intervals in the fit)"))
        else:
            rec.unreliable[kind] = doubts[0]
    trusted = [kind for kind in rec.per_law if kind not in rec.unreliable]
    with_interval = [kind for kind in trusted if math.isfinite(_width(rec.per_law[kind]["N"]))]
    _choose(rec, trusted, with_interval)
    return _spread(rec, trusted, with_interval, compute, k)


def _name(kind: str) -> str:
    return SHORT.get(kind, kind)


def _choose(rec: Recommendation, trusted: list[str], with_interval: list[str]) -> None:
    """The law ``rec`` follows and why: the narrowest interval on N* among the trusted laws with one."""
    if with_interval:
        rec.chosen = min(with_interval, key=lambda kind: _width(rec.per_law[kind]["N"]))
        w = _width(rec.per_law[rec.chosen]["N"])
        others = [kind for kind in with_interval if kind != rec.chosen]
        rec.chosen_why = (f"the narrowest 95% interval on N* (a factor {math.exp(w):.3g} from end to end)"
                          + (f" among the laws the data determine (also: {', '.join(_name(o) for o in others)})"
                             if others else ", the only law the data determine with an interval"))
        if rec.chosen in rec.determined_at_budget:
            rec.chosen_why += " (at this budget, not in its parameters: see the notes)"
    elif trusted:
        rec.chosen = trusted[0]
        rec.chosen_why = "the only reliable law, though it has no bootstrap interval"
    else:
        finite = [kind for kind in rec.per_law if math.isfinite(_width(rec.per_law[kind]["N"]))]
        if finite:
            rec.chosen = min(finite, key=lambda kind: _width(rec.per_law[kind]["N"]))
            rec.chosen_reason = (f"no law is reliable; {_name(rec.chosen)} has the narrowest 95% interval on N*, "
                                 "but its fit notes say the data cannot pin it down")
    if rec.chosen_why:
        rec.chosen_reason = f"{_name(rec.chosen)}: {rec.chosen_why}"
    if rec.unreliable and trusted:
        what = "the choice, agreement and consensus leave out " if len(trusted) > 1 else "the choice leaves out "
        whose = "their fit notes say" if len(rec.unreliable) > 1 else "its fit notes say"
        rec.notes.append(Note(NoteKind.LEFT_OUT, what + ", ".join(_name(kind) for kind in rec.unreliable)
                              + f" ({whose} the data cannot pin {'them' if len(rec.unreliable) > 1 else 'it'} down)"))


def _spread(rec: Recommendation, trusted: list[str], with_interval: list[str], compute: float,
            k: float) -> Recommendation:
    """How far the laws' N* reach together, their agreement and their consensus (two trusted laws at least)."""
    los = [rec.per_law[kind]["N"].lo for kind in with_interval]
    his = [rec.per_law[kind]["N"].hi for kind in with_interval]
    if len(with_interval) > 1:
        rec.across_laws = Reach(float(min(los)), float(max(his)), len(with_interval))
    if len(trusted) < 2:  # agreement and a consensus need two laws the data determine
        if not trusted:
            rec.notes.append(Note(NoteKind.NO_CONSENSUS, "no law is reliable, so there is no agreement or consensus "
                                                         "to report"))
        return rec
    Ns = np.array([rec.per_law[kind]["N"].value for kind in trusted])
    Ds = np.array([rec.per_law[kind]["D"].value for kind in trusted])
    Ls = np.array([rec.per_law[kind]["loss"].value for kind in trusted])
    rec.agreement = {"N_ratio": float(Ns.max() / Ns.min()), "D_ratio": float(Ds.max() / Ds.min()),
                     "loss_spread": float((Ls.max() - Ls.min()) / Ls.mean()), "n_methods": float(len(Ns))}
    N_c = float(np.exp(np.mean(np.log(Ns))))
    rec.consensus = {"N": N_c, "D": float(compute) / (k * N_c), "n_methods": float(len(Ns))}
    return rec


def _no_optimum(rec: Recommendation, kind: str, why: str) -> None:
    """Leave ``kind`` out of ``rec``: it gives no compute-optimal point at the budget, for ``why``."""
    rec.no_optimum[kind] = why
    rec.notes.append(Note(NoteKind.NO_OPTIMUM, f"{SHORT.get(kind, kind)} is left out: {why}"))


def _data_of(summary: Fitted) -> pd.DataFrame | None:
    for law in summary.laws.values():
        if law.data_ is not None:
            return law.data_.points
        pts = (law.plot_ or {}).get("points")
        if pts:
            return pd.DataFrame(pts)
    return None


def default_run(N: float) -> dict[str, Any]:
    """The run of about N parameters by the defaults (:data:`DEFAULT_RUN_SOURCE`): ShapePolicy's shape
    and the memory model on one worker; lr and batch are left to the hyperparameter laws."""
    from scaling.accounting import ShapePolicy
    from scaling.memory import estimate_memory

    shape = ShapePolicy().shape_for(N)
    device_gib = 80.0
    mem = estimate_memory(shape, 8, "bf16", "single", 1)  # one worker: no strategy to choose
    return {"shape": shape.as_dict(), "n_params": shape.params("non_embedding"), "lr": None, "batch_tokens": None,
            "memory_gib": mem.total_gib, "strategy": "single" if mem.total_gib <= device_gib else None}


def candidate_runs(law: Law, compute: float, c_max: float, seed: int = 0, *,
                   offsets: Sequence[float] = CANDIDATE_OFFSETS, n_bootstrap: int = CANDIDATE_BOOTSTRAP,
                   multiples: Sequence[float] = CANDIDATE_MULTIPLES) -> list[dict[str, Any]]:
    """Rank candidate IsoFLOP slices by how much they narrow the 95% interval of log N* at ``compute``.

    ``law`` is a fitted approach 3 (its refits start at the full-data optimum) or any other law
    with a bootstrap (refitted from scratch: approaches 1 and 2 refit in milliseconds). Each
    candidate has ``len(offsets)`` sizes at N* of ``law`` times exp(offset).
    """
    from scaling.fitting.loss.parametric import ChinchillaParametric

    base = law.data_
    k = law.k_

    def width(points: pd.DataFrame) -> float:
        data = prepare(points, flops_convention=base.flops_convention, params_convention=base.params_convention)
        if isinstance(law, ChinchillaParametric):
            probe = ChinchillaParametric(**law.get_settings())
            probe.k_, probe.theta_, probe.params_, probe.data_ = k, law.theta_, law.params_, data
            probe.replicates_ = None
        else:
            probe = type(law)(**law.get_settings()).fit(data)
        probe.bootstrap(n_bootstrap, seed)
        iv = probe.optimal_interval(compute)["N"]
        return math.nan if iv.lo is None or iv.hi is None else math.log(iv.hi) - math.log(iv.lo)

    pts = base.points[["N", "D", "C", "loss"]]
    try:
        w0 = width(pts)
    except (UserError, ValueError):
        return []
    if not math.isfinite(w0):
        return []  # no interval to narrow (its bootstrap was unavailable)
    out = []
    budgets = [m * c_max for m in multiples if m * c_max < compute] or [compute]
    for C in budgets:
        n_star = float(np.asarray(law.optimal(C)[0]))
        sizes = n_star * np.exp(np.asarray(offsets, float))
        D = C / (k * sizes)
        extra = pd.DataFrame({"N": sizes, "D": D, "C": np.full(sizes.size, C), "loss": law.predict(sizes, D)})
        try:
            w = width(pd.concat([pts, extra], ignore_index=True))
        except (UserError, ValueError):
            continue
        if not math.isfinite(w):
            continue
        out.append({"C": C, "sizes": sizes.tolist(), "tokens": D.tolist(), "cost_flops": C * sizes.size,
                    "width_log_N": w, "baseline_width_log_N": w0, "reduction": 1.0 - w / w0 if w0 > 0 else 0.0})
    out.sort(key=lambda r: -r["reduction"])
    return out
