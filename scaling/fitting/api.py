"""Fit every law to a sweep or a CSV, store and reuse fits, and summarise them.

``fit_sweep`` is what ``scaling fit`` and the end of ``scaling sweep`` call. A stored fit is
reused when the sweep's data (the averaged points and curves, :meth:`FitData.fingerprint`) and
the fit's configuration (law, settings, bootstrap size and seed, :data:`FIT_VERSION`) are the same.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from dataclasses import dataclass, field
from typing import Any

from scaling.errors import FitError, UserError
from scaling.fmt import num
from scaling.fitting.backtest import backtest
from scaling.fitting.base import Law, jsonable
from scaling.fitting.data import R_STAR_DATA, FitData, from_csv, from_db
from scaling.fitting.envelope import ChinchillaEnvelope
from scaling.fitting.hparams import MODES, HparamFit, fit_hparams
from scaling.fitting.isoflop import ChinchillaIsoFLOP
from scaling.fitting.kaplan import KaplanLaw
from scaling.fitting.parametric import ChinchillaParametric

#: Bumped when a change to the fitting code should invalidate stored fits.
FIT_VERSION = 3

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
    """The outcome of fitting one data set: the fitted laws, what was skipped and why, what was reused."""

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
    #: Each hyperparameter group's optimum and the lr / batch laws (scaling.fitting.hparams), when the data have groups.
    hparams: HparamFit | None = None

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
        from rich.console import Console
        from rich.table import Table

        buf = io.StringIO()
        console = Console(file=buf, width=110, force_terminal=False, force_jupyter=False, color_system=None,
                          markup=False)  # file names and columns are the user's text, not markup
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
        return buf.getvalue().rstrip() + "\n" + hparams


def se_text(iv: dict[str, Any]) -> str:
    """The SE cell: on the fitted scale (``(ln)`` for a log-fitted quantity); '-' where none is honest."""
    se_log = iv.get("se_log")
    if se_log is not None and math.isfinite(se_log):
        return f"{se_log:.3g} (ln)"
    return _num(iv.get("se"))


def interval_text(iv: dict[str, Any]) -> str:
    """The interval cell: the 95% percentile interval, or what stands in its place (pinned, biased, no spread,
    unreliable law)."""
    kind = iv.get("kind")
    if kind == "pinned":
        return f"pinned: {iv.get('pinned')}"
    if kind == "biased":
        return f"none: bootstrap biased (estimate at the {100 * iv.get('quantile', math.nan):.3g}% point of its replicates)"
    if kind == "no spread":
        return "none: replicates do not vary"
    if kind == "unreliable":
        return "none: law unreliable"
    lo, hi = iv.get("lo"), iv.get("hi")
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return "-"
    return f"[{_num(lo)}, {_num(hi)}]"


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
    """Fit a CSV of anyone's measurements (column aliases in :data:`scaling.fitting.data.ALIASES`)."""
    return fit_data(from_csv(path, flops_convention=flops_convention, unique_tokens=unique_tokens, hparams=hparams),
                    law, n_bootstrap, seed)


def _config_hash(law: Law, n_bootstrap: int, seed: int) -> str:
    cfg = {"class": type(law).__name__, "settings": law.get_settings(), "n_bootstrap": n_bootstrap, "seed": seed,
           "version": FIT_VERSION}
    return hashlib.sha256(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:12]


def fit_sweep(url: str, sweep: str | None = None, law: str = "all", n_bootstrap: int = 200, seed: int = 0,
              effective_data: bool = False, save: bool = True, *, r_star: float = R_STAR_DATA,
              fit_r_star: bool = False, r_star_n: float | None = None, fit_r_star_n: bool = False,
              hparams: str = "tuned") -> FitSummary:
    """Fit a sweep's completed runs, store each fit with its data fingerprint, reuse unchanged ones.

    ``save=False`` reuses stored fits but stores none of the new ones (a report that was not
    asked to write to the database).

    ``effective_data``: fit on Muennighoff et al.'s D' from the runs' unique tokens, with R*_D =
    ``r_star`` or estimated (``fit_r_star``), and excess parameters N' with R*_N = ``r_star_n`` or
    estimated (``fit_r_star_n``), as :func:`scaling.fitting.effective.fit_effective` does for a CSV.
    The R*s found are part of the data's conventions, so of the fingerprint.

    The stored fingerprint is ``<data fingerprint>-<configuration hash>``: the same data fitted
    with other settings, bootstrap size or seed is a different fit.

    ``hparams``: a sweep with hyperparameter groups has its loss laws fitted on each group's tuned
    loss (``tuned``) or on the setting at its grid's centre (``fixed``); the groups' optima and the
    lr / batch laws are in ``summary.hparams`` (fitted each time: they take well under a second).
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
        from scaling.fitting.effective import fit_effective

        data = fit_effective(data, fit_d=fit_r_star, r_star_n=r_star_n, fit_n=fit_r_star_n)
    data_fp = data.fingerprint()
    summary = FitSummary(source=f"sweep {sweep!r}", fingerprint=data_fp, n_points=len(data.points),
                         conventions=data.conventions() | {"flops_per_param_token": data.flops_per_param_token},
                         sweep=sweep, notes=list(data.notes))
    store, stored_fits = Store(url), connect(url)
    try:
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
    summary.hparams = hparam_fit(data, n_bootstrap, seed)
    if not summary.laws and summary.hparams is None:  # hyperparameter groups alone are still an answer
        raise FitError(f"sweep {sweep!r}: no law could be fitted: "
                       + "; ".join(f"{KINDS[k][1]}: {r}" for k, r in summary.skipped.items()))
    return summary
