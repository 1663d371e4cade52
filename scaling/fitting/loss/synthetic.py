"""Data drawn from a known law with noise: for tests of recovery and interval coverage, and demos.

The truth is a Chinchilla law L = E + A/N^alpha + B/D^beta (or Kaplan's joint law); losses get
multiplicative log-normal noise. Designs mirror real sweeps: IsoFLOP slices around the true
optimum (approach 2), full training curves per size (approach 1), a grid of (N, D) (approach 3).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from scaling.accounting import FLOPS_PER_PARAM_TOKEN
from scaling.fitting.core.measurements import FitData, prepare

#: Close to Epoch AI's estimates on Chinchilla's data (Besiroglu et al. 2024).
TRUTH = {"E": 1.8, "A": 480.0, "B": 2100.0, "alpha": 0.35, "beta": 0.37}
#: A Kaplan et al. (2020, Table 2)-like joint law.
KAPLAN_TRUTH = {"log_Nc": math.log(8.8e13), "log_Dc": math.log(5.4e13), "alpha_N": 0.076, "alpha_D": 0.095}


def chinchilla_loss(N: np.ndarray, D: np.ndarray, t: dict[str, float] = TRUTH) -> np.ndarray:
    return t["E"] + t["A"] / np.asarray(N, float) ** t["alpha"] + t["B"] / np.asarray(D, float) ** t["beta"]


def chinchilla_optimal_N(C: float | np.ndarray, t: dict[str, float] = TRUTH, k: float = FLOPS_PER_PARAM_TOKEN) -> np.ndarray:
    """N* of the truth at C = k N D (Hoffmann et al. eq. 4)."""
    al, be = t["alpha"], t["beta"]
    G = (al * t["A"] / (be * t["B"])) ** (1 / (al + be))
    return G * (np.asarray(C, float) / k) ** (be / (al + be))


def kaplan_loss(N: np.ndarray, D: np.ndarray, t: dict[str, float] = KAPLAN_TRUTH) -> np.ndarray:
    q = t["alpha_N"] / t["alpha_D"]
    return np.exp(t["alpha_D"] * np.logaddexp(q * (t["log_Nc"] - np.log(N)), t["log_Dc"] - np.log(D)))


def _noisy(loss: np.ndarray, noise: float, rng: np.random.Generator) -> np.ndarray:
    return loss * np.exp(rng.normal(0.0, noise, size=np.shape(loss)))


def isoflop_points(
    budgets: np.ndarray | None = None,
    n_sizes: int = 9,
    span: float = 2.0,
    noise: float = 0.002,
    seed: int = 0,
    t: dict[str, float] = TRUTH,
) -> pd.DataFrame:
    """IsoFLOP slices: at each budget, ``n_sizes`` sizes log-spaced +-``span`` (natural log) around N*."""
    rng = np.random.default_rng(seed)
    budgets = np.geomspace(1e18, 1e21, 7) if budgets is None else np.asarray(budgets, float)
    rows = []
    for C in budgets:
        Ns = chinchilla_optimal_N(C, t) * np.exp(np.linspace(-span, span, n_sizes))
        Ds = C / (FLOPS_PER_PARAM_TOKEN * Ns)
        for N, D, L in zip(Ns, Ds, _noisy(chinchilla_loss(Ns, Ds, t), noise, rng)):
            rows.append((N, D, C, L))
    return pd.DataFrame(rows, columns=["N", "D", "C", "loss"])


def grid_points(n_N: int = 8, n_D: int = 8, noise: float = 0.005, seed: int = 0, t: dict[str, float] | None = None,
                law: str = "chinchilla") -> pd.DataFrame:
    """A full grid of sizes (1e7..1e10) and token counts (1e9..1e12) under ``law`` (chinchilla or kaplan)."""
    rng = np.random.default_rng(seed)
    t = t if t is not None else (TRUTH if law == "chinchilla" else KAPLAN_TRUTH)
    N, D = np.meshgrid(np.geomspace(1e7, 1e10, n_N), np.geomspace(1e9, 1e12, n_D))
    N, D = N.ravel(), D.ravel()
    clean = chinchilla_loss(N, D, t) if law == "chinchilla" else kaplan_loss(N, D, t)
    return pd.DataFrame({"N": N, "D": D, "C": FLOPS_PER_PARAM_TOKEN * N * D, "loss": _noisy(clean, noise, rng)})


def curves(
    sizes: np.ndarray | None = None,
    tokens_per_param: float = 400.0,
    n_points: int = 60,
    run_noise: float = 0.002,
    point_noise: float = 0.001,
    seed: int = 0,
    t: dict[str, float] = TRUTH,
) -> FitData:
    """Training curves (loss after each amount of tokens) of one run per size, plus final points.

    Each run has a seed-like offset (``run_noise``) shared along its curve and a small per-point noise.
    """
    rng = np.random.default_rng(seed)
    sizes = np.geomspace(1e7, 3e9, 16) if sizes is None else np.asarray(sizes, float)
    rows, finals = [], []
    for r, N in enumerate(sizes):
        D_max = tokens_per_param * N
        toks = np.geomspace(D_max / 300.0, D_max, n_points)
        offset = rng.normal(0.0, run_noise)
        loss = chinchilla_loss(N, toks, t) * np.exp(offset + rng.normal(0.0, point_noise, n_points))
        for tok, L in zip(toks, loss):
            rows.append((f"run{r:03d}", N, tok, FLOPS_PER_PARAM_TOKEN * N * tok, L))
        finals.append((N, D_max, FLOPS_PER_PARAM_TOKEN * N * D_max, loss[-1]))
    cur = pd.DataFrame(rows, columns=["run_key", "N", "tokens", "flops", "loss"])
    pts = pd.DataFrame(finals, columns=["N", "D", "C", "loss"])
    return prepare(pts, source="synthetic curves", curves=cur)


# -- coverage studies ---------------------------------------------------------------------------
#: The designs of a coverage study, one per method: what each is fitted to.
DESIGNS = ("approach2", "approach3", "kaplan", "approach1", "underdetermined")


def draw_truth(rng: np.random.Generator) -> dict[str, float]:
    """A Chinchilla law near published ones: exponents 0.25-0.45, E 1.5-2.0, A and B within a factor 2 of Epoch's."""
    return {"E": float(rng.uniform(1.5, 2.0)), "A": float(TRUTH["A"] * np.exp(rng.uniform(-0.7, 0.7))),
            "B": float(TRUTH["B"] * np.exp(rng.uniform(-0.7, 0.7))), "alpha": float(rng.uniform(0.25, 0.45)),
            "beta": float(rng.uniform(0.25, 0.45))}


def draw(design: str, seed: int) -> tuple[FitData, dict[str, float], str]:
    """One data set of ``design`` from a random truth: (data, truth, law kind to fit)."""
    rng = np.random.default_rng(seed)
    if design == "kaplan":
        t = {**KAPLAN_TRUTH, "alpha_N": float(rng.uniform(0.06, 0.1)), "alpha_D": float(rng.uniform(0.08, 0.12))}
        pts = grid_points(n_N=6, n_D=6, noise=float(rng.uniform(0.002, 0.008)), seed=seed, t=t, law="kaplan")
        return prepare(pts, source=f"kaplan draw {seed}"), t, "kaplan"
    t = draw_truth(rng)
    noise = float(rng.uniform(0.002, 0.008))
    if design == "approach2":
        pts = isoflop_points(budgets=np.geomspace(1e18, 1e20, 5), n_sizes=7, span=1.5, noise=noise, seed=seed, t=t)
        return prepare(pts, source=f"isoflop draw {seed}"), t, "approach2"
    if design == "approach3":
        pts = grid_points(n_N=6, n_D=6, noise=noise, seed=seed, t=t)
        return prepare(pts, source=f"grid draw {seed}"), t, "approach3"
    if design == "approach1":  # curves run to ten times the truth's optimal tokens per parameter at 1e20 FLOPs
        n_opt = float(chinchilla_optimal_N(1e20, t))
        ratio = 10.0 * 1e20 / (FLOPS_PER_PARAM_TOKEN * n_opt * n_opt)
        return curves(n_points=40, tokens_per_param=ratio, seed=seed, t=t), t, "approach1"
    if design == "underdetermined":  # the example sweep's shape: 3 budgets x 4 sizes over a decade of compute
        pts = isoflop_points(budgets=np.array([3e18, 1e19, 3e19]), n_sizes=4, span=1.2, noise=0.02, seed=seed, t=t)
        return prepare(pts, source=f"12-point draw {seed}"), t, "approach3"
    raise ValueError(f"unknown design {design!r} (use one of {DESIGNS})")


def true_optimal_N(kind: str, t: dict[str, float], C: float, k: float = FLOPS_PER_PARAM_TOKEN) -> float:
    """N* of the truth at budget C (the joint law's minimum for Kaplan, eq. 4 of Hoffmann et al. otherwise)."""
    if kind == "kaplan":
        q = t["alpha_N"] / t["alpha_D"]
        return float(np.exp((np.log(q) + q * t["log_Nc"] + np.log(C) - np.log(k) - t["log_Dc"]) / (q + 1)))
    return float(chinchilla_optimal_N(C, t, k))


def true_optimal_loss(kind: str, t: dict[str, float], C: float, k: float = FLOPS_PER_PARAM_TOKEN) -> float:
    """The truth's loss at its own compute-optimal point at budget C."""
    N = true_optimal_N(kind, t, C, k)
    D = C / (k * N)
    return float(kaplan_loss(N, D, t) if kind == "kaplan" else chinchilla_loss(N, D, t))


def coverage_study(design: str, draws: int, n_bootstrap: int = 50, seed: int = 0,
                   factor: float = 10.0, run_backtest: bool = True) -> dict[str, float]:
    """Fit ``draws`` data sets of ``design`` as ``scaling fit`` does (bootstrap and backtest) and score N*.

    Returns the fraction of draws flagged unreliable, and among the rest the fraction whose
    reported 95% interval on N* at ``factor`` times the largest budget covers the truth (and,
    for contrast, the fraction the parameters' bootstrap interval alone covers), and of the true
    loss there. ``added_at_budget`` counts the flagged draws that may still recommend by the
    at-budget rule (:func:`scaling.fitting.recommend.undetermined_at_budget`), ``added_covered`` how
    many of them cover N*, and ``coverage_at_budget`` the coverage of every draw allowed to recommend.
    Without ``run_backtest`` the intervals carry no model-error term (enough to count flags).
    """
    from scaling.fitting.sweep_fit import fit_data
    from scaling.fitting.recommend import undetermined_at_budget

    settings = {"approach3": {"grid": "small"}}
    covered = covered_param = covered_loss = flagged = fitted = 0
    added = added_covered = added_covered_loss = 0
    widths = []
    for i in range(draws):
        data, t, kind = draw(design, seed + i)
        try:
            law = fit_data(data, kind, n_bootstrap=n_bootstrap, seed=seed + i, settings=settings,
                           run_backtest=run_backtest).laws[kind]
        except Exception:  # noqa: BLE001 - a draw the law cannot fit at all counts as flagged
            flagged += 1
            continue
        fitted += 1
        C = factor * float(data.points["C"].max())
        ivs = law.optimal_interval(C)
        iv, iv_loss = ivs["N"], ivs["loss"]
        truth = true_optimal_N(kind, t, C, law.k_)
        truth_loss = true_optimal_loss(kind, t, C, law.k_)
        hit = iv.covers(truth)
        hit_loss = iv_loss.covers(truth_loss)
        if law.doubts():
            flagged += 1
            if undetermined_at_budget(law, ivs, C) is None:
                added += 1
                added_covered += hit
                added_covered_loss += hit_loss
            continue
        covered += hit
        covered_loss += hit_loss
        covered_param += iv.covers(truth, bootstrap=True)
        widths.append(iv.log_width())
    kept = draws - flagged

    def share(k: int, n: int) -> float:
        return k / n if n else float("nan")

    return {"draws": draws, "flagged": flagged / draws, "kept": kept, "coverage": share(covered, kept),
            "coverage_bootstrap_only": share(covered_param, kept), "coverage_loss": share(covered_loss, kept),
            "median_ln_width": float(np.nanmedian(widths)) if widths else float("nan"),
            "added_at_budget": added, "added_covered": added_covered, "added_covered_loss": added_covered_loss,
            "coverage_at_budget": share(covered + added_covered, kept + added),
            "coverage_loss_at_budget": share(covered_loss + added_covered_loss, kept + added)}


def held_out_coverage(data: FitData, kinds: tuple[str, ...] = ("kaplan", "approach2", "approach3"),
                      n_bootstrap: int = 50, seed: int = 0,
                      settings: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """Hold out the largest-compute runs, fit each law as ``scaling fit`` does on the rest, and
    count how many held-out losses fall inside :meth:`~scaling.fitting.core.base.Law.predict_interval`.

    Returns, per law kind: ``covered`` and ``n`` (held-out points), ``covered_bootstrap_only`` (by
    the parameters' bootstrap interval alone, for contrast), ``median_ln_width``, ``flagged`` (its
    fit notes call it unreliable) or ``error`` (it could not be fitted). This scores the intervals a user sees
    beyond the data, model error included, against measurements the fit never saw.
    """
    from scaling.errors import UserError
    from scaling.fitting.sweep_fit import fit_data
    from scaling.fitting.core.backtest import split

    train, held = split(data)
    pts = data.points[held]
    out: dict[str, dict[str, Any]] = {}
    for kind in kinds:
        try:
            law = fit_data(train, kind, n_bootstrap=n_bootstrap, seed=seed, settings=settings).laws[kind]
        except UserError as exc:
            out[kind] = {"error": " ".join(str(exc).split())}
            continue
        ivs = law.predict_interval(pts["N"].to_numpy(), pts["D"].to_numpy())
        y = pts["loss"].to_numpy()
        hits = [iv.covers(v) for iv, v in zip(ivs, y)]
        param = [iv.covers(v, bootstrap=True) for iv, v in zip(ivs, y)]
        width = [iv.log_width() for iv in ivs if iv.lo is not None and iv.lo > 0]
        out[kind] = {"covered": int(sum(hits)), "covered_bootstrap_only": int(sum(param)), "n": len(hits),
                     "flagged": bool(law.doubts()), "median_ln_width": float(np.median(width)) if width else math.nan}
    return out
