"""What every law shares: the scikit-learn estimator contract, bootstrap intervals, (de)serialisation.

A law keeps its fitted parameters in ``params_`` (a dict of floats) and, after
:meth:`Law.bootstrap`, one row of the same parameters per bootstrap replicate in
``replicates_``. Every prediction is a pure function of a parameter dict (``_predict``,
``_optimal``, ``_derived``), so an interval at any budget is the same function evaluated on the
replicate rows: nothing but the parameters needs storing to redraw a fit later.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, ClassVar, Iterator

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from scaling.accounting import FLOPS_PER_PARAM_TOKEN
from scaling.errors import FitError
from scaling.fmt import Interval, bounds
from scaling.fitting.core.conventions import Conventions
from scaling.fitting.core.measurements import FitData, from_frame
from scaling.fitting.core.doubts import Doubtful, DoubtKind, relink, restore, stored
from scaling.fitting.core.intervals import LEVEL, orders_of_magnitude, summarise, widen_log, withheld

#: Below this fraction of successful bootstrap replicates, intervals are reported unavailable (NaN).
MIN_OK_FRACTION = 0.5
#: Fewer distinct successful replicates than this (or a tenth of them) is a degenerate bootstrap.
MIN_DISTINCT = 5
#: A positive parameter whose 95% interval spans more decades than this is not determined by the data.
MAX_DECADES = 2.0
#: An exponent whose 95% interval spans more than this factor (hi / lo) is not determined by the data.
MAX_EXPONENT_RATIO = 10.0
#: 95% half-width per unit of mean absolute error: 1.96 * sqrt(pi / 2).
EXTRAPOLATION_Z = 1.96 * math.sqrt(math.pi / 2)
#: How the reason that the data do not determine a parameter begins (it is rewritten by each bootstrap).
UNDETERMINED = "the data do not determine"
#: Fewer points than this many per fitted parameter leave too few residual degrees of freedom to
#: test a law or measure its error: a fit of 5 parameters to 6 points reproduces almost any data.
MIN_POINTS_PER_PARAM = 2
#: Fewer FLOP budgets than this leave a law across budgets no residual to measure its error by.
MIN_BUDGETS = 3
#: Budgets spanning less than this factor in compute cannot measure how a law changes with it.
MIN_C_SPAN = 3.0
#: A budget more than this factor outside the measured ones is refused: a power law fitted there
#: says nothing that far away (Chinchilla extrapolated about 500x; frontier labs 1e3-1e4x).
MAX_EXTRAPOLATION = 1e6

__all__ = ["LEVEL", "Law", "NotFittedError", "Params", "fit_line", "summarise"]


def coverage_reasons(n_budgets: int, C: np.ndarray, why_few: str) -> list[str]:
    """Why FLOP budgets this few, or this close together, cannot show how a law scales with compute.

    Shared by every law fitted across budgets, so that all of them judge coverage alike;
    ``why_few`` says what too few budgets cost the law in question.
    """
    C = np.asarray(C, float)
    reasons = []
    if 0 < n_budgets < MIN_BUDGETS:
        reasons.append(f"only {n_budgets} FLOP budget(s) (fewer than {MIN_BUDGETS}: {why_few})")
    if C.size and float(C.max() / C.min()) < MIN_C_SPAN:
        reasons.append(f"the FLOP values span only a factor {float(C.max() / C.min()):.3g} (less than {MIN_C_SPAN:g})")
    return reasons


#: What numpy, scipy and float arithmetic raise when data defeat a computation (a singular or
#: non-converging least-squares problem, an overflow, a domain error): the data's fault, not a bug.
NUMERICAL_FAILURES = (np.linalg.LinAlgError, FloatingPointError, ZeroDivisionError, OverflowError, ValueError)


@contextmanager
def numerical_failure_is_fit_error(what: str) -> Iterator[None]:
    """Turn a numerical failure inside ``what`` into a :class:`FitError` naming it, so it is skipped
    with its reason like any other fit the data cannot support, never a traceback."""
    try:
        yield
    except NUMERICAL_FAILURES as exc:
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise FitError(f"{what} failed numerically on these data ({detail})") from exc


class NotFittedError(RuntimeError):
    """A law used before ``fit`` (a programming error, not a user error)."""


Params = dict[str, Any]  # name -> float, or an array of replicates (broadcasts)


def fit_line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares slope and intercept of y on x (a power law fitted in log-log space)."""
    x = np.asarray(x, float)
    y = np.asarray(y, float)
    xm, ym = x.mean(), y.mean()
    sxx = np.sum((x - xm) ** 2)
    if sxx <= 0:
        raise FitError("a power law needs at least two distinct values of its variable")
    slope = float(np.sum((x - xm) * (y - ym)) / sxx)
    return slope, float(ym - slope * xm)


def unavailable_note(why: str | None) -> str | None:
    """The note saying why a bootstrap gives no intervals (None when it does)."""
    return f"intervals unavailable: {why}" if why else None


class Law(Doubtful):
    """Base class: subclasses define ``law``, ``method``, ``param_names`` and the pure functions.

    Its doubts (:class:`~scaling.fitting.core.doubts.Doubt`, typed) decide :meth:`reliable`; their
    messages read among its ``notes_``."""

    law: ClassVar[str] = ""
    method: ClassVar[str] = ""
    param_names: ClassVar[tuple[str, ...]] = ()
    #: Derived quantities reported with intervals (exponents, ratios), from ``_derived``.
    derived_names: ClassVar[tuple[str, ...]] = ()
    #: Positive quantities fitted on a log scale: SE reported for their log, spread judged in decades.
    log_names: ClassVar[tuple[str, ...]] = ()
    #: Positive parameters of the law itself (not intercepts extrapolated to C = 1) judged by decades spanned.
    scale_names: ClassVar[tuple[str, ...]] = ()
    #: Exponents judged by the ratio of their interval's ends.
    exponent_names: ClassVar[tuple[str, ...]] = ()

    # -- fitted state: written by fit(), bootstrap(), keep_backtest() and restore() only; these
    # defaults are an unfitted law's (check_fitted() refuses one without parameters)
    params_: Params | None = None
    k_: float = FLOPS_PER_PARAM_TOKEN
    conventions_: Conventions = Conventions()
    n_points_: int = 0
    #: The data it was fitted to (None: restored without them).
    data_: FitData | None = None
    c_range_: tuple[float, float] | None = None
    #: Model-error rates per unit ln C beyond the fitted budgets, from the backtest (None: no backtest).
    extrapolation_: dict[str, float] | None = None
    pinned_: dict[str, str] = {}  # noqa: RUF012
    replicates_: np.ndarray | None = None
    bootstrap_info_: dict[str, Any] | None = None
    #: A restored fit's stored figure data.
    plot_: dict[str, Any] | None = None
    backtest_: dict[str, Any] | None = None
    residual_sd_: float = math.nan

    # -- the estimator contract ------------------------------------------------------------
    def get_settings(self) -> dict[str, Any]:
        """The ``__init__`` arguments (JSON-serialisable), as scikit-learn's get_params."""
        return {}

    def fit(self, data: FitData | pd.DataFrame) -> "Law":
        """Fit to ``data`` (a :class:`FitData` or a DataFrame with N, D or C, loss); returns self."""
        fd = as_fit_data(data)
        self.k_ = float(fd.flops_per_param_token)
        self.conventions_ = Conventions.of(fd)
        self.n_points_ = int(len(fd.points))
        C = fd.points["C"].to_numpy(float)
        self.c_range_ = (float(C.min()), float(C.max()))
        self.extrapolation_: dict[str, Any] | None = None
        self.pinned_: dict[str, str] = {}
        self.replicates_ = None
        self.bootstrap_info_ = None
        self.plot_ = None  # stored figure data belongs to a restored fit, not this one
        self.backtest_ = None
        self.notes_: list[str] = list(fd.notes)
        self.doubts_ = []
        with numerical_failure_is_fit_error(f"{self.law} {self.method}"):
            self._fit(fd)
        self.data_ = fd
        with np.errstate(all="ignore"):
            pts = fd.points
            r = np.log(self.predict(pts["N"].to_numpy(float), pts["D"].to_numpy(float)) / pts["loss"].to_numpy(float))
        r = r[np.isfinite(r)]
        self.residual_sd_ = float(np.sqrt(np.mean(r ** 2))) if r.size else math.nan
        return self

    def _fit(self, data: FitData) -> None:
        raise NotImplementedError

    def check_fitted(self) -> None:
        """Raise :class:`NotFittedError` unless :meth:`fit` (or :meth:`restore`) has set the parameters."""
        if self.params_ is None:
            raise NotFittedError(f"{type(self).__name__} is not fitted yet: call fit(df) first")

    def predict(self, N: ArrayLike, D: ArrayLike) -> np.ndarray:
        """Predicted loss of a model with N parameters trained on D tokens."""
        self.check_fitted()
        return self._predict(self.params_, np.asarray(N, float), np.asarray(D, float))

    def optimal(self, C: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(N*, D*, predicted loss) minimising loss at compute C (same FLOP convention as the fit)."""
        self.check_fitted()
        return self._optimal(self.params_, np.asarray(C, float))

    def bootstrap(self, n: int = 200, seed: int = 0) -> "Law":
        """Refit on ``n`` resamples of the points; stores ``replicates_`` (n x params); returns self."""
        self.check_fitted()
        if n < 2:
            raise FitError("the bootstrap needs at least 2 replicates")
        rng = np.random.default_rng(seed)
        with numerical_failure_is_fit_error(f"the bootstrap of {self.law} {self.method}"):
            reps = np.asarray(self._bootstrap(self.data_, int(n), rng), dtype=float)
        before = unavailable_note((self.bootstrap_info_ or {}).get("unavailable"))
        self.replicates_ = reps
        ok = np.isfinite(reps).all(axis=1)
        self.bootstrap_info_ = {"n": int(n), "seed": int(seed), "failed": int((~ok).sum())}
        self.notes_ = [n for n in self.notes_ if n != before]  # a rerun replaces it
        self.judge_replicates()
        return self

    def judge_replicates(self) -> None:
        """Say from ``replicates_`` whether they give intervals, and which parameters they leave undetermined
        (after the bootstrap, and again whenever the replicates are widened)."""
        before = unavailable_note((self.bootstrap_info_ or {}).get("unavailable"))
        self.notes_ = [n for n in self.notes_ if n != before]
        if self.bootstrap_info_ is not None:
            self.bootstrap_info_.pop("unavailable", None)
        why = self.bootstrap_unavailable()
        if why:
            if self.bootstrap_info_ is not None:
                self.bootstrap_info_["unavailable"] = why
            self.notes_.append(unavailable_note(why))
        self.drop_doubts(DoubtKind.UNDETERMINED)
        reasons = self.undetermined()
        if reasons:
            self.add_unreliable(DoubtKind.UNDETERMINED, f"{UNDETERMINED} {'; '.join(reasons)}",
                                ": do not trust this law's parameters or what it extrapolates")

    def undetermined(self) -> list[str]:
        """Which parameters the bootstrap shows the data do not determine, and why.

        A positive parameter (fitted as a log) whose 95% interval spans more than
        :data:`MAX_DECADES` orders of magnitude, or an exponent whose interval spans more than a
        factor :data:`MAX_EXPONENT_RATIO`, is not a measurement, whatever its point estimate.
        Intercepts at C = 1 FLOP (kN, G) are not judged: a small, honest uncertainty in an
        exponent moves them by decades without making the law's predictions in range any worse.
        """
        out = []
        if self.replicates_ is not None and len(self.replicates_):
            n = len(self.replicates_)
            ok = int(np.isfinite(np.asarray(self.replicates_, float)).all(axis=1).sum())
            if ok < MIN_OK_FRACTION * n:
                out.append(f"the law at all (only {ok} of {n} bootstrap resamples of the points could be refitted)")
        for name, iv in self.intervals().items():
            if name in self.scale_names:
                dec = orders_of_magnitude(iv)
                if dec > MAX_DECADES:
                    out.append(f"{name} (its 95% bootstrap interval {bounds(iv.lo, iv.hi)} spans "
                               f"{dec:.2g} orders of magnitude)")
            elif name in self.exponent_names:
                lo, hi = iv.lo, iv.hi
                if lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi) and lo > 0 \
                        and hi / lo > MAX_EXPONENT_RATIO:
                    out.append(f"{name} (its 95% bootstrap interval {bounds(lo, hi)} spans a factor "
                               f"{hi / lo:.3g})")
        return out

    def _check_points(self, n_points: int, n_params: int, what: str) -> None:
        """Note a law fitted with fewer than :data:`MIN_POINTS_PER_PARAM` points per parameter as unreliable."""
        if n_points < MIN_POINTS_PER_PARAM * n_params:
            self.add_unreliable(DoubtKind.FEW_POINTS, f"{n_points} points for the {n_params} parameters of {what} leave "
                               f"{n_points - n_params} residual degree(s) of freedom (fewer than {MIN_POINTS_PER_PARAM} "
                               "points per parameter): too few to test the law or measure its error")

    def pinned(self) -> dict[str, str]:
        """Parameters sitting at a bound of the fit, with the bound (reported as pinned, no interval).

        Set by each law's ``_fit`` in ``pinned_`` and stored with the fit.
        """
        return dict(self.pinned_)

    def bootstrap_unavailable(self) -> str | None:
        """Why the replicates cannot give honest intervals (None when they can).

        A percentile interval from a few surviving replicates, or from replicates that are all
        the same refit, is not an interval: it would print as a zero-width or arbitrary range.
        Fewer than half the replicates succeeding (:data:`MIN_OK_FRACTION`) means the resamples
        rarely support the law at all; fewer than :data:`MIN_DISTINCT` distinct replicate rows (or
        a tenth of the successful ones) means resampling does not move the estimate.
        """
        if self.replicates_ is None:
            return None
        reps = np.asarray(self.replicates_, float)
        n = len(reps)
        ok = reps[np.isfinite(reps).all(axis=1)] if n else reps
        if n == 0 or len(ok) < MIN_OK_FRACTION * n:
            return f"only {len(ok)} of {n} bootstrap replicates could be refitted (fewer than half)"
        scale = np.maximum(np.abs(ok).max(axis=0), 1e-300)
        distinct = len(np.unique(np.round(ok / scale, 9), axis=0))
        if distinct < max(MIN_DISTINCT, 0.1 * len(ok)):
            return (f"the {len(ok)} successful bootstrap replicates hold only {distinct} distinct refit(s): "
                    "resampling does not move the estimate, so its spread says nothing")
        return None

    def _bootstrap(self, data: FitData, n: int, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    # -- pure functions of a parameter dict (scalars or replicate arrays) -------------------
    def _predict(self, p: Params, N: np.ndarray, D: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _optimal(self, p: Params, C: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _derived(self, p: Params) -> dict[str, Any]:
        return {}

    # -- intervals ---------------------------------------------------------------------------
    def _replicate_params(self) -> Params | None:
        if self.replicates_ is None or self.bootstrap_unavailable():
            return None
        reps = self.replicates_[np.isfinite(self.replicates_).all(axis=1)]
        return {name: reps[:, i] for i, name in enumerate(self.param_names)}

    def replicate_values(self, name: str) -> np.ndarray | None:
        """The bootstrap replicates of one parameter or derived quantity, or None without usable ones."""
        reps = self._replicate_params()
        if reps is None:
            return None
        if name in reps:
            return reps[name]
        with np.errstate(all="ignore"):
            return np.asarray(self._derived(reps)[name], float)

    def intervals(self) -> dict[str, Interval]:
        """Every parameter and derived quantity: value, bootstrap SE and 95% interval."""
        self.check_fitted()
        reps = self._replicate_params()
        pinned = self.pinned()
        out: dict[str, Interval] = {}
        for name in self.param_names:
            out[name] = summarise(reps[name] if reps else np.array([]), self.params_[name],
                                  log=name in self.log_names, pinned=pinned.get(name))
        derived = self._derived(self.params_)
        with np.errstate(all="ignore"):
            derived_reps = self._derived(reps) if reps else {}
        for name in self.derived_names:
            out[name] = summarise(np.asarray(derived_reps.get(name, [])), float(derived[name]),
                                  log=name in self.log_names, pinned=pinned.get(name))
        return out

    def reported_intervals(self) -> dict[str, Interval]:
        """:meth:`intervals` as every output shows them: withheld for a law flagged unreliable.

        A percentile interval claims 95% coverage only where the data determine the law; for
        an unreliable law each value stays, marked, and its interval and SE are not shown.
        """
        ivs = self.intervals()
        if self.reliable():
            return ivs
        why = "the law is flagged unreliable: " + self.doubts()[0]
        return {name: withheld(iv, why) for name, iv in ivs.items()}

    def optimal_interval(self, C: float) -> dict[str, Interval]:
        """N*, D* and predicted loss at budget C with bootstrap SEs and 95% intervals.

        Beyond the largest fitted budget the intervals also carry the model's own error, growing
        with the distance extrapolated (:meth:`extrapolation_error`), so they are not parameter
        uncertainty alone.
        """
        self.check_fitted()
        with np.errstate(all="ignore"):
            N, D, L = (float(np.asarray(v)) for v in self._optimal(self.params_, np.asarray(float(C))))
        reps = self._replicate_params()
        if reps:
            with np.errstate(all="ignore"):
                Nr, Dr, Lr = self._optimal(reps, np.asarray(float(C)))
        else:
            Nr = Dr = Lr = np.array([])
        out = {"N": summarise(Nr, N, log=True), "D": summarise(Dr, D, log=True), "loss": summarise(Lr, L, log=True)}
        for q in ("N", "D", "loss"):
            half, why = self.extrapolation_error(float(C), "N" if q == "D" else q)
            out[q] = widen_log(out[q], half, why)
        return out

    def optimal_replicates(self, C: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """N*, D* and predicted loss at budget C under every drawn bootstrap replicate, NaN where its refit
        failed (empty without usable replicates): the distribution :meth:`optimal_interval` summarises."""
        self.check_fitted()
        if self.replicates_ is None or self.bootstrap_unavailable():
            return np.array([]), np.array([]), np.array([])
        reps = {name: np.asarray(self.replicates_, float)[:, i] for i, name in enumerate(self.param_names)}
        with np.errstate(all="ignore"):
            out = self._optimal(reps, np.asarray(float(C)))
        n = len(self.replicates_)
        return tuple(np.broadcast_to(np.asarray(v, float), (n,)).copy() for v in out)  # type: ignore[return-value]

    def predict_interval(self, N: ArrayLike, D: ArrayLike) -> list[Interval]:
        """Predicted loss of each (N, D) with a 95% interval for a measured loss there.

        The interval holds (1) the parameters' bootstrap spread, (2) the scatter of one measured
        point about the law (the fit's RMS residual in log loss) and (3) beyond the largest fitted
        budget, the model error of :meth:`extrapolation_error`; (2) and (3) are added in
        quadrature, on the log scale, to each end of (1).
        """
        self.check_fitted()
        N = np.atleast_1d(np.asarray(N, float))
        D = np.atleast_1d(np.asarray(D, float))
        N, D = np.broadcast_arrays(N, D)
        reps = self._replicate_params()
        sd = self.residual_sd_
        out = []
        for n, d in zip(N, D):
            with np.errstate(all="ignore"):
                point = float(np.asarray(self._predict(self.params_, np.asarray(n), np.asarray(d))))
                rl = self._predict(reps, np.asarray(n), np.asarray(d)) if reps else np.array([])
            iv = summarise(rl, point, log=True)
            ext, why = self.extrapolation_error(self.k_ * n * d, "loss")
            extra = math.sqrt((1.96 * sd if math.isfinite(sd) else 0.0) ** 2 + ext ** 2)
            iv = widen_log(iv, extra, why or "widened by the scatter of one measured point about the law")
            out.append(iv)
        return out

    def extrapolation_error(self, C: float, quantity: str) -> tuple[float, str]:
        """Half-width (in ln units) added to a 95% interval of ``quantity`` (N or loss) at budget C.

        Zero inside the fitted range. Beyond it: the error the law made when it predicted its own
        largest budget from the smaller ones (the backtest), per unit of ln C extrapolated,
        times the distance from the largest fitted budget, times :data:`EXTRAPOLATION_Z` (a mean
        absolute error is sqrt(2/pi) of a normal SD; 1.96 SDs make a 95% half-width). A law with
        no backtest gets no model-error term (its intervals then carry no ``widened``).
        """
        rng = self.c_range_
        if rng is None or not (C > rng[1] * (1 + 1e-9)):
            return 0.0, ""
        dist = math.log(C / rng[1])
        rate = (self.extrapolation_ or {}).get(quantity)
        if rate is None or not math.isfinite(rate):
            return 0.0, ""
        return EXTRAPOLATION_Z * rate * dist, (f"widened for extrapolating {dist / math.log(10):.2g} decades beyond the largest "
                                   f"fitted budget by the backtest's error ({100 * rate:.2g}% per unit ln C)")

    # -- serialisation -----------------------------------------------------------------------
    def _plot(self) -> dict[str, Any]:
        """What a figure needs beyond the parameters: the law's own figure data and the backtest."""
        out = dict(self.plot_ or {})  # a restored fit's stored figure data
        out.update(self._plot_extra())
        if self.backtest_ is not None:
            out["backtest"] = self.backtest_
        return out

    def _plot_extra(self) -> dict[str, Any]:
        """Law-specific figure data (fitted points, parabolas, envelopes); {} when restored."""
        return {}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable, self-describing record; :func:`scaling.fitting.from_dict` rebuilds it."""
        self.check_fitted()
        return jsonable(
            {
                "class": type(self).__name__,
                "law": self.law,
                "method": self.method,
                "settings": self.get_settings(),
                "params": dict(self.params_),
                "param_names": list(self.param_names),
                "intervals": self.reported_intervals(),
                "reliable": self.reliable(),
                "level": LEVEL,
                "conventions": replace(self.conventions_, k=self.k_).to_json(),
                "n_points": self.n_points_,
                "c_range": list(self.c_range_ or []),
                "extrapolation": self.extrapolation_,
                "pinned": self.pinned(),
                "residual_sd": self.residual_sd_,
                "notes": list(self.notes_),
                "doubts": stored(self.doubts(), self.notes_),
                "bootstrap": {
                    **(self.bootstrap_info_ or {"n": 0}),
                    "replicates": None if self.replicates_ is None else self.replicates_.tolist(),
                },
                "plot": self._plot(),
            }
        )

    def keep_backtest(self, scores: dict[str, Any], rates: dict[str, float] | None) -> "Law":
        """Keep what :func:`scaling.fitting.core.backtest.backtest` returned for this law: the scores (shown
        with the fit) and the model-error rates that widen its intervals beyond the fitted budgets."""
        self.check_fitted()
        self.backtest_ = scores
        if rates is not None:
            self.extrapolation_ = rates
        return self

    @classmethod
    def restore(cls, d: dict[str, Any], data: FitData | None = None) -> "Law":
        """A fitted law from its :meth:`to_dict` form; ``data``: the very data it was fitted to (same
        fingerprint), which a refit from its optimum (the runs worth adding) needs."""
        law = cls.from_dict(d)
        if data is not None:
            law.data_ = data
        return law

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Law":
        """Rebuild a fitted law from :meth:`to_dict` output (no data needed)."""
        if d.get("class") != cls.__name__:
            raise FitError(f"stored fit is a {d.get('class')!r}, not a {cls.__name__}")
        law = cls(**d.get("settings", {}))
        # a parameter the fit left non-finite is stored as null (JSON has no inf or nan): read back as nan
        law.params_ = {k: math.nan if v is None else float(v) for k, v in d["params"].items()}
        law.conventions_ = Conventions.from_json(d.get("conventions") or {})
        law.k_ = law.conventions_.k
        law.n_points_ = int(d.get("n_points", 0))
        rng = d.get("c_range") or []
        law.c_range_ = (float(rng[0]), float(rng[1])) if len(rng) == 2 else None
        law.extrapolation_ = d.get("extrapolation")
        law.residual_sd_ = float(d.get("residual_sd") or math.nan)
        law.pinned_ = {str(k): str(v) for k, v in (d.get("pinned") or {}).items()}
        law.doubts_ = restore(d.get("doubts"), d.get("reliable"))
        law.notes_ = relink(list(d.get("notes", [])), d.get("doubts"), law.doubts_)
        boot = d.get("bootstrap") or {}
        reps = boot.get("replicates")
        law.replicates_ = None if reps is None else np.array(reps, dtype=float).reshape(-1, len(cls.param_names))
        law.bootstrap_info_ = {k: v for k, v in boot.items() if k != "replicates"} if reps is not None else None
        law._restore_plot(d.get("plot", {}))
        return law

    def _restore_plot(self, plot: dict[str, Any]) -> None:
        self.plot_ = plot
        self.backtest_ = plot.get("backtest")

    def __repr__(self) -> str:
        settings = ", ".join(f"{k}={v!r}" for k, v in self.get_settings().items())
        return f"{type(self).__name__}({settings})"


def outside_measured(compute: float, measured: ArrayLike) -> tuple[float, float] | None:
    """The measured budgets' (smallest, largest) when ``compute`` lies more than :data:`MAX_EXTRAPOLATION`
    outside them, else None (also with no usable measurement)."""
    C = np.asarray(measured, float)
    C = C[np.isfinite(C) & (C > 0)]
    if not len(C):
        return None
    lo, hi = float(C.min()), float(C.max())
    return None if lo / MAX_EXTRAPOLATION <= compute <= hi * MAX_EXTRAPOLATION else (lo, hi)


def check_budget(compute: float, measured: ArrayLike, what: str = "the budget") -> None:
    """Refuse a budget more than :data:`MAX_EXTRAPOLATION` outside the measured budgets ``measured``."""
    span = outside_measured(compute, measured)
    if span is not None:
        lo, hi = span
        raise FitError(f"{what} {compute:.3g} FLOPs is more than {MAX_EXTRAPOLATION:.0e}x outside the measured "
                       f"budgets ({lo:.3g} to {hi:.3g} FLOPs): the fitted laws say nothing that far "
                       f"away (use {lo / MAX_EXTRAPOLATION:.3g} to {hi * MAX_EXTRAPOLATION:.3g})")


def check_spread(points: pd.DataFrame, subject: str) -> None:
    """Refuse ``points`` with a single model size or a single token count, which leave a law of N
    and D undetermined; ``subject`` begins the message (``"approach 3 needs"``)."""
    if points["N"].nunique() < 2:
        raise FitError(f"{subject} at least two model sizes; all points have one N")
    if points["D"].nunique() < 2:
        raise FitError(f"{subject} at least two token counts; all points have one D")


def as_fit_data(data: FitData | pd.DataFrame) -> FitData:
    if isinstance(data, FitData):
        return data
    if isinstance(data, pd.DataFrame):
        return from_frame(data)
    raise TypeError(f"fit() takes a FitData or a DataFrame, not {type(data).__name__}")


def jsonable(obj: object) -> Any:
    """Plain Python types only; NaN/inf become None so the JSON is standard; an interval is its
    :meth:`~scaling.fmt.Interval.to_dict`."""
    if isinstance(obj, Interval):
        return jsonable(obj.to_dict())
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        f = float(obj)
        return f if math.isfinite(f) else None
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj
