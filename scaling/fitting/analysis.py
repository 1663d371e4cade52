"""One sweep's or one CSV's answer, fitted once: :func:`analyse` returns a frozen :class:`Analysis`.

``analyse`` is a meta-estimator in scikit-learn's sense: it fits its parts once, in order (the loss
laws by kind, the hyperparameter laws, the downstream task laws, then the recommendation at the
default budget, which fits nothing, and the runs worth adding at that budget, which refit approach 3's
bootstrap), and hands back one typed value that every reader takes as it is: ``scaling fit`` and
``scaling recommend``, the closing answer of ``scaling sweep``, the report and the notebook API.

A sweep's analysis is stored whole in the fits table (law ``analysis``), keyed by the data's
fingerprint (the averaged points and curves, the hyperparameter groups' runs, the task evaluations,
what trunks' cooldowns are predicted from), the settings and :data:`FIT_VERSION`; the key is had by
reading the sweep, before anything is fitted, so the same data analysed with the same settings read
it back and fit nothing. A row of another key (older code, other data, other settings) is never read; a row that
cannot be read is refitted. Nothing is ever half-reused.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Mapping, Optional, Protocol, Union

from scaling.errors import FitError, NotFoundError, UserError
from scaling.fitting.core.base import Law, jsonable
from scaling.fitting.core.conventions import Conventions
from scaling.fitting.core.measurements import R_STAR_DATA, FitData, from_csv
from scaling.fitting.core.notes import Note, NoteKind, as_note
from scaling.fitting.hyperparams.hparams import MODES, HparamFit
from scaling.fitting.recommend import Recommendation, next_runs_for, recommend
from scaling.fitting.sweep_fit import KINDS, LAW_CHOICES, FitSummary, fit_one, frame_digest, hparam_fit, law_from_dict

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    import pandas as pd

    from scaling.fitting.core.sweep_data import SweepRead
    from scaling.fitting.curves.trunks import Trunk, TrunkPredictions
    from scaling.fitting.moe.moe_data import MoEData
    from scaling.fitting.moe.moe_fit import MoEFit
    from scaling.fitting.tasks.task_laws import TaskData, TaskFits

#: Bumped when a change to the fitting code should invalidate stored analyses.
FIT_VERSION = 8
#: The fits table's (law, method) of a stored analysis.
ANALYSIS_KEY = ("analysis", "all")


@dataclass(frozen=True)
class Settings:
    """What an analysis fits and how: part of its cache key (a change refits)."""

    #: Which loss laws (:data:`scaling.fitting.sweep_fit.LAW_CHOICES`).
    law: str = "all"
    n_bootstrap: int = 200
    seed: int = 0
    #: A sweep fitted on Muennighoff et al.'s D' (R*_D ``r_star`` or fitted), and N' (R*_N ``r_star_n`` or fitted).
    effective_data: bool = False
    r_star: float = R_STAR_DATA
    fit_r_star: bool = False
    r_star_n: Optional[float] = None
    fit_r_star_n: bool = False
    #: Hyperparameter groups' loss: ``tuned`` (each group's best) or ``fixed`` (its grid's centre).
    hparams: str = "tuned"
    #: The downstream tasks: every task evaluated (True), these (a tuple), none (False).
    tasks: Union[bool, tuple[str, ...]] = True
    #: How a task's step 1 is searched (:data:`scaling.fitting.tasks.task_laws.STEP1_RECIPES`).
    task_recipe: str = "grid"
    #: Rank the runs worth adding at the recommendation's budget (refits approach 3's bootstrap per candidate).
    next_runs: bool = True

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Settings":
        """Settings as an analysis stores them (``asdict``; its task names a list)."""
        given = dict(d)
        if isinstance(given.get("tasks"), list):
            given["tasks"] = tuple(given["tasks"])
        return cls(**given)

    def check(self) -> None:
        """Refuse settings that contradict each other, before anything is read."""
        if self.law not in LAW_CHOICES:
            raise FitError(f"unknown law {self.law!r} (use one of {', '.join(LAW_CHOICES)})")
        if self.hparams not in MODES:
            raise FitError(f"unknown hyperparameter mode {self.hparams!r} (use one of {', '.join(MODES)})")

    def check_sweep(self) -> None:
        """A sweep's D' comes from its runs' unique tokens only with ``effective_data`` (a CSV's from its U)."""
        constrained = self.fit_r_star or self.fit_r_star_n or self.r_star_n is not None
        if (constrained or self.r_star != R_STAR_DATA) and not self.effective_data:
            raise FitError("R*_D and R*_N apply to effective data: fit the sweep with effective_data (--effective-data)")

    @property
    def task_names(self) -> Optional[list[str]]:
        """The tasks named (None: every task evaluated)."""
        return None if isinstance(self.tasks, bool) else list(self.tasks)


@dataclass(frozen=True)
class SweepSource:
    """A sweep in a database (``sweep`` None: the latest)."""

    url: str
    sweep: Optional[str] = None


@dataclass(frozen=True)
class CsvSource:
    """A CSV of anyone's measurements and how to read it (named by :func:`source_of` for the CLI and the API)."""

    path: str
    flops_convention: str = "6N"
    params_convention: str = "non_embedding"
    loss_units: Optional[str] = None
    drop_invalid: bool = False
    drop_duplicates: bool = False
    unique_tokens: Optional[float] = None

    def read(self, settings: Settings) -> FitData:
        """The file's points in the settings' conventions (R*_D and R*_N fitted when asked)."""
        data = from_csv(self.path, flops_convention=self.flops_convention, params_convention=self.params_convention,
                        loss_units=self.loss_units, drop_invalid=self.drop_invalid,
                        drop_duplicates=self.drop_duplicates, unique_tokens=self.unique_tokens,
                        r_star=settings.r_star, hparams=settings.hparams)
        if settings.fit_r_star or settings.r_star_n is not None or settings.fit_r_star_n:
            from scaling.fitting.loss.effective import fit_effective

            data = fit_effective(data, fit_d=settings.fit_r_star, r_star_n=settings.r_star_n,
                                 fit_n=settings.fit_r_star_n)
        return data


Source = Union[SweepSource, CsvSource, FitData]


def source_of(db: Optional[str], sweep: Optional[str], csv: "Optional[str | os.PathLike[str]]" = None,
              **reading: Any) -> Union[SweepSource, CsvSource]:
    """What to analyse, as ``scaling fit`` / ``scaling recommend`` and the notebook API are told it: the CSV
    ``csv`` read with ``reading`` (:class:`CsvSource`'s options), else ``sweep`` (None: the latest) in the
    database ``db`` names (``--db``, else ``$SCALING_DB``, else ./scaling.db). The one path of both."""
    if csv is not None:
        return CsvSource(str(csv), **reading)
    if reading:
        raise TypeError(f"source_of: {', '.join(sorted(reading))} read a CSV only")
    from scaling.db import resolve_url

    return SweepSource(resolve_url(cli=db), sweep)


class CurveLaw(Protocol):
    """What the loss-curve law gives an analysis once it is fitted (its stored form)."""

    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Analysis:
    """Everything fitted to one sweep or CSV, and the answer it gives; made by :func:`analyse` only."""

    source: str
    fingerprint: str
    n_points: int
    settings: Settings
    #: The data's conventions (params, flops, effective data) and k, FLOPs per parameter per token, once.
    conventions: Conventions
    #: The loss laws by kind (:data:`scaling.fitting.sweep_fit.KINDS`), and those not fitted with why.
    laws: Mapping[str, Law] = field(default_factory=dict)
    skipped: Mapping[str, str] = field(default_factory=dict)
    #: Each hyperparameter group's optimum and the lr / batch laws (None: the runs form no group).
    hparams: Optional[HparamFit] = None
    #: The downstream task laws (None: not fitted; empty: no run evaluated a task).
    tasks: Optional["TaskFits"] = None
    #: The compute-optimal run at ten times the largest run, with the runs worth adding (None: no N*,
    #: ``no_recommendation`` says why). A sweep's run is sized by the defaults until the orchestrator
    #: sizes it by the plan (:func:`scaling.orchestrator.expand.size_recommendation`).
    recommendation: Optional[Recommendation] = None
    no_recommendation: str = ""
    notes: tuple[Note, ...] = ()
    #: A sweep's loss-curve laws by model size (:class:`scaling.fitting.curves.sweep.SweepCurves`; None for a CSV).
    curves: Optional[CurveLaw] = None
    #: The laws of sparsity of a sweep of mixtures of experts (None: no run has experts, or they could not
    #: be fitted: a note says why), N counting active parameters (scaling.fitting.moe).
    moe: Optional["MoEFit"] = None
    sweep: Optional[str] = None
    #: Where it was read from or stored (the fits table's id), and whether it was read back.
    stored_id: Optional[int] = None
    reused: bool = False
    #: Warnings about the input (units, dropped rows): printed to stderr by the CLI.
    warnings: tuple[str, ...] = ()
    #: A sweep's completed runs it was made from (None: a CSV's, or not recorded).
    n_runs: Optional[int] = None

    @property
    def k(self) -> float:
        """FLOPs per parameter per token (C = k N D)."""
        return self.conventions.k

    def laws_fit(self) -> FitSummary:
        """The loss and hyperparameter laws as ``scaling fit``'s tables show them."""
        kinds = list(self.laws) if self.reused else []
        stored = {kind: self.stored_id for kind in self.laws} if self.stored_id is not None else {}
        return FitSummary(source=self.source, fingerprint=self.fingerprint, n_points=self.n_points,
                          conventions=self.conventions, laws=dict(self.laws), skipped=dict(self.skipped),
                          reused=kinds, stored=stored, sweep=self.sweep, notes=list(self.notes),
                          hparams=self.hparams, tasks=self.tasks)

    def table(self) -> str:
        """Every law's parameters with SE and 95% interval, then the task laws (``scaling fit``)."""
        return self.laws_fit().table() + ("\n" + self.tasks.table() if self.tasks else "")

    def to_dict(self) -> dict[str, Any]:
        """``scaling fit --format json``: the laws without their replicates, the task laws when fitted."""
        out = self.laws_fit().to_dict()
        return out | ({"tasks": self.tasks.to_dict()} if self.tasks else {})

    def to_json(self) -> dict[str, Any]:
        """Everything, as the fits table stores it (replicates included: a budget of one's own is redrawn)."""
        from scaling.fitting.sweep_fit import stored_tasks

        rec = self.recommendation
        return jsonable({
            "version": FIT_VERSION, "source": self.source, "sweep": self.sweep, "fingerprint": self.fingerprint,
            "n_points": self.n_points, "settings": asdict(self.settings), "conventions": self.conventions.to_json(),
            "laws": {kind: law.to_dict() for kind, law in self.laws.items()}, "skipped": dict(self.skipped),
            "hparams": None if self.hparams is None else self.hparams.to_dict(replicates=True),
            "tasks": None if self.tasks is None else stored_tasks(self.tasks),
            "recommendation": None if rec is None else rec.to_record(), "no_recommendation": self.no_recommendation,
            "notes": [n.to_dict() for n in self.notes], "warnings": list(self.warnings),
            "curves": None if self.curves is None else self.curves.to_dict(),
            "moe": None if self.moe is None else self.moe.to_dict(), "n_runs": self.n_runs,
        })

    @classmethod
    def from_json(cls, d: Mapping[str, Any], data: Optional[FitData] = None) -> "Analysis":
        """:meth:`to_json` read back (``data``: the very data it was fitted to, for its laws); a record of
        another :data:`FIT_VERSION` is refused (:class:`FitError`): it is refitted, never half-used."""
        from scaling.fitting.moe.moe_fit import MoEFit
        from scaling.fitting.sweep_fit import tasks_from_stored

        if not isinstance(d, Mapping) or d.get("version") != FIT_VERSION:
            raise FitError(f"a stored analysis of another version ({d.get('version') if isinstance(d, Mapping) else d!r})")
        hparams = None if d.get("hparams") is None else HparamFit.from_dict(d["hparams"])
        rec = d.get("recommendation")
        return cls(source=str(d["source"]), fingerprint=str(d["fingerprint"]), n_points=int(d["n_points"]),
                   settings=Settings.from_json(d["settings"]), conventions=Conventions.from_json(d["conventions"]),
                   laws={kind: law_from_dict(law, data) for kind, law in d["laws"].items()},
                   skipped=dict(d.get("skipped") or {}), hparams=hparams,
                   tasks=None if d.get("tasks") is None else tasks_from_stored(d["tasks"]),
                   recommendation=None if rec is None else Recommendation.from_record(rec, hparams),
                   no_recommendation=str(d.get("no_recommendation") or ""),
                   notes=tuple(Note.from_dict(n) for n in d.get("notes") or []), sweep=d.get("sweep"),
                   warnings=tuple(d.get("warnings") or ()), curves=_stored_curves(d.get("curves")),
                   moe=None if d.get("moe") is None else MoEFit.from_dict(d["moe"]),
                   n_runs=None if d.get("n_runs") is None else int(d["n_runs"]))


def analyse(source: Source, settings: Optional[Settings] = None, *, save: bool = True) -> Analysis:
    """Fit everything to ``source`` once and answer: a sweep (:class:`SweepSource`), a CSV
    (:class:`CsvSource`) or points already read (:class:`FitData`).

    A sweep's analysis of unchanged data with the same settings is read back from the fits table and
    nothing is fitted; a new one is stored unless ``save`` is False (a report not asked to write).
    ``settings`` None (a reader that sets nothing: the report, the notebook's ``hparams()``): the newest
    stored analysis of the sweep's unchanged data, whatever its settings, else one with the defaults.
    A law the data cannot support is skipped with its reason, unless it was the only one asked for.
    """
    if isinstance(source, SweepSource):
        return _analyse_sweep(source, settings, save)
    settings = settings or Settings()
    settings.check()
    if isinstance(source, CsvSource):
        data = source.read(settings)
        from scaling.fitting.tasks.task_laws import tasks_from_csv

        task_data = tasks_from_csv(source.path, data, tasks=settings.task_names)  # a bad column: before any fit
        return _fit(data, settings, task_data=task_data)
    if isinstance(source, FitData):
        return _fit(data=source, settings=settings)
    raise TypeError(f"analyse() takes a SweepSource, a CsvSource or a FitData, not {type(source).__name__}")


def _latest_sweep(url: str) -> Optional[str]:
    from scaling.db import connect

    with connect(url) as results:
        return results.latest_sweep()


@dataclass(frozen=True)
class _SweepInputs:
    """Everything a sweep's analysis reads, before anything is fitted, and the key it is stored under."""

    read: "SweepRead"
    trunks: Optional[list["Trunk"]]
    task_data: Optional["TaskData"]
    task_note: Optional[Note]
    moe_data: Optional["MoEData"]
    moe_note: Optional[Note]
    key: str
    n_runs: int


def _sweep_inputs(url: str, sweep: str, settings: Settings) -> _SweepInputs:
    """The sweep's runs, trunks, points, task evaluations and experts, each read once, and their key: the trunks'
    predicted points enter it by what they are predicted from, so the key is had without fitting anything."""
    from scaling.fitting.core.sweep_data import points_of, read_sweep
    from scaling.fitting.curves.trunks import read_trunks, trunks_digest
    from scaling.fitting.moe import moe_data as M

    runs = M.completed_runs(url, sweep)  # their specs read once, for both families and the trunks
    trunks = read_trunks(url, sweep, runs)
    read = read_sweep(url, sweep, effective_data=settings.effective_data, hparams=settings.hparams,
                      leave_out=M.mixed_expert_runs(runs))
    trained = points_of(read, r_star=settings.r_star)
    task_data, task_note = _sweep_task_data(url, sweep, trained, settings)
    moe_data, moe_note = _sweep_moe_data(runs, sweep)
    key = cache_key(trained, task_data, settings, moe_data, trunks=trunks_digest(trunks))
    return _SweepInputs(read, trunks, task_data, task_note, moe_data, moe_note, key, len(runs))


def sweep_key(url: str, sweep: str, settings: Settings) -> tuple[str, int]:
    """The key the sweep's current data would be stored under with ``settings`` (:func:`cache_key`), and how
    many completed runs it has: read, not fitted, so a reader can tell whether a stored analysis is current."""
    inputs = _sweep_inputs(url, sweep, settings)
    return inputs.key, inputs.n_runs


def _analyse_sweep(source: SweepSource, asked: Optional[Settings], save: bool) -> Analysis:
    from scaling.db import Store, connect

    settings = asked or Settings()
    settings.check()
    settings.check_sweep()
    sweep = source.sweep or _latest_sweep(source.url)
    if sweep is None:
        raise NotFoundError("the database has no sweeps to fit")
    inputs = _sweep_inputs(source.url, sweep, settings)
    key = inputs.key
    with connect(source.url) as results:
        if asked is None:  # any settings: the newest row of these data
            rows = results.fits(sweep=sweep, law=ANALYSIS_KEY[0], method=ANALYSIS_KEY[1])
            found = [row for row in rows.to_dict("records")[::-1] if str(row["fingerprint"]).startswith(data_key(key))]
        else:
            found = [row for row in [results.find_fit(sweep, *ANALYSIS_KEY, key)] if row is not None]
    for row in found:
        try:
            stored = row["result"]
            used = settings if asked is not None else Settings.from_json(stored["settings"])  # R* as it was fitted
            data = _sweep_points(inputs, used, _stored_curves(stored.get("curves")))[0]
            return replace(Analysis.from_json(stored, data), stored_id=int(row["id"]), reused=True)
        except (UserError, KeyError, TypeError, ValueError, AttributeError):
            continue  # an unreadable stored analysis is refitted
    from scaling.fitting.curves.sweep import sweep_curves

    data, trunks = _sweep_points(inputs, settings)
    curves = sweep_curves(source.url, sweep, settings.n_bootstrap, settings.seed)
    if trunks is not None and trunks.law is not None and trunks.recipe is not None:
        from scaling.fitting.curves.sweep import JointCurves

        curves = replace(curves, joint=JointCurves(trunks.law, *trunks.recipe))
    notes = [n for n in (inputs.task_note, inputs.moe_note) if n is not None]
    analysis = _fit(data, settings, task_data=inputs.task_data, sweep=sweep, notes=notes, curves=curves)
    analysis = replace(analysis, n_runs=inputs.n_runs)
    if inputs.moe_data is not None:
        analysis = _with_moe(analysis, inputs.moe_data, settings)
    if not save:
        return analysis
    store = Store(source.url)
    try:
        return replace(analysis, stored_id=store.save_fit(sweep, *ANALYSIS_KEY, analysis.to_json(), key))
    finally:
        store.close()


def _sweep_points(inputs: _SweepInputs, settings: Settings,
                  stored: Optional[CurveLaw] = None) -> tuple[FitData, Optional["TrunkPredictions"]]:
    """The sweep's points with its trunks' predicted cooldowns (predicted by the law across sizes ``stored`` with a
    stored analysis, fitted else) and R*_D, R*_N fitted where asked."""
    from scaling.fitting.core.sweep_data import points_of
    from scaling.fitting.curves.trunks import predict_from_trunks, trunk_predictions_of

    trunks = None
    if inputs.trunks is not None:
        joint = getattr(stored, "joint", None)
        if stored is not None and joint is None:
            trunks = None  # the stored analysis predicted nothing from these trunks
        elif joint is not None:
            trunks = predict_from_trunks(inputs.trunks, law=joint.law)
        else:
            trunks = trunk_predictions_of(inputs.trunks, settings.n_bootstrap, settings.seed)
    data = points_of(inputs.read, r_star=settings.r_star, predicted=trunks.points() if trunks else None,
                     predicted_notes=tuple(trunks.notes) if trunks else (),
                     predicted_draws=trunks.draws if trunks else None)
    if settings.fit_r_star or settings.fit_r_star_n or settings.r_star_n is not None:
        from scaling.fitting.loss.effective import fit_effective

        data = fit_effective(data, fit_d=settings.fit_r_star, r_star_n=settings.r_star_n, fit_n=settings.fit_r_star_n)
    return data, trunks


def _sweep_task_data(url: str, sweep: str, data: FitData, settings: Settings) -> tuple[Optional["TaskData"], Optional[Note]]:
    """The sweep's task evaluations (None: tasks not asked for), or why they cannot be read (unless named)."""
    if settings.tasks is False:
        return None, None
    import pandas as pd

    from scaling.fitting.tasks.task_laws import tasks_from_db

    names = settings.task_names
    try:
        td = tasks_from_db(url, sweep, FitData(points=pd.DataFrame(), flops_per_param_token=data.flops_per_param_token))
    except UserError as exc:
        if names:
            raise
        return None, Note(NoteKind.NOT_FITTED, f"downstream tasks: not fitted: {' '.join(str(exc).split())}")
    if names and not td.tasks():
        raise FitError(f"sweep {sweep!r}: --task given but its runs evaluated no task")
    return td, None


def cache_key(data: FitData, task_data: Optional["TaskData"], settings: Settings,
              moe_data: Optional["MoEData"] = None, *, trunks: str = "") -> str:
    """The stored analysis' key: the data's fingerprint, its groups' runs, task evaluations, (a sweep of
    mixtures of experts) experts' points and (a sweep of trunks) what their cooldowns are predicted from
    (``trunks``, :func:`scaling.fitting.curves.trunks.trunks_digest`), the settings."""
    config = {"settings": asdict(settings), "version": FIT_VERSION}
    digest = hashlib.sha256(json.dumps(jsonable(config), sort_keys=True).encode()).hexdigest()[:12]
    evals = None if task_data is None else task_data.evals
    experts = "" if moe_data is None else f"-{frame_digest(moe_data.points)}"
    predicted = f"-t{trunks}" if trunks else ""
    return f"{data.fingerprint()}-{frame_digest(data.hparam_runs)}-{frame_digest(evals)}{experts}{predicted}-{digest}"


def _sweep_moe_data(runs: Optional["pd.DataFrame"], sweep: str) -> tuple[Optional["MoEData"], Optional[Note]]:
    """The sweep's points with their experts when some run is a mixture of experts (None otherwise), or
    why they cannot be read; ``runs``: its completed runs with their specs (None: none could be read)."""
    from scaling.fitting.moe import moe_data

    if runs is None:
        return None, None
    try:
        return moe_data.from_runs(runs, sweep), None
    except moe_data.NoExpertsError:
        return None, None
    except FitError as exc:
        return None, Note(NoteKind.NOT_FITTED, f"laws of sparsity: not fitted: {' '.join(str(exc).split())}")


def _with_moe(analysis: Analysis, data: "MoEData", settings: Settings) -> Analysis:
    """``analysis`` with the laws of sparsity fitted to ``data`` (a note instead when none can be)."""
    from scaling.fitting.moe.moe_fit import fit_moe

    try:
        return replace(analysis, moe=fit_moe(data, "moe", settings.n_bootstrap, settings.seed))
    except FitError as exc:
        note = Note(NoteKind.NOT_FITTED, f"laws of sparsity: not fitted: {' '.join(str(exc).split())}")
        return replace(analysis, notes=(*analysis.notes, note))


def data_key(key: str) -> str:
    """The part of a :func:`cache_key` that is the data's, not the settings'."""
    return key.rsplit("-", 1)[0] + "-"


def _fit(data: FitData, settings: Settings, *, task_data: Optional["TaskData"] = None, sweep: Optional[str] = None,
         notes: Optional[list[Note]] = None, curves: Optional[CurveLaw] = None) -> Analysis:
    """Every part fitted to ``data`` (a sweep's ``curves`` fitted already), then the recommendation and the
    runs worth adding."""
    source = f"sweep {sweep!r}" if sweep is not None else (data.source or "data")
    laws, skipped = _fit_laws(data, settings)
    hparams = hparam_fit(data, settings.n_bootstrap, settings.seed)
    if not laws and hparams is None:  # hyperparameter groups alone are still an answer
        raise FitError(("" if sweep is None else f"sweep {sweep!r}: ") + "no law could be fitted: "
                       + "; ".join(f"{KINDS[k][1]}: {r}" for k, r in skipped.items()))
    all_notes = [as_note(n, NoteKind.DATA) for n in data.notes] + list(notes or [])
    tasks = _fit_tasks(task_data, settings, sweep, all_notes)
    analysis = Analysis(source=source, fingerprint=data.fingerprint(), n_points=len(data.points), settings=settings,
                        conventions=Conventions.of(data),
                        laws=laws, skipped=skipped, hparams=hparams, tasks=tasks, sweep=sweep,
                        notes=tuple(all_notes), warnings=tuple(data.warnings), curves=curves)
    try:
        rec = recommend(analysis)
    except UserError as exc:
        return replace(analysis, no_recommendation=" ".join(str(exc).split()))
    if data.predicted_note:  # the closing answer says it too: the laws rest partly on predicted losses
        rec.notes.append(as_note(data.predicted_note, NoteKind.DATA))
    if settings.next_runs:
        rec.next_runs, note = next_runs_for(analysis, rec.compute, settings.seed, settings.n_bootstrap)
        if note is not None:
            rec.notes.append(note)
    return replace(analysis, recommendation=rec)


def _stored_curves(d: object) -> Optional[CurveLaw]:
    """A stored analysis' curve laws read back (None where it has none)."""
    if not isinstance(d, Mapping):
        return None
    from scaling.fitting.curves.sweep import SweepCurves

    return SweepCurves.from_dict(dict(d))


def _fit_laws(data: FitData, settings: Settings) -> tuple[dict[str, Law], dict[str, str]]:
    kinds = LAW_CHOICES[settings.law]
    laws: dict[str, Law] = {}
    skipped: dict[str, str] = {}
    for kind in kinds:
        try:
            laws[kind] = fit_one(kind, data, settings.n_bootstrap, settings.seed, {}, True)
        except FitError as exc:
            if len(kinds) == 1:
                raise
            skipped[kind] = " ".join(str(exc).split())
    return laws, skipped


def _fit_tasks(task_data: Optional["TaskData"], settings: Settings, sweep: Optional[str],
               notes: list[Note]) -> Optional["TaskFits"]:
    """The task laws (a sweep's failure is a note unless tasks were named; a CSV's propagates)."""
    if task_data is None:
        return None
    from scaling.fitting.tasks.task_laws import TaskFits, fit_tasks

    names = settings.task_names
    if not task_data.tasks():
        return fit_tasks(task_data, tasks=names)  # nothing evaluated: nothing to fit
    try:
        return fit_tasks(task_data, tasks=names, n_bootstrap=settings.n_bootstrap, seed=settings.seed,
                         recipe=settings.task_recipe)
    except UserError as exc:
        if names or sweep is None:
            raise
        notes.append(Note(NoteKind.NOT_FITTED, f"downstream tasks: not fitted: {' '.join(str(exc).split())}"))
        return TaskFits(source=f"sweep {sweep!r}")


# -- the older names: the analysis of a sweep or a CSV with its settings as arguments ---------------
def fit_csv(path: str, law: str = "all", n_bootstrap: int = 200, seed: int = 0, *,
            flops_convention: str = "6N", unique_tokens: float | None = None, hparams: str = "tuned") -> Analysis:
    """The :class:`~scaling.fitting.analysis.Analysis` of a CSV of anyone's measurements (column aliases in
    :data:`scaling.fitting.core.measurements.ALIASES`)."""
    return analyse(CsvSource(str(path), flops_convention=flops_convention, unique_tokens=unique_tokens),
                   Settings(law=law, n_bootstrap=n_bootstrap, seed=seed, hparams=hparams))


def fit_sweep(url: str, sweep: str | None = None, law: str = "all", n_bootstrap: int = 200, seed: int = 0,
              effective_data: bool = False, save: bool = True, *, r_star: float = R_STAR_DATA,
              fit_r_star: bool = False, r_star_n: float | None = None, fit_r_star_n: bool = False,
              hparams: str = "tuned", tasks: bool | list[str] = True, task_recipe: str = "grid",
              next_runs: bool = True) -> Analysis:
    """The :class:`~scaling.fitting.analysis.Analysis` of a sweep (stored, or read back when the sweep's data
    and these settings are unchanged), with :func:`scaling.fitting.analysis.analyse`'s settings as arguments."""
    settings = Settings(law=law, n_bootstrap=n_bootstrap, seed=seed, effective_data=effective_data, r_star=r_star,
                        fit_r_star=fit_r_star, r_star_n=r_star_n, fit_r_star_n=fit_r_star_n, hparams=hparams,
                        tasks=tasks if isinstance(tasks, bool) else tuple(tasks), task_recipe=task_recipe,
                        next_runs=next_runs)
    return analyse(SweepSource(url, sweep), settings, save=save)
