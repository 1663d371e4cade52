"""Hyperparameter laws against simulated truths: coverage of the exponents, and the lr at 10x the budget.

Run by hand: ``python benchmarks/bench_hparams.py [--draws 30] [--bootstrap 200] [--noise 0.002]``.
Each draw is a random law (:func:`scaling.fitting.hyperparams.hparams_synthetic.random_truth`):
L = L_chinchilla(N, D) + k_lr (ln lr - ln lr*(N, D))^2 + k_b (ln B - ln B*(D))^2, lr* = c N^a D^b,
B* = d D^e, with multiplicative noise, on a Step-Law-like grid (4 sizes x 4 token budgets, 7
learning rates a factor sqrt(2) apart x 5 batches a factor 2 apart, centred on a guess within
half a step of the truth). :func:`scaling.fitting.hyperparams.hparams.fit_hparams` fits it; the benchmark
counts how often the 95% intervals of a, b and e cover the truth, and compares the lr the laws
recommend with the true lr* at the compute-optimal (N, D) of ten times the largest budget.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np


def main() -> None:
    from scaling.fitting.hyperparams import hparams_synthetic as HS
    from scaling.fitting.hyperparams.hparams import fit_hparams

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=30)
    ap.add_argument("--bootstrap", type=int, default=200)
    ap.add_argument("--noise", type=float, default=0.002, help="SD of ln(loss) per run")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    cover = {"a": 0, "b": 0, "e": 0}
    counted = {"a": 0, "b": 0, "e": 0}
    lr_err, b_err, flagged, used, lr_covered = [], [], 0, [], 0
    t0 = time.perf_counter()
    for i in range(args.draws):
        truth = HS.random_truth(rng)
        runs = HS.sweep(truth, rng, noise=args.noise)
        fit = fit_hparams(runs, args.bootstrap, seed=i)
        assert fit is not None
        used.append(sum(g.used for g in fit.groups) / len(fit.groups))
        for law_name, pname, true in (("lr_ND", "a", truth.a), ("lr_ND", "b", truth.b), ("batch_D", "e", truth.e)):
            law = fit.laws.get(law_name)
            iv = law.params[pname] if law is not None else None
            if iv is None or iv.kind != "percentile":
                continue
            counted[pname] += 1
            cover[pname] += iv.covers(true)
        C = 10 * float(runs["C"].max())
        N, D = truth.optimal_ND(C)
        rec = fit.recommend(N, D, C)
        lr, batch = rec["lr"], rec["batch"]
        if lr is None or lr.kind == "unreliable":
            flagged += 1
            continue
        true_lr = float(truth.lr_star(N, D))
        lr_err.append(lr.value / true_lr - 1)
        lr_covered += lr.kind == "percentile" and lr.covers(true_lr)
        b_err.append(batch.value / float(truth.batch_star(D)) - 1)
    secs = time.perf_counter() - t0
    lr_err_a, b_err_a = np.abs(lr_err), np.abs(b_err)
    print(f"{args.draws} draws, noise {args.noise:g}, {args.bootstrap} bootstrap replicates, {secs:.1f} s "
          f"({secs / args.draws:.2f} s per draw); groups used by the laws: {100 * np.mean(used):.0f}% on average")
    for p in ("a", "b", "e"):
        n = counted[p]
        print(f"95% interval of {p} covers the truth: {cover[p]}/{n} = {100 * cover[p] / max(n, 1):.0f}%"
              + (f" ({args.draws - n} draws without an interval)" if n < args.draws else ""))
    print(f"recommended lr at 10x the largest budget: within 10% of the true lr* in "
          f"{int(np.sum(lr_err_a <= 0.10))}/{len(lr_err)} draws; |error| median {100 * np.median(lr_err_a):.1f}%, "
          f"90th percentile {100 * np.quantile(lr_err_a, 0.9):.1f}%, max {100 * lr_err_a.max():.1f}%"
          + (f"; {flagged} draws flagged (no recommendation)" if flagged else ""))
    print(f"its 95% interval holds the true lr* in {lr_covered}/{len(lr_err)} draws")
    print(f"recommended batch at 10x: |error| median {100 * np.median(b_err_a):.1f}%, "
          f"90th percentile {100 * np.quantile(b_err_a, 0.9):.1f}%, within 10%: {int(np.sum(b_err_a <= 0.1))}/{len(b_err)}")
    if not math.isfinite(float(np.mean(lr_err_a))):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
