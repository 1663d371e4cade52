"""Step 2 of downstream prediction: accuracy as a function of a task loss, with bootstrap intervals.

Two forms, both fitted by least squares on every evaluation of the sweep (intermediate
checkpoints included: each is one more (loss, accuracy) pair on the same curve):

- ``sigmoid`` (the OLMo ladder, Bhagia et al. 2024): acc(L) = a / (1 + exp(-k (L - L0))) + b;
  k < 0 when accuracy falls as the loss rises. b is the floor (chance), a + b the ceiling.
- ``exp`` (Gadre et al. 2024): Err(L) = eps - k exp(-gamma L), i.e. acc = 1 - eps + k exp(-gamma L).

Accuracies are probabilities: each form is parameterised so that every prediction lies in
[chance, 1] for every task loss, not clipped afterwards. The sigmoid lies between b and a + b at
every loss, so b >= chance and a + b <= 1 (a = u (1 - b), u in (0, 1]). The exponential form falls
from 1 - eps + k exp(-gamma L_min) at the lowest loss L_min it is asked at to 1 - eps as the loss
grows, so eps <= 1 - chance and k <= eps exp(gamma L_min) (k = eps exp(gamma L_min + w), w <= 0);
it is evaluated at max(L, L_min). L_min is the floor the fit is given: 0 by default (then k <= eps <= 1),
in a chained prediction the lowest task loss step 1 predicts (its E; see ``task_laws.task_loss_floor``).

The bootstrap resamples whole runs (a run's checkpoints are not independent draws) and refits
from the full-data optimum; intervals and what they may claim come from
:mod:`scaling.fitting.core.intervals`, the same rules as the loss laws.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import least_squares

from scaling.errors import FitError
from scaling.fmt import Interval, bounds
from scaling.fitting.core.base import MAX_EXPONENT_RATIO, MIN_OK_FRACTION, MIN_POINTS_PER_PARAM, jsonable
from scaling.fitting.core.doubts import Doubt, Doubtful, DoubtKind, relink, restore, stored
from scaling.fitting.core.intervals import summarise, withheld

#: A parameter within this fraction of its bound's distance is reported as pinned there.
AT_BOUND = 1e-6
#: The transition L0 may lie this many loss ranges outside the measured losses before the sigmoid's
#: shape is an extrapolation the data do not support.
L0_REACH = 1.0


class AccuracyCurve(Doubtful):
    """Base of the loss -> accuracy forms: fit, bootstrap, intervals, honesty, (de)serialisation."""

    form: ClassVar[str] = ""
    label: ClassVar[str] = ""
    param_names: ClassVar[tuple[str, ...]] = ()
    #: Parameters the data must determine: one pinned at its bound flags the form.
    must_be_free: ClassVar[tuple[str, ...]] = ()
    #: The task's chance level and the lowest task loss predictions are asked at (see :meth:`fit`).
    chance_: float = 0.0
    floor_: float = 0.0
    anchor_: tuple[float, float] | None = None

    # -- the form, on the optimiser's vector and on a parameter dict ---------------------------
    def _accuracy(self, p: dict[str, Any], L: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _jacobian(self, x: np.ndarray, L: np.ndarray) -> np.ndarray:
        """d accuracy / d x at each loss (n, P), in the optimiser's coordinates."""
        raise NotImplementedError

    def _bounds(self, L: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _starts(self, L: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
        raise NotImplementedError

    def _params(self, x: np.ndarray) -> dict[str, float]:
        """The parameters of the optimiser's vector ``x``."""
        return {n: float(v) for n, v in zip(self.param_names, x)}

    def _vector(self, p: dict[str, float]) -> np.ndarray:
        """The optimiser's vector of parameters ``p`` (inverse of :meth:`_params`)."""
        return np.array([p[n] for n in self.param_names], float)

    # -- fitting ---------------------------------------------------------------------------------
    def fit(self, loss: ArrayLike, acc: ArrayLike, groups: ArrayLike | None = None, *, chance: float = 0.0,
            floor: float = 0.0, anchor: tuple[float, float] | None = None) -> "AccuracyCurve":
        """Fit accuracy ``acc`` against task loss ``loss``; ``groups`` (run keys) for the bootstrap.

        ``chance``: the task's chance level, below which no prediction falls; ``floor``: the lowest task
        loss a prediction is asked at (below it the form holds its value there); ``anchor``: one more
        (task loss, accuracy) point in every fit and bootstrap refit, belonging to no run (the OLMo
        ladder's ideal point, :data:`scaling.fitting.tasks.ladder_recipe.IDEAL_POINT`).
        """
        if not (0.0 <= chance < 1.0):
            raise FitError(f"a chance level lies in [0, 1), got {chance!r}")
        if not (math.isfinite(floor) and floor >= 0.0):
            raise FitError(f"the task loss floor must be finite and non-negative, got {floor!r}")
        self.chance_, self.floor_ = float(chance), float(floor)
        self.anchor_ = None if anchor is None else (float(anchor[0]), float(anchor[1]))
        L = np.asarray(loss, float)
        y = np.asarray(acc, float)
        ok = np.isfinite(L) & np.isfinite(y)
        L, y = L[ok], y[ok]
        g = np.asarray(groups if groups is not None else np.arange(ok.size))[ok]
        n_par = len(self.param_names)
        if len(L) <= n_par:
            raise FitError(f"{self.label} needs more evaluations than its {n_par} parameters; got {len(L)}")
        if np.ptp(L) <= 0:
            raise FitError(f"{self.label} needs evaluations at more than one task loss")
        self.loss_, self.acc_, self.groups_ = L, y, g
        self.lower_, self.upper_ = self._bounds(L, y)
        best = None
        for x0 in self._starts(L, y):
            r = self._solve(x0, np.ones_like(L))
            if r is not None and (best is None or r[1] < best[1]):
                best = r
        if best is None:
            raise FitError(f"{self.label}: the least-squares fit failed from every start")
        self.x_ = best[0]
        self.params_ = self._params(self.x_)
        self.residual_sd_ = float(np.sqrt(np.mean((self._accuracy(self.params_, L) - y) ** 2)))
        self.loss_range_ = (float(L.min()), float(L.max()))
        self.n_points_ = int(len(L))
        self.n_groups_ = int(len(np.unique(g)))
        self.replicates_: np.ndarray | None = None
        self.notes_: list[str] = []
        self.doubts_ = []
        self.pinned_ = self._pinned()
        if len(L) < MIN_POINTS_PER_PARAM * n_par:
            self.add_unreliable(DoubtKind.FEW_POINTS, f"{len(L)} evaluations for the {n_par} parameters of {self.label}: "
                               "too few to test the form")
        self._check_fit()
        return self

    def _solve(self, x0: np.ndarray, w: np.ndarray, max_nfev: int = 400) -> tuple[np.ndarray, float] | None:
        sw = np.sqrt(w)
        x0 = np.clip(x0, self.lower_ + 1e-12, self.upper_ - 1e-12)

        L, y = self.loss_, self.acc_
        if self.anchor_ is not None:  # the anchor counts once in every fit, whatever the runs' weights
            L, y, sw = np.append(L, self.anchor_[0]), np.append(y, self.anchor_[1]), np.append(sw, 1.0)

        def resid(x: np.ndarray) -> np.ndarray:
            with np.errstate(all="ignore"):
                r = (self._accuracy(self._params(x), L) - y) * sw
            return np.where(np.isfinite(r), r, 1e3)

        def jac(x: np.ndarray) -> np.ndarray:
            with np.errstate(all="ignore"):
                J = self._jacobian(x, L) * sw[:, None]
            return np.where(np.isfinite(J), J, 0.0)

        try:
            with np.errstate(all="ignore"):  # scipy's own steps may overflow on a far start: a failed start, not a warning
                r = least_squares(resid, x0, jac=jac, bounds=(self.lower_, self.upper_), method="trf", x_scale="jac",
                                  max_nfev=max_nfev)
        except (ValueError, np.linalg.LinAlgError):
            return None
        cost = float(np.sum(resid(r.x) ** 2))
        return (r.x, cost) if np.isfinite(cost) else None

    def _pinned(self) -> dict[str, str]:
        out = {}
        for i in range(len(self.x_)):
            lo, hi, v = self.lower_[i], self.upper_[i], self.x_[i]
            span = hi - lo
            if v - lo <= AT_BOUND * span:
                out.update([self._bound_text(i, "lower")])
            elif hi - v <= AT_BOUND * span:
                out.update([self._bound_text(i, "upper")])
        return out

    def _bound_text(self, i: int, side: str) -> tuple[str, str]:
        """(parameter, "lower bound 0.25") for coordinate ``i`` of the optimiser's vector at its ``side`` bound."""
        name = self.param_names[i]
        bound = self._params(self.lower_ if side == "lower" else self.upper_)[name]
        return name, f"{side} bound {bound:.4g}"

    def _check_fit(self) -> None:
        """Form-specific notes on what the data do not determine (after fit and after bootstrap)."""

    # -- bootstrap -------------------------------------------------------------------------------
    def bootstrap(self, n: int = 200, seed: int = 0) -> "AccuracyCurve":
        """Refit ``n`` resamples of whole runs (with replacement), each from the full-data optimum."""
        if n < 2:
            raise FitError("the bootstrap needs at least 2 replicates")
        rng = np.random.default_rng(seed)
        keys, inverse = np.unique(self.groups_, return_inverse=True)
        out = np.full((n, len(self.param_names)), np.nan)
        for i in range(n):
            counts = np.bincount(rng.integers(0, len(keys), len(keys)), minlength=len(keys)).astype(float)
            w = counts[inverse]
            if np.count_nonzero(w) <= len(self.param_names) or np.ptp(self.loss_[w > 0]) <= 0:
                continue
            r = self._solve(self.x_, w, max_nfev=100)  # started at the optimum: a resample moves it little
            if r is not None:
                out[i] = list(self._params(r[0]).values())
        self.replicates_ = out
        self.drop_doubts(DoubtKind.BOOTSTRAP)
        ok = int(np.isfinite(out).all(axis=1).sum())
        if ok < MIN_OK_FRACTION * n:
            self.add_unreliable(DoubtKind.BOOTSTRAP, f"the bootstrap refitted only {ok} of {n} resamples of the runs")
        self._check_fit()
        return self

    def replicate_params(self) -> dict[str, np.ndarray] | None:
        """Each parameter's successful replicates (None without a usable bootstrap)."""
        if self.replicates_ is None:
            return None
        reps = self.replicates_[np.isfinite(self.replicates_).all(axis=1)]
        if len(reps) < MIN_OK_FRACTION * len(self.replicates_) or len(reps) < 2:
            return None
        return {n: reps[:, i] for i, n in enumerate(self.param_names)}

    def replicate_values(self, name: str) -> np.ndarray | None:
        """One parameter's successful replicates (as :meth:`scaling.fitting.core.base.Law.replicate_values`)."""
        reps = self.replicate_params()
        return None if reps is None else reps[name]

    def replicate_rows(self) -> np.ndarray | None:
        """The replicate matrix with failed rows NaN, aligned by replicate index (for pairing with step 1)."""
        return None if self.replicate_params() is None else self.replicates_

    # -- results ---------------------------------------------------------------------------------
    def predict(self, loss: ArrayLike) -> np.ndarray:
        """Accuracy at task loss ``loss``."""
        return self._accuracy(self.params_, np.asarray(loss, float))

    def accuracy_of(self, rows: np.ndarray, loss: ArrayLike) -> np.ndarray:
        """Accuracy of each replicate row (R, P) at the matching loss (R,) (NaN where either is missing)."""
        p = {n: rows[:, i] for i, n in enumerate(self.param_names)}
        with np.errstate(all="ignore"):
            return self._accuracy(p, np.asarray(loss, float))

    def intervals(self) -> dict[str, Interval]:
        reps = self.replicate_params()
        return {n: summarise(reps[n] if reps else [], self.params_[n], pinned=self.pinned_.get(n))
                for n in self.param_names}

    def reported_intervals(self) -> dict[str, Interval]:
        ivs = self.intervals()
        if self.reliable():
            return ivs
        why = "the form is flagged unreliable: " + self.doubts()[0].reason
        return {n: withheld(iv, why) for n, iv in ivs.items()}

    def doubts(self) -> list[Doubt]:
        """Its recorded doubts, then a doubt for each parameter that must be free and is pinned."""
        pinned = [Doubt.unreliable(DoubtKind.PINNED, f"{n} is pinned at its {self.pinned_[n]}: the data do not "
                        "determine it") for n in self.must_be_free if n in self.pinned_]
        return super().doubts() + pinned

    def to_dict(self) -> dict[str, Any]:
        return jsonable({
            "form": self.form, "label": self.label, "params": self.params_, "intervals": self.reported_intervals(),
            "reliable": self.reliable(), "notes": self.notes_, "doubts": stored(self.doubts_, self.notes_), "pinned": self.pinned_,
            "residual_sd": self.residual_sd_, "loss_range": list(self.loss_range_), "n_points": self.n_points_,
            "n_runs": self.n_groups_, "chance": self.chance_, "loss_floor": self.floor_,
            "anchor": None if self.anchor_ is None else list(self.anchor_),
            "replicates": None if self.replicates_ is None else self.replicates_.tolist(),
        })

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "AccuracyCurve":
        sub = CURVES.get(str(d.get("form")))
        if sub is None:
            raise FitError(f"unknown accuracy form {d.get('form')!r} (known: {', '.join(CURVES)})")
        c = sub()
        c.chance_ = float(d.get("chance") or 0.0)
        c.floor_ = float(d.get("loss_floor") or 0.0)
        c.anchor_ = tuple(d["anchor"]) if d.get("anchor") else None
        c.params_ = {k: float(v) for k, v in d["params"].items()}
        c.x_ = c._vector(c.params_)
        c.doubts_ = restore(d.get("doubts"), d.get("reliable"))
        c.notes_ = relink(list(d.get("notes") or []), d.get("doubts"), c.doubts_)
        c.pinned_ = dict(d.get("pinned") or {})
        c.residual_sd_ = float(d.get("residual_sd") or math.nan)
        c.loss_range_ = tuple(d.get("loss_range") or (math.nan, math.nan))
        c.n_points_ = int(d.get("n_points") or 0)
        c.n_groups_ = int(d.get("n_runs") or 0)
        reps = d.get("replicates")
        c.replicates_ = None if reps is None else np.array(
            [[math.nan if v is None else v for v in row] for row in reps], float).reshape(-1, len(sub.param_names))
        return c


class Sigmoid(AccuracyCurve):
    """acc(L) = a / (1 + exp(-k (L - L0))) + b (Bhagia et al. 2024, the OLMo ladder's step 2).

    The optimiser works on (u, k, L0, b) with a = u (1 - b): b in [chance, 1) and u in (0, 1] keep the
    floor at or above chance and the ceiling a + b at or below 1.
    """

    form = "sigmoid"
    label = "sigmoid (Bhagia et al. 2024)"
    param_names = ("a", "k", "L0", "b")
    must_be_free = ("k",)  # a slope at its bound: a step the data cannot resolve (a ceiling a + b = 1 is a fact)

    def _params(self, x: np.ndarray) -> dict[str, float]:
        u, k, L0, b = (float(v) for v in x)
        return {"a": u * (1.0 - b), "k": k, "L0": L0, "b": b}

    def _vector(self, p: dict[str, float]) -> np.ndarray:
        room = 1.0 - p["b"]
        return np.array([p["a"] / room if room > 0 else 1.0, p["k"], p["L0"], p["b"]], float)

    def _accuracy(self, p: dict[str, Any], L: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return p["a"] / (1.0 + np.exp(-p["k"] * (L - p["L0"]))) + p["b"]

    def _jacobian(self, x: np.ndarray, L: np.ndarray) -> np.ndarray:
        u, k, L0, b = x
        a = u * (1.0 - b)
        with np.errstate(over="ignore"):
            s = 1.0 / (1.0 + np.exp(-k * (L - L0)))
        ds = a * s * (1.0 - s)
        return np.stack([(1.0 - b) * s, ds * (L - L0), -ds * k, 1.0 - u * s], axis=1)

    def _bounds(self, L: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        R = float(np.ptp(L))
        kmax = 200.0 / R
        top = 1.0 - 1e-6
        return (np.array([1e-6, -kmax, L.min() - 5 * R, self.chance_]),
                np.array([1.0, kmax, L.max() + 5 * R, max(top, self.chance_ + 1e-9)]))

    def _bound_text(self, i: int, side: str) -> tuple[str, str]:
        if i == 0 and side == "upper":
            return "a", "upper bound 1 - b (the ceiling a + b is 1)"
        if i == 3 and side == "lower" and self.chance_ > 0:
            return "b", f"lower bound {self.chance_:.4g} (chance)"
        return super()._bound_text(i, side)

    def _starts(self, L: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
        R = float(np.ptp(L))
        lo, hi = float(y.min()), float(y.max())
        b = min(max(lo - 0.02, self.chance_), 0.99)
        out = []
        for k in (-4.0 / R, -12.0 / R):  # accuracy falls as the loss rises; the optimiser may still cross 0
            for q in (0.25, 0.75):
                for a in (max(hi - lo, 0.05) * 1.2, max(1.0 - lo, 0.05)):
                    out.append(self._vector({"a": min(a, 1.0 - b), "k": k, "L0": float(np.quantile(L, q)), "b": b}))
        # the OLMo ladder's own start: floor at chance, ceiling 1, transition at 0.9, slope 3 per unit loss
        out.append(self._vector({"a": 1.0 - self.chance_, "k": -3.0, "L0": 0.9, "b": self.chance_}))
        return out

    def _check_fit(self) -> None:
        self.drop_doubts(DoubtKind.OUT_OF_RANGE)
        lo, hi = self.loss_range_
        reach = L0_REACH * (hi - lo)
        iv = self.intervals()["L0"]
        ends = [iv.value] + [v for v in (iv.lo, iv.hi) if v is not None and math.isfinite(v)]
        if "L0" in self.pinned_ or any(v < lo - reach or v > hi + reach for v in ends):
            self.add_unreliable(DoubtKind.OUT_OF_RANGE, f"the transition L0 = {self.params_['L0']:.4g} (or its interval) lies far "
                               f"outside the measured task losses ({lo:.4g} to {hi:.4g}): the data do not locate the "
                               "sigmoid's transition")


class ExpError(AccuracyCurve):
    """Err(L) = eps - k exp(-gamma L) (Gadre et al. 2024, eq. 5); accuracy is 1 - Err.

    Evaluated at max(L, floor). The optimiser works on (eps, w, gamma) with k = eps exp(gamma floor + w):
    w <= 0 keeps the error at the floor, eps - k exp(-gamma floor), at or above 0, and eps <= 1 - chance
    keeps the error as the loss grows, eps, at or below 1 - chance. (The log of k also follows k across
    the many decades it spans as gamma moves.)
    """

    form = "exp"
    label = "exponential error (Gadre et al. 2024)"
    param_names = ("eps", "k", "gamma")
    must_be_free = ("gamma",)

    def _params(self, x: np.ndarray) -> dict[str, float]:
        eps, w, gamma = (float(v) for v in x)
        return {"eps": eps, "k": eps * math.exp(min(gamma * self.floor_ + w, 700.0)), "gamma": gamma}

    def _vector(self, p: dict[str, float]) -> np.ndarray:
        eps = max(p["eps"], 1e-300)
        return np.array([p["eps"], math.log(max(p["k"], 1e-300)) - math.log(eps) - p["gamma"] * self.floor_,
                         p["gamma"]], float)

    def _accuracy(self, p: dict[str, Any], L: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return 1.0 - (p["eps"] - p["k"] * np.exp(-p["gamma"] * np.maximum(L, self.floor_)))

    def _jacobian(self, x: np.ndarray, L: np.ndarray) -> np.ndarray:
        eps, w, gamma = x
        gap = self.floor_ - np.maximum(L, self.floor_)  # <= 0
        with np.errstate(over="ignore"):
            t = np.exp(w + gamma * gap)
        return np.stack([t - 1.0, eps * t, eps * t * gap], axis=1)

    def _bounds(self, L: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        gmax = 50.0 / max(float(np.abs(L).max()), 1e-9)
        return np.array([1e-9, -700.0, 1e-6]), np.array([1.0 - self.chance_, 0.0, gmax])

    def _bound_text(self, i: int, side: str) -> tuple[str, str]:
        if i == 1 and side == "upper":
            return "k", (f"upper bound eps exp(gamma {self.floor_:.4g}) (accuracy 1 at the task loss floor "
                         f"{self.floor_:.4g})")
        if i == 1:
            return "k", "lower bound 0"
        if i == 0 and side == "upper" and self.chance_ > 0:
            return "eps", f"upper bound {1.0 - self.chance_:.4g} (1 - chance)"
        return super()._bound_text(i, side)

    def _starts(self, L: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
        err = 1.0 - y
        out = []
        eps = min(float(err.max()) + 0.05, 1.0 - self.chance_)
        for gamma in (0.3, 1.0, 3.0):
            k = max(float(np.mean((eps - err) * np.exp(gamma * L))), 1e-6)
            k = min(k, 0.9 * eps * math.exp(min(gamma * self.floor_, 700.0)))
            out.append(self._vector({"eps": eps, "k": k, "gamma": gamma}))
        return out

    def _check_fit(self) -> None:
        self.drop_doubts(DoubtKind.UNDETERMINED)
        iv = self.intervals()["gamma"]
        lo, hi = iv.interval or (math.nan, math.nan)
        if math.isfinite(lo) and math.isfinite(hi) and lo > 0 and hi / lo > MAX_EXPONENT_RATIO:
            self.add_unreliable(DoubtKind.UNDETERMINED, f"the data do not determine gamma (its 95% bootstrap interval "
                               f"{bounds(lo, hi)} spans a factor {hi / lo:.3g})")


#: The forms by name, in report order.
CURVES: dict[str, type[AccuracyCurve]] = {"sigmoid": Sigmoid, "exp": ExpError}
