"""What every law shares: the scikit-learn estimator contract, bootstrap intervals, (de)serialisation.

A law keeps its fitted parameters in ``params_`` (a dict of floats) and, after
:meth:`Law.bootstrap`, one row of the same parameters per bootstrap replicate in
``replicates_``. Every prediction is a pure function of a parameter dict (``_predict``,
``_optimal``, ``_derived``), so an interval at any budget is the same function evaluated on the
replicate rows: nothing but the parameters needs storing to redraw a fit later.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from scaling.errors import FitError
from scaling.fitting.data import SIX, FitData, from_frame

#: The two-sided level of every reported interval.
LEVEL = 0.95
#: Below this fraction of successful bootstrap replicates, intervals are reported unavailable (NaN).
MIN_OK_FRACTION = 0.5
#: Fewer distinct successful replicates than this (or a tenth of them) is a degenerate bootstrap.
MIN_DISTINCT = 5


class NotFittedError(RuntimeError):
    """A law used before ``fit`` (a programming error, not a user error)."""


Params = dict[str, Any]  # name -> float, or an array of replicates (broadcasts)


def summarise(values: np.ndarray, point: float) -> dict[str, float]:
    """Point estimate, bootstrap standard error and percentile 95% interval of one quantity."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size < 2:
        return {"value": float(point), "se": math.nan, "lo": math.nan, "hi": math.nan}
    q = (1 - LEVEL) / 2
    lo, hi = np.quantile(v, [q, 1 - q])
    return {"value": float(point), "se": float(np.std(v, ddof=1)), "lo": float(lo), "hi": float(hi)}


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


class Law:
    """Base class: subclasses define ``law``, ``method``, ``param_names`` and the pure functions."""

    law: ClassVar[str] = ""
    method: ClassVar[str] = ""
    param_names: ClassVar[tuple[str, ...]] = ()
    #: Derived quantities reported with intervals (exponents, ratios), from ``_derived``.
    derived_names: ClassVar[tuple[str, ...]] = ()

    # -- the estimator contract ------------------------------------------------------------
    def get_settings(self) -> dict[str, Any]:
        """The ``__init__`` arguments (JSON-serialisable), as scikit-learn's get_params."""
        return {}

    def fit(self, data: FitData | pd.DataFrame) -> "Law":
        """Fit to ``data`` (a :class:`FitData` or a DataFrame with N, D or C, loss); returns self."""
        fd = as_fit_data(data)
        self.k_ = float(fd.flops_per_param_token)
        self.conventions_ = fd.conventions()
        self.n_points_ = int(len(fd.points))
        self.replicates_ = None
        self.bootstrap_info_ = None
        self.plot_ = None  # stored figure data belongs to a restored fit, not this one
        self.backtest_ = None
        self.notes_: list[str] = list(fd.notes)
        self._fit(fd)
        self.data_ = fd
        return self

    def _fit(self, data: FitData) -> None:
        raise NotImplementedError

    def _check(self) -> None:
        if not hasattr(self, "params_"):
            raise NotFittedError(f"{type(self).__name__} is not fitted yet: call fit(df) first")

    def predict(self, N: Any, D: Any) -> np.ndarray:
        """Predicted loss of a model with N parameters trained on D tokens."""
        self._check()
        return self._predict(self.params_, np.asarray(N, float), np.asarray(D, float))

    def optimal(self, C: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(N*, D*, predicted loss) minimising loss at compute C (same FLOP convention as the fit)."""
        self._check()
        return self._optimal(self.params_, np.asarray(C, float))

    def bootstrap(self, n: int = 200, seed: int = 0) -> "Law":
        """Refit on ``n`` resamples of the points; stores ``replicates_`` (n x params); returns self."""
        self._check()
        if n < 2:
            raise FitError("the bootstrap needs at least 2 replicates")
        rng = np.random.default_rng(seed)
        reps = np.asarray(self._bootstrap(self.data_, int(n), rng), dtype=float)
        self.replicates_ = reps
        ok = np.isfinite(reps).all(axis=1)
        self.bootstrap_info_ = {"n": int(n), "seed": int(seed), "failed": int((~ok).sum())}
        notes = getattr(self, "notes_", [])  # a probe built without fit() has none yet
        self.notes_ = [n for n in notes if not n.startswith("intervals unavailable")]  # a rerun replaces it
        why = self.bootstrap_unavailable()
        if why:
            self.bootstrap_info_["unavailable"] = why
            self.notes_.append(f"intervals unavailable: {why}")
        return self

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

    def doubts(self) -> list[str]:
        """The notes saying the data cannot pin this law down (implausible or unsupported estimates)."""
        return [n for n in getattr(self, "notes_", []) if n.startswith("unreliable") or "implausible" in n
                or "outside (0, 1)" in n]

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

    def intervals(self) -> dict[str, dict[str, float]]:
        """Every parameter and derived quantity: value, bootstrap SE and 95% interval."""
        self._check()
        reps = self._replicate_params()
        out: dict[str, dict[str, float]] = {}
        for name in self.param_names:
            out[name] = summarise(reps[name] if reps else np.array([]), self.params_[name])
        derived = self._derived(self.params_)
        derived_reps = self._derived(reps) if reps else {}
        for name in self.derived_names:
            out[name] = summarise(np.asarray(derived_reps.get(name, [])), float(derived[name]))
        return out

    def optimal_interval(self, C: float) -> dict[str, dict[str, float]]:
        """N*, D* and predicted loss at budget C with bootstrap SEs and 95% intervals."""
        self._check()
        N, D, L = (float(np.asarray(v)) for v in self._optimal(self.params_, np.asarray(float(C))))
        reps = self._replicate_params()
        if reps:
            with np.errstate(all="ignore"):
                Nr, Dr, Lr = self._optimal(reps, np.asarray(float(C)))
        else:
            Nr = Dr = Lr = np.array([])
        return {"N": summarise(Nr, N), "D": summarise(Dr, D), "loss": summarise(Lr, L)}

    # -- serialisation -----------------------------------------------------------------------
    def _plot(self) -> dict[str, Any]:
        """What a figure needs beyond the parameters: the law's own figure data and the backtest."""
        out = dict(getattr(self, "plot_", None) or {})  # a restored fit's stored figure data
        out.update(self._plot_extra())
        if getattr(self, "backtest_", None) is not None:
            out["backtest"] = self.backtest_
        return out

    def _plot_extra(self) -> dict[str, Any]:
        """Law-specific figure data (fitted points, parabolas, envelopes); {} when restored."""
        return {}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable, self-describing record; :func:`scaling.fitting.from_dict` rebuilds it."""
        self._check()
        return _jsonable(
            {
                "class": type(self).__name__,
                "law": self.law,
                "method": self.method,
                "settings": self.get_settings(),
                "params": dict(self.params_),
                "param_names": list(self.param_names),
                "intervals": self.intervals(),
                "level": LEVEL,
                "conventions": {**self.conventions_, "flops_per_param_token": self.k_},
                "n_points": self.n_points_,
                "notes": list(self.notes_),
                "bootstrap": {
                    **(self.bootstrap_info_ or {"n": 0}),
                    "replicates": None if self.replicates_ is None else self.replicates_.tolist(),
                },
                "plot": self._plot(),
            }
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Law":
        """Rebuild a fitted law from :meth:`to_dict` output (no data needed)."""
        if d.get("class") != cls.__name__:
            raise FitError(f"stored fit is a {d.get('class')!r}, not a {cls.__name__}")
        law = cls(**d.get("settings", {}))
        law.params_ = {k: float(v) for k, v in d["params"].items()}
        conv = dict(d.get("conventions", {}))
        law.k_ = float(conv.get("flops_per_param_token", SIX))
        law.conventions_ = conv
        law.n_points_ = int(d.get("n_points", 0))
        law.notes_ = list(d.get("notes", []))
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


def as_fit_data(data: FitData | pd.DataFrame) -> FitData:
    if isinstance(data, FitData):
        return data
    if isinstance(data, pd.DataFrame):
        return from_frame(data)
    raise TypeError(f"fit() takes a FitData or a DataFrame, not {type(data).__name__}")


def _jsonable(obj: Any) -> Any:
    """Plain Python types only; NaN/inf become None so the JSON is standard."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        f = float(obj)
        return f if math.isfinite(f) else None
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj
