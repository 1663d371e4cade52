"""Everything one report shows, read once from the database's read API.

The figures take plain DataFrames and fitted laws, so a notebook can call them on its own
frames; :class:`ReportData` is what the HTML report gathers for them: a sweep's runs, its loss
curves (already thinned for display), its events, per-run throughput, and its fits redrawn from
their stored form. Whatever cannot be had (no completed runs, a fit that fails) becomes a line in
``notes`` instead of an exception, so a broken sweep still gets a report that says what is missing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Collection, Optional

import numpy as np
import pandas as pd

from scaling import vocab as names
from scaling.db import connect
from scaling.db.jsonvalues import as_dict
from scaling.errors import NotFoundError, UserError, mask_url
from scaling.fitting import KINDS, Law
from scaling.fitting.analysis import Settings
from scaling.fitting.core.base import unavailable_note
from scaling.quantities import possible_losses
from scaling.reports.downsample import downsample_frame
from scaling.reports.fitview import LABELS

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    from scaling.db.results import Results
    from scaling.fitting.analysis import Analysis
    from scaling.fitting.recommend import Recommendation

#: a run's ``role`` (column of :func:`normalise_runs`): a cooldown branch's parent, or a branch
TRUNK = "trunk"
BRANCH = "branch"

#: points kept per curve for display (log-spaced, minimum kept)
CURVE_POINTS = 150

RUN_COLUMNS = (
    "run_key", "sweep", "N", "N_total", "D", "C", "status", "final_loss", "final_train_loss",
    "n_layer", "d_model", "n_head", "seed", "attempts", "error", "spec", "host", "parent_key", "trunk_tokens",
)


@dataclass
class ReportData:
    """What a report shows; build it with :meth:`load` (database) or directly from frames."""

    sweep: str | None
    runs: pd.DataFrame
    curves: pd.DataFrame = field(default_factory=pd.DataFrame)  # run_key, step, tokens, flops, name, value
    events: pd.DataFrame = field(default_factory=pd.DataFrame)  # run_key, step, kind, detail
    perf: pd.DataFrame = field(default_factory=pd.DataFrame)  # index run_key; tokens_per_s, mfu (means)
    fits: dict[str, Any] = field(default_factory=dict)  # method -> fitted law (from_dict)
    fit_dicts: dict[str, dict] = field(default_factory=dict)  # method -> stored form
    sweep_info: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what is missing, in words
    source: str = ""  # the database URL, masked
    #: The sweep's fits when they were handed in (an :class:`~scaling.fitting.analysis.Analysis`): its hyperparameter
    #: and task laws are shown as fitted there instead of being fitted for the report.
    sweep_fit: Optional[Analysis] = None
    #: The recommendation sized by the plan, handed in with the analysis: the headline.
    recommendation: Optional[Recommendation] = None
    #: The plan that trains the recommendation's run (YAML, handed in with it), where a reliable law recommends it.
    next_plan: Optional[str] = None

    def __post_init__(self) -> None:
        self.runs = normalise_runs(self.runs)

    # -- loading ---------------------------------------------------------------------------
    @classmethod
    def load(cls, url: str, sweep: str | None = None, *, fit: str = "sweep", store_fits: bool = False,
             curve_points: int = CURVE_POINTS, sweep_fit: Optional[Analysis] = None,
             recommendation: Optional[Recommendation] = None,
             next_plan: Optional[str] = None) -> "ReportData":
        """Read ``sweep`` (default: the latest) from the database at ``url``.

        ``fit`` and ``store_fits`` say where the laws come from and whether new fits are stored
        (see :func:`load_fits`); by default nothing is written to the database. ``sweep_fit``: the
        sweep's fits already made (then ``fit`` is not used and nothing is fitted).
        """
        results = connect(url)
        if sweep is None:
            sweep = results.latest_sweep()
            if sweep is None:
                raise NotFoundError(f"no sweeps in the database at {mask_url(url)}")
        sweeps = results.sweeps()
        if sweep not in set(sweeps["sweep"].astype(str)):
            raise NotFoundError(f"no sweep named {sweep!r} in the database at {mask_url(url)}")
        info = {k: _plain(v) for k, v in results.sweep_info(sweep).items()}
        runs, impossible = possible_losses(results.runs(sweep=sweep), ("final_loss", "final_train_loss"))
        data = cls(sweep=sweep, runs=runs, sweep_info=info, source=mask_url(url))
        if impossible:
            data.notes.append(f"Not drawn: {impossible}.")
        if len(data.runs):
            loss = results.metrics(sweep=sweep, names=[names.TRAIN_LOSS, names.EVAL_LOSS])
            data.curves = thin_curves(loss, curve_points)
            del loss
            # one GROUP BY instead of every step's row
            data.perf = summarise_perf(results.metric_summary(sweep=sweep, names=[names.TOKENS_PER_SECOND, names.MFU]))
            data.events = results.events(sweep=sweep)
        else:
            data.notes.append("The sweep has no runs yet.")
        data.recommendation, data.next_plan = recommendation, next_plan
        if sweep_fit is not None:
            data.sweep_fit = sweep_fit
            data.fits, data.fit_dicts, fit_notes = analysis_fits(sweep_fit)
        else:
            made: dict[str, Any] = {}
            data.fits, data.fit_dicts, fit_notes = load_fits(results, url, sweep, fit=fit, store_fits=store_fits,
                                                             made=made)
            data.sweep_fit = made.get("sweep_fit")
        data.notes.extend(fit_notes)
        return data

    # -- derived views ------------------------------------------------------------------------
    def recommendation_at(self, target: float) -> Optional[Recommendation]:
        """The recommendation at ``target``: the one handed in (sized by the plan: the closing answer's), or the
        analysis' own at its budget; None when neither is at ``target`` (no analysis, or no law gives N*).
        The report reads the analysis' answer and compares no laws of its own."""
        if self.recommendation is not None and self.recommendation.compute == target:
            return self.recommendation
        own = self.sweep_fit.recommendation if self.sweep_fit is not None else None
        if own is None or own.compute != target:
            return None
        # Its run is sized by fitting's defaults, not by the sweep's plan: only the orchestrator sizes the run
        # to train (handed in as ``recommendation``), so the page shows none rather than another run.
        return replace(own, run=None)

    @property
    def completed(self) -> pd.DataFrame:
        """Runs that finished with a finite final loss (the points the fits use; no trunks)."""
        r = self.runs
        ok = (r["status"] == "completed") & np.isfinite(r["final_loss"].astype(float)) & (r["role"] != TRUNK)
        return r[ok]

    def status_counts(self) -> dict[str, int]:
        return {str(k): int(v) for k, v in self.runs["status"].value_counts().items()}

    def event_counts(self) -> pd.DataFrame:
        """Per run: loss spikes, rollbacks, retries (events), indexed by run_key."""
        kinds = [names.LOSS_SPIKE, names.ROLLBACK, names.RETRY, names.RESUME, names.OVERFLOW_SKIP]
        ev = self.events
        if ev is None or ev.empty or "kind" not in ev.columns:
            return pd.DataFrame(0, index=self.runs["run_key"], columns=kinds)
        table = pd.crosstab(ev["run_key"], ev["kind"]).reindex(columns=kinds, fill_value=0)
        return table.reindex(self.runs["run_key"], fill_value=0)


# -- helpers (public so notebooks and tests can use them on their own frames) ------------------
def normalise_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs with every column the report reads, numeric where numbers are expected.

    Adds ``tokens_per_param`` (D/N), ``shape`` ("L×d×h"), ``name`` and ``tags`` (from the spec),
    and ``role``: ``trunk`` (a cooldown branch's parent), ``branch`` or "" (trained from scratch).
    """
    r = runs.copy()
    for col in RUN_COLUMNS:
        if col not in r.columns:
            r[col] = None
    for col in ("N", "N_total", "D", "C", "final_loss", "final_train_loss", "attempts"):
        r[col] = pd.to_numeric(r[col], errors="coerce").astype(float)
    r["status"] = r["status"].fillna("unknown").astype(str)
    r["run_key"] = r["run_key"].astype(str)
    r["tokens_per_param"] = r["D"] / r["N"]
    parents = set(r["parent_key"].dropna().astype(str))
    r["role"] = [TRUNK if k in parents else BRANCH if isinstance(p, str) and p else ""
                 for k, p in zip(r["run_key"], r["parent_key"])]
    r["shape"] = [
        f"{int(l)}×{int(d)}×{int(h)}" if _finite(l) and _finite(d) and _finite(h) else ""
        for l, d, h in zip(
            pd.to_numeric(r["n_layer"], errors="coerce"),
            pd.to_numeric(r["d_model"], errors="coerce"),
            pd.to_numeric(r["n_head"], errors="coerce"),
        )
    ]
    specs = [as_dict(s) for s in r["spec"]]
    r["name"] = [str(s.get("name") or "") for s in specs]
    r["tags"] = [
        ", ".join(f"{k}={v}" for k, v in (s.get("tags") or {}).items()) if isinstance(s.get("tags"), dict) else ""
        for s in specs
    ]
    return r.sort_values(["N", "D"], kind="stable").reset_index(drop=True)


def thin_curves(metrics: pd.DataFrame, max_points: int = CURVE_POINTS) -> pd.DataFrame:
    """Loss curves thinned per (run, metric): log-spaced in tokens, each curve's minimum kept."""
    if metrics is None or metrics.empty:
        return pd.DataFrame(columns=["run_key", "step", "tokens", "flops", "name", "value"])
    m = metrics[["run_key", "step", "tokens", "flops", "name", "value"]].copy()
    for col in ("tokens", "flops", "value"):
        m[col] = pd.to_numeric(m[col], errors="coerce").astype(float)
    return downsample_frame(m, ["run_key", "name"], x="tokens", y="value", max_points=max_points)


def summarise_perf(rows: pd.DataFrame) -> pd.DataFrame:
    """Mean tokens/s and MFU per run, indexed by run_key.

    ``rows`` are ``Results.metric_summary`` rows (run_key, name, mean) or raw metric rows
    (run_key, name, value), as ``Results.metrics`` returns them; both give the same means.
    """
    cols = ["tokens_per_s", "mfu"]
    if rows is None or rows.empty:
        return pd.DataFrame(columns=cols)
    value = "mean" if "mean" in rows.columns else "value"
    if value == "mean" and "count" in rows.columns:  # several summary rows of one run: weight by count
        weighted = rows.assign(total=rows["mean"] * rows["count"])
        sums = weighted.groupby(["run_key", "name"])[["total", "count"]].sum()
        means = (sums["total"] / sums["count"]).unstack("name")
    else:
        means = rows.groupby(["run_key", "name"])[value].mean().unstack("name")
    out = pd.DataFrame(index=means.index)
    out["tokens_per_s"] = means.get(names.TOKENS_PER_SECOND)
    out["mfu"] = means.get(names.MFU)
    return out


# -- fits ----------------------------------------------------------------------------------------
#: where a report's analysis comes from (:func:`scaling.fitting.analyse` in every mode): as ``scaling fit``
#: makes it (a stored analysis of unchanged data reused), only the stored one, or made quickly and not stored
FIT_MODES = ("sweep", "stored", "memory")
#: bootstrap replicates when the report fits in memory (a band needs a few dozen, not a thousand)
REPORT_BOOTSTRAP = 100
#: settings of an analysis made only for a report (``memory``): fewer replicates, no runs worth adding ranked
REPORT_ANALYSIS = Settings(n_bootstrap=REPORT_BOOTSTRAP, next_runs=False)


def load_fits(results: Results, url: str, sweep: str, *, fit: str = "sweep", store_fits: bool = False,
              made: dict[str, Any] | None = None) -> tuple[dict[str, Law], dict[str, dict], list[str]]:
    """The fitted laws of ``sweep``, in report order, and notes on what could not be fitted.

    ``fit``: ``"sweep"`` analyses the sweep as :func:`scaling.fitting.analyse` does (an analysis stored
    for the same data is reused); ``"stored"`` only reads the newest stored analysis; ``"memory"``
    analyses it quickly (:data:`REPORT_ANALYSIS`), storing nothing. New fits are stored only with
    ``store_fits=True`` (``fit="sweep"`` only): a report writes nothing to the database unless asked.
    Returns (kind -> law, kind -> stored dict, notes). Never raises for a fit that cannot be made:
    the reason becomes a note that the report prints. ``made``: receives the sweep's whole fit
    (``sweep_fit``: loss, hyperparameter and task laws) when ``fit="sweep"`` made one.
    """
    if fit not in FIT_MODES:
        raise ValueError(f"fit must be one of {FIT_MODES}, not {fit!r}")
    if store_fits and fit != "sweep":
        raise ValueError(f"store_fits needs fit='sweep' (fit={fit!r} makes nothing to store)")
    laws: dict[str, Law] = {}
    dicts: dict[str, dict] = {}
    notes: list[str] = []
    skipped: dict[str, str] = {}
    if fit == "sweep":
        laws, notes, skipped = _fit_sweep(url, sweep, store_fits, made if made is not None else {})
    elif fit == "memory":
        laws, notes, skipped = _fit_sweep(url, sweep, False, made if made is not None else {}, REPORT_ANALYSIS)
        notes = [f"These fits were made for this report only ({REPORT_BOOTSTRAP} bootstrap replicates); "
                 "`scaling fit` fits and stores them in full.", *notes] if laws else notes
    if not laws:  # nothing fitted now: show what is stored, saying so
        laws, dicts = stored_fits(results, sweep)
        if made is not None and fit == "stored":
            made["sweep_fit"] = _stored_sweep_fit(results, sweep, laws)
        if laws and fit != "stored":
            notes.append("Showing the fits stored earlier for this sweep; its current data could not be fitted.")
        elif not laws and fit == "stored":
            notes.append("No fits are stored for this sweep (run `scaling fit`).")
        elif fit == "stored":
            notes.extend(stale_note(results, url, sweep))
    return _ordered_fits(laws, notes, dicts, skipped=skipped if laws else {})


def analysis_fits(analysis: Analysis) -> tuple[dict[str, Law], dict[str, dict], list[str]]:
    """An analysis' loss laws in report order, and its notes as the report lists them (what is not fitted,
    each law's doubts), as :func:`load_fits` returns them."""
    return _ordered_fits(dict(analysis.laws), _summary_notes(analysis), skipped=analysis.skipped)


def _ordered_fits(laws: dict[str, Law], notes: list[str], dicts: dict[str, dict] | None = None, *,
                  skipped: Collection[str] = ()) -> tuple[dict[str, Law], dict[str, dict], list[str]]:
    """The laws in report order, with a note for each kind not fitted (``skipped``: those whose reason is
    among the notes already) and each law's doubts."""
    notes = list(notes)
    dicts = dict(dicts or {})
    for kind in KINDS:
        if kind not in laws and kind not in skipped:
            notes.append(f"{LABELS[kind]}: not fitted.")
    ordered = {k: laws[k] for k in KINDS if k in laws}
    for kind, law in ordered.items():  # a fit the data cannot pin down, or without intervals, says so
        unavailable = unavailable_note((law.bootstrap_info_ or {}).get("unavailable"))
        doubts = law.doubts() + ([unavailable] if unavailable else [])
        notes.extend(f"{LABELS[kind]}: {n}" for n in doubts)
    return ordered, dicts, notes


def _stored_sweep_fit(results: Results, sweep: str, laws: dict[str, Law]) -> Optional[Analysis]:
    """The newest stored analysis of the sweep (None where none is stored or it cannot be read)."""
    return newest_analysis(results, sweep)


def newest_analysis(results: Results, sweep: str) -> Optional[Analysis]:
    """The sweep's newest stored :class:`~scaling.fitting.analysis.Analysis`, or None (none, or unreadable)."""
    newest = _newest_stored(results, sweep)
    return None if newest is None else newest[0]


def _newest_stored(results: Results, sweep: str) -> Optional[tuple[Analysis, str]]:
    """The sweep's newest readable stored analysis and the key it is stored under (None: none)."""
    from scaling.fitting.analysis import ANALYSIS_KEY, Analysis

    rows = results.fits(sweep=sweep, law=ANALYSIS_KEY[0], method=ANALYSIS_KEY[1])
    for d, key in reversed(list(zip(rows["result"], rows["fingerprint"]))):
        try:
            return Analysis.from_json(as_dict(d)), str(key)
        except (UserError, KeyError, TypeError, ValueError, AttributeError):
            continue
    return None


def stale_note(results: Results, url: str, sweep: str) -> list[str]:
    """One note where the sweep's newest stored analysis was not made from its current runs (none where it
    was, or none is stored): its data's key is recomputed with the stored analysis' settings, reading the
    sweep and fitting nothing (:func:`scaling.fitting.analysis.sweep_key`)."""
    from scaling.fitting.analysis import data_key, sweep_key

    newest = _newest_stored(results, sweep)
    if newest is None:
        return []
    analysis, stored_key = newest
    try:
        key, n_runs = sweep_key(url, sweep, analysis.settings)
    except UserError as exc:
        return [f"The stored analysis shown could not be checked against the sweep's current runs "
                f"({_one_line(exc)}): run `scaling fit`."]
    if data_key(key) == data_key(stored_key):
        return []
    then = "an unrecorded number of" if analysis.n_runs is None else str(analysis.n_runs)
    return [f"The stored analysis shown was made from {then} completed runs; the sweep's runs have changed since "
            f"(it has {n_runs} completed runs now): run `scaling fit` to analyse its current runs."]


def stored_fits(results: Results, sweep: str) -> tuple[dict[str, Law], dict[str, dict]]:
    """The loss laws of the newest stored analysis, as laws and as stored (nothing: none stored)."""
    analysis = newest_analysis(results, sweep)
    if analysis is None:
        return {}, {}
    return dict(analysis.laws), {kind: law.to_dict() for kind, law in analysis.laws.items()}


def _fit_sweep(url: str, sweep: str, store: bool, made: dict[str, Any],
               settings: Optional[Settings] = None) -> tuple[dict[str, Law], list[str], dict[str, str]]:
    """:func:`scaling.fitting.analyse` (a stored analysis of the same data reused), storing a new one only
    when ``store``; failures become notes. The whole analysis goes to ``made["sweep_fit"]``."""
    from scaling.fitting import SweepSource, analyse

    try:
        summary = analyse(SweepSource(url, sweep), settings, save=store)  # the stored analysis of these data, else made
    except UserError as exc:
        return {}, [f"No law could be fitted: {_one_line(exc)}"], {}
    made["sweep_fit"] = summary
    return dict(summary.laws), _summary_notes(summary), dict(summary.skipped)


def _summary_notes(summary: Analysis) -> list[str]:
    """A sweep fit's notes and the laws it could not fit, as the report lists them."""
    return list(summary.notes) + [f"{LABELS[kind]}: not fitted: {reason}" for kind, reason in summary.skipped.items()]


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _finite(x: object) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def _plain(v: object) -> object:
    if isinstance(v, (np.generic,)):
        return v.item()
    if isinstance(v, pd.Timestamp):
        return v.isoformat()
    return v
