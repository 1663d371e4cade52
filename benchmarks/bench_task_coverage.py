"""Coverage of the chained downstream prediction on simulated ladders: do its 95% intervals hold the truth?

Each draw is a ladder of its own: a task loss (bits per byte) of Chinchilla form with parameters
drawn at random, an accuracy that is a sigmoid of it (chance level, ceiling, slope and transition
drawn at random; the transition lies between the ladder's losses and the targets') or, with
``--truth exp``, Gadre et al.'s exponential error (falling from the ceiling at the task loss's floor
E to chance, its rate gamma drawn at random), measured on
an IsoFLOP ladder (5 budgets 1e17-1e19 FLOPs x 5 sizes) with 8 evaluations per run (the last one
final), bits per byte with 0.5% log-normal noise and accuracy as a binomial share of 1,000 items.
Both steps are fitted (``fit_tasks``, the task's chance level known) and the chain predicts the
expected accuracy at 10x and 100x the largest budget (N ~ C^0.5 as the ladder's middle runs).
Each chain is backtested (its largest budget held out) as a sweep's are, and its intervals beyond
the ladder widened by that backtest's error; ``--no-backtest`` gives the intervals without it.
Printed per target and form: how many predictions carry an interval, how many of those cover
the true expected accuracy, how many the backtest widened, the median interval width and the mean
absolute error of the value.

    python benchmarks/bench_task_coverage.py [--draws 40] [--bootstrap 100] [--seed 0] [--truth sigmoid|exp]
                                             [--misses] [--finals-only] [--no-backtest]
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import numpy as np
import pandas as pd

from scaling.fitting.tasks.task_data import TaskData
from scaling.fitting.tasks.task_laws import fit_tasks

BUDGETS = (1e17, 3e17, 1e18, 3e18, 1e19)
FRACTIONS = tuple(np.arange(1, 9) / 8)  # evaluations at 1/8, 2/8, ... of a run's tokens; the last is final
ITEMS = 1000
TARGETS = {"10x": 1e20, "100x": 1e21}


def middle_N(C: float) -> float:
    return 1.1e8 * (C / 1e18) ** 0.5


def draw(rng: np.random.Generator, truth: str = "sigmoid") -> dict[str, float]:
    """A task's truth: step 1's parameters and step 2's (a sigmoid, or an exponential error)."""
    t = dict(E=rng.uniform(0.4, 0.9), A=math.exp(rng.uniform(math.log(20), math.log(100))),
             B=math.exp(rng.uniform(math.log(100), math.log(1000))), alpha=rng.uniform(0.25, 0.4),
             beta=rng.uniform(0.25, 0.4))
    t["chance"] = float(rng.choice([0.2, 0.25, 0.5]))
    t["ceiling"] = t["chance"] + (1 - t["chance"]) * rng.uniform(0.7, 1.0)
    t["slope"] = rng.uniform(3.0, 12.0)
    lo = bpb(t, middle_N(TARGETS["100x"]), TARGETS["100x"] / (6 * middle_N(TARGETS["100x"])))
    hi = bpb(t, 2e7 * (BUDGETS[0] / 1e18) ** 0.5, BUDGETS[0] / (6 * 2e7 * (BUDGETS[0] / 1e18) ** 0.5))
    t["L0"] = rng.uniform(lo, lo + 0.7 * (hi - lo))
    t["gamma"] = rng.uniform(1.0, 4.0)  # drawn in both cases, so that a seed gives the same step 1 either way
    t["truth"] = truth
    return t


def bpb(t: dict[str, float], N: float, D: float) -> float:
    return t["E"] + t["A"] / N ** t["alpha"] + t["B"] / D ** t["beta"]


def accuracy(t: dict[str, Any], L: float) -> float:
    if t["truth"] == "exp":  # 1 - Err, Err = eps - k exp(-gamma L): the ceiling at L = E, chance as L grows
        return t["chance"] + (t["ceiling"] - t["chance"]) * math.exp(-t["gamma"] * (L - t["E"]))
    return t["chance"] + (t["ceiling"] - t["chance"]) / (1 + math.exp(t["slope"] * (L - t["L0"])))


def ladder(t: dict[str, float], rng: np.random.Generator) -> pd.DataFrame:
    rows = []
    for C in BUDGETS:
        for N in np.geomspace(2e7, 6e8, 5) * (C / 1e18) ** 0.5:
            D = C / (6 * N)
            for f in FRACTIONS:
                L = bpb(t, N, D * f) * math.exp(rng.normal(0, 0.005))
                acc = rng.binomial(ITEMS, accuracy(t, bpb(t, N, D * f))) / ITEMS
                rows.append(dict(run_key=f"{C:.0e}-{N:.4g}", N=N, D=D * f, C=6 * N * D * f, tokens=D * f,
                                 final=f == 1.0, task="sim", acc=acc, acc_norm=np.nan, bpb=L, loss=np.nan))
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=40)
    ap.add_argument("--bootstrap", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--truth", choices=("sigmoid", "exp"), default="sigmoid", help="step 2's true form")
    ap.add_argument("--misses", action="store_true", help="list the intervals that miss the truth")
    ap.add_argument("--finals-only", action="store_true",
                    help="fit step 2 on each run's final evaluation only (the same draws, checkpoints left out)")
    ap.add_argument("--no-backtest", action="store_true", help="no backtest: intervals without its widening")
    ap.add_argument("--recipe", default="grid", help="the task laws' recipe: grid (ours) or ladder (OLMo's)")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    results = []
    t0 = time.perf_counter()
    for i in range(args.draws):
        t = draw(rng, args.truth)
        ev = ladder(t, rng)
        if args.finals_only:
            ev = ev[ev["final"]].reset_index(drop=True)
        fits = fit_tasks(TaskData(ev, 6.0, f"draw {i}", chance={"sim": t["chance"]}), n_bootstrap=args.bootstrap,
                         seed=i, grid="coarse", run_backtest=not args.no_backtest, recipe=args.recipe)
        law = fits.laws.get("sim")
        if law is None:
            results.append(dict(draw=i, target="-", form="-", kind="not fitted"))
            continue
        for name, C in TARGETS.items():
            N = middle_N(C)
            D = C / (6 * N)
            truth = accuracy(t, bpb(t, N, D))
            p = law.predict_interval(N, D)
            for form in law.curves:
                iv = p[form]
                has = iv.interval is not None
                lo, hi = (iv.lo, iv.hi) if has else (math.nan, math.nan)
                results.append(dict(draw=i, target=name, form=form, kind=iv.kind, value=iv.value,
                                    truth=truth, interval=has, covered=iv.covers(truth), lo=lo, hi=hi,
                                    at_point=bool(getattr(iv, "determined_at_point", False)),
                                    step1_reliable=law.step1.reliable(),
                                    spread=bool(getattr(iv, "form_spread", False)), widened=bool(iv.widened),
                                    width=hi - lo if has else math.nan, inside=0.0 <= iv.value <= 1.0
                                    and iv.value >= t["chance"] - 1e-12))
    df = pd.DataFrame(results)
    seconds = time.perf_counter() - t0
    print(f"{args.draws} simulated ladders (seed {args.seed}, {args.truth} truths, "
          f"{'final evaluations only' if args.finals_only else f'{len(FRACTIONS)} evaluations per run'}), "
          f"{args.bootstrap} bootstrap replicates, {'no backtest' if args.no_backtest else 'backtested'}, recipe {args.recipe}, {seconds:.0f} s")
    print("Intervals: 'reliable chains' are those of chains with neither step flagged; 'also determined at the "
          "point' adds those whose step 1 is flagged but whose paired bootstrap determines the accuracy "
          "(scaling.fitting.tasks.task_laws.DETERMINED_WIDTH).")
    print("| target | form | reliable chains: with an interval, covered | also determined at the point: with an "
          "interval, covered | widened by the other form | widened by the backtest | median width | mean abs error | "
          "values in [chance, 1] |")
    print("|---|---|---|---|---|---|---|---|---|")
    fitted = df[df["form"] != "-"]

    def share(g: pd.DataFrame) -> str:
        n_iv = int(g["interval"].sum())
        cov = f"{int(g['covered'].sum())}/{n_iv} ({100 * g['covered'].sum() / n_iv:.0f}%)" if n_iv else "-"
        return f"{n_iv}/{len(g)}, {cov}"

    for (target, form), g in fitted.groupby(["target", "form"], sort=False):
        before = g.assign(interval=g["interval"] & ~g["at_point"], covered=g["covered"] & ~g["at_point"])
        print(f"| {target} | {form} | {share(before)} | {share(g)} | {int(g['spread'].sum())} | {int(g['widened'].sum())} | "
              f"{np.nanmedian(g['width']):.3f} | "
              f"{100 * np.mean(np.abs(g['value'] - g['truth'])):.2f} points | {int(g['inside'].sum())}/{len(g)} |")
    if args.misses:
        missed = fitted[fitted["interval"] & ~fitted["covered"]]
        print(missed[["draw", "target", "form", "truth", "value", "lo", "hi", "at_point", "step1_reliable"]]
              .to_string(index=False))
    print(f"not fitted: {int((df['form'] == '-').sum())}")
    kinds = fitted.groupby(["target", "form", "kind"], sort=False).size()
    print("interval kinds:", ", ".join(f"{t} {f} {k or 'none'}: {n}" for (t, f, k), n in kinds.items()))


if __name__ == "__main__":
    main()
