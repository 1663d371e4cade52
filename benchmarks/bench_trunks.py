"""N* from trunks and predicted cooldowns against N* from trained cooldowns, and the compute each needs.

A simulated world whose every eval loss follows a known curve law in the run's own schedule (the
annealing law, L0 = 1.7, A = 0.5, alpha = 0.5, C = 0.6, plus 60 / N^0.34 for the model size, log-normal
noise 0.1%). Two sweeps of the same sizes and token budgets, each analysed by `scaling.fitting.analyse`
exactly as `scaling fit` / `scaling recommend` do:

- **trunks**: ``branches: {tokens: [...], cooldowns: predicted}``, one WSD trunk per size to the largest
  budget; the other budgets' final losses predicted by the curve law across sizes;
- **trained cooldowns**: every (N, D) trained with the same WSD schedule (a cooldown branch's rate: the
  trunk's warmup and peak, then a 20% decay). Simulated runs write no checkpoints, so each branch is
  simulated from step 0; its loss is what the branch would give (the simulated loss depends only on
  the rate's path), and its compute is counted as a branch's: the shared trunk to the last branch point
  once, plus each branch's cooldown.

Prints, per noise seed, each sweep's chosen N* with its 95% interval at ten times the largest run's FLOPs (as ``recommend``), the true N* of the
simulated world (minimised numerically over N on the same schedule), and the compute of each sweep,
with the ratio of the trunks' compute to the trained cooldowns'.

``--coverage`` measures instead how often the trunks' 95% intervals on N* hold the true N*: per seed the
trunk sweep alone is trained and analysed twice, once as ``scaling fit`` does (the predicted points'
uncertainty carried into the laws' bootstraps, :mod:`scaling.fitting.core.predicted`) and once with the
predicted points treated as measured; it prints each law's coverage over the seeds with its binomial SE.

    python benchmarks/bench_trunks.py [--seeds 2]
    python benchmarks/bench_trunks.py --coverage --seeds 12 [--first 0]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml
from scipy.optimize import minimize_scalar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from in_process_sweep import train_plan  # noqa: E402
from scaling.curve_forms import ANNEALING, areas, curve_loss  # noqa: E402
from scaling.fitting.analysis import Settings, SweepSource, analyse  # noqa: E402
from scaling.fmt import Interval  # noqa: E402
from scaling.lr_schedule import lr_steps, schedule_of  # noqa: E402

CURVE = {"form": ANNEALING, "L0": 1.7, "A": 0.5, "alpha": 0.5, "C": 0.6, "evals": 40}
LAW = {"E": 0.0, "A": 60.0, "B": 1.0e-6, "alpha": 0.34, "beta": 1.0}
SIZES = [2.0e6, 4.0e6, 8.0e6, 1.6e7, 3.2e7]
BUDGETS = [1.0e7, 2.0e7, 4.0e7, 8.0e7, 1.6e8]
FRACTION, WARMUP, PEAK, FLOOR, BATCH = 0.2, 50, 1e-3, 0.1, 8192
SCHEDULE = {"warmup_steps": WARMUP, "min_lr_ratio": FLOOR}


def plan(name: str, seed: int, trunks: bool) -> dict:
    block = {"models": [{"N": n} for n in SIZES]}
    schedule = dict(SCHEDULE)
    if trunks:
        block["branches"] = {"tokens": BUDGETS, "cooldown_fraction": FRACTION, "cooldowns": "predicted"}
    else:
        block["tokens"] = BUDGETS
        schedule |= {"kind": "wsd", "decay_fraction": FRACTION}
    return {"name": name, "simulate": {"law": LAW, "noise": 0.001, "seed": seed, "curve": CURVE},
            "train": {"schedule": schedule, "batch_tokens": BATCH}, "rules": {"lr": PEAK},
            "grid": [block]}


def true_loss(N: float, D: float) -> float:
    steps = max(WARMUP + 2, int(round(D / BATCH)))
    lr = lr_steps(steps, PEAK, schedule_of(SCHEDULE | {"kind": "wsd", "decay_fraction": FRACTION}))
    theta = (CURVE["L0"], CURVE["A"], CURVE["alpha"], CURVE["C"])
    return float(curve_loss(ANNEALING, theta, areas(lr, [steps - 1]))[0]) + LAW["A"] / N ** LAW["alpha"]


def true_n_star(C: float, k: float = 6.0) -> float:
    res = minimize_scalar(lambda x: true_loss(np.exp(x), C / (k * np.exp(x))), bounds=(np.log(1e5), np.log(1e9)),
                          method="bounded", options={"xatol": 1e-4})
    return float(np.exp(res.x))


NONE = Interval(float("nan"), withheld="not fitted")
#: The law compared in every sweep, whichever the recommendation chose (Chinchilla's approach 3).
COMPARED = "approach3"


def chosen_n(url: str, sweep: str) -> tuple[str, Interval, Interval, float]:
    """The recommended law, its N* with interval, approach 3's, and the budget (ten times the largest run, as
    `recommend`)."""
    analysis = analyse(SweepSource(url, sweep), Settings(n_bootstrap=50), save=False)
    rec = analysis.recommendation
    if rec is None or rec.chosen is None:
        return "none", NONE, NONE, float("nan")
    return rec.chosen, rec.per_law[rec.chosen]["N"], rec.per_law.get(COMPARED, {}).get("N", NONE), rec.compute


def compute_of(url: str, sweep: str) -> float:
    from scaling import db

    with db.connect(url) as res:
        runs = res.runs(sweep=sweep)
    return float(runs["C"].sum())


def branch_compute(url: str, sweep: str) -> float:
    """The trained-cooldown sweep's compute counted as branches of one trunk per size: the trunk to the last
    branch point once, then each branch's cooldown."""
    from scaling import db

    with db.connect(url) as res:
        runs = res.runs(sweep=sweep)
    total = 0.0
    for _, group in runs.groupby("N"):
        per_token = group["C"] / group["D"]
        longest = group["D"].max()
        total += float(per_token.iloc[0]) * ((1 - FRACTION) * longest + FRACTION * group["D"].sum())
    return total


NOISELESS = "noiseless points'"


def approach3(data, carried: bool, n_bootstrap: int) -> Interval:
    """Approach 3's N* with its 95% interval at ten times the largest point's FLOPs (as ``recommend``), the predicted
    points' uncertainty carried into its bootstrap (``carried``, as ``scaling fit`` does) or the points taken as
    measured (the same fit without it)."""
    from dataclasses import replace

    from scaling.fitting.sweep_fit import fit_one

    law = fit_one(COMPARED, data if carried else replace(data, predicted_draws=None), n_bootstrap, 0, {}, False)
    return law.optimal_interval(10 * float(data.points["C"].max()))["N"]


def _iv(n: Interval) -> str:
    """N* with its interval to 4 significant digits: ``value [lo, hi]``, or why there is none."""
    return f"{n.value:.4g} {n.bounds_text(4)}"


def coverage(seeds: range, n_bootstrap: int) -> None:
    """How often approach 3's 95% interval on N* from trunks holds the true N* and the N* of the noiseless
    points, with the predicted points' uncertainty carried in and with the points taken as measured."""
    from dataclasses import replace

    from scaling.fitting.core.sweep_data import from_db
    from scaling.fitting.curves.trunks import trunk_predictions
    from scaling.fitting.sweep_fit import fit_one

    hits: dict[tuple[str, bool], list[bool]] = {}
    widths: dict[bool, list[float]] = {True: [], False: []}
    truths: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            t = time.perf_counter()
            url = f"sqlite:///{tmp}/s{seed}.db"
            path = Path(tmp) / f"trunks{seed}.yaml"
            path.write_text(yaml.safe_dump(plan("trunks", seed, True)))
            train_plan(path, url, Path(tmp))
            tp = trunk_predictions(url, "trunks", n_bootstrap, seed)
            data, _ = from_db(url, "trunks", predicted=tp.points(), predicted_notes=tuple(tp.notes),
                              predicted_draws=tp.draws)
            C = 10 * float(data.points["C"].max())
            if not truths:
                exact = data.points.copy()
                exact["loss"] = [true_loss(n, d) for n, d in zip(exact["N"], exact["D"])]
                noiseless = fit_one(COMPARED, replace(data, points=exact, predicted_draws=None), 0, 0, {}, False)
                truths = {"true": true_n_star(C), NOISELESS: float(noiseless.optimal(C)[0])}
                print(f"C = {C:.3g} FLOPs; true N* {truths['true']:.4g}; {COMPARED}'s N* from the noiseless losses "
                      f"of the same points {truths[NOISELESS]:.4g}", flush=True)
            line = []
            for carried in (True, False):
                n = approach3(data, carried, n_bootstrap)
                widths[carried].append(n.log_width())
                for what, truth in truths.items():
                    hits.setdefault((what, carried), []).append(n.covers(truth))
                line.append(f"{'carried in' if carried else 'as measured'} {_iv(n)}")
            print(f"seed {seed} ({time.perf_counter() - t:.0f} s): {COMPARED} N* " + "; ".join(line), flush=True)
    for (what, carried), got in sorted(hits.items()):
        p = float(np.mean(got))
        se = float(np.sqrt(p * (1 - p) / len(got)))
        print(f"{COMPARED}, predicted points {'carried in' if carried else 'as measured'}: the 95% interval holds the "
              f"{what} N* in {sum(got)}/{len(got)} = {100 * p:.0f}% (binomial SE {100 * se:.0f}%); median width "
              f"factor hi/lo {np.exp(np.median(widths[carried])):.3g}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--coverage", action="store_true")
    ap.add_argument("--bootstrap", type=int, default=50)
    args = ap.parse_args()
    if args.coverage:
        coverage(range(args.first, args.first + args.seeds), args.bootstrap)
        return
    rows, truth = [], float("nan")
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            url = f"sqlite:///{tmp}/s{seed}.db"
            out = {}
            for name, trunks in (("trunks", True), ("cooldowns", False)):
                path = Path(tmp) / f"{name}{seed}.yaml"
                path.write_text(yaml.safe_dump(plan(name, seed, trunks)))
                t = time.perf_counter()
                train_plan(path, url, Path(tmp))
                law, n, n3, at = chosen_n(url, name)
                out[name] = (law, n, n3, time.perf_counter() - t)
                if not np.isfinite(truth) and np.isfinite(at):
                    truth = true_n_star(at)
                    print(f"budget C = {at:.3g} FLOPs (ten times the largest run); true N* {truth:.4g}")
            c_trunks, c_branches, c_scratch = compute_of(url, "trunks"), branch_compute(url, "cooldowns"), \
                compute_of(url, "cooldowns")
            for name, (law, n, n3, secs) in out.items():
                print(f"seed {seed} {name:<10} chosen N* {_iv(n)} ({law}); "
                      f"{COMPARED} N* {_iv(n3)}; analysed in {secs:.0f} s")
            print(f"seed {seed} compute: trunks {c_trunks:.3g} FLOPs, trained cooldowns as branches {c_branches:.3g} "
                  f"(from scratch {c_scratch:.3g}); trunks / branches = {c_trunks / c_branches:.3f}")
            rows.append((out["trunks"][2].value, out["cooldowns"][2].value, c_trunks / c_branches,
                         c_trunks / c_scratch))
    a = np.array(rows)
    print(f"summary over {len(rows)} seed(s): {COMPARED} N* trunks / trained cooldowns per seed "
          f"{', '.join(f'{r:.3f}' for r in a[:, 0] / a[:, 1])} (median {np.median(a[:, 0] / a[:, 1]):.3f}); "
          f"against the true N*: trunks {np.median(a[:, 0]) / truth:.3f}, trained {np.median(a[:, 1]) / truth:.3f}; "
          f"compute trunks / branches {np.median(a[:, 2]):.3f}, trunks / from scratch {np.median(a[:, 3]):.3f}")


if __name__ == "__main__":
    main()
