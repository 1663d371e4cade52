"""Coverage of the laws of sparsity on simulated MoE sweeps: do their 95% intervals hold the truth?

Each draw is a random truth of one form (granularity: Krajewski et al.'s L(N, D, G); sparsity:
L(N, D, S) with S = 1 - top_k / n_experts), measured on a grid of 4 active sizes (3e7-1e9) x 4 token
counts (1e9-3e10) x the form's levels (G = 1-16; 1, 4, 16, 64 experts, top-1) with 0.5% log-normal
noise, fitted and bootstrapped as `scaling fit --law moe` fits it. Printed per form: how many draws
the law calls reliable, and among them how often each parameter's interval, the recommended
N_active*, D* and cut of the experts (G* or S*) at 10x the largest budget and the loss saved against
the dense (or G = 1) optimum hold the truth, with the binomial SE and the median width. Target: >= 90%
for every quantity (nominal 95%). `tests/fitting/test_moe_laws_coverage.py` runs a few draws.

    python benchmarks/bench_moe_coverage.py [--draws 100] [--bootstrap 100] [--seed 0] [--form sparsity|granularity]
        [--every 10]
"""

from __future__ import annotations

import argparse
import time

from scaling.fitting.moe.moe_synthetic import coverage_study

TARGET = 0.90


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=100)
    ap.add_argument("--bootstrap", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--form", choices=("sparsity", "granularity"), action="append")
    ap.add_argument("--every", type=int, default=0, help="also print the coverage so far every this many draws")
    args = ap.parse_args()
    for form in args.form or ("sparsity", "granularity"):
        start = time.perf_counter()

        def running(r: dict) -> None:  # a long study can be read while it runs
            if args.every and r["draws"] % args.every == 0:
                report(r, args.bootstrap, time.perf_counter() - start)

        r = coverage_study(form, args.draws, n_bootstrap=args.bootstrap, seed=args.seed, progress=running)
        if not args.every or args.draws % args.every:
            report(r, args.bootstrap, time.perf_counter() - start)


def report(r: dict, n_bootstrap: int, took: float) -> None:
    """The coverage so far: each quantity's intervals, how many hold the truth, the share with its binomial
    SE, and the median width (a factor hi / lo for a positive quantity, hi - lo otherwise)."""
    print(f"moe-{r['form']}: {r['kept']} of {r['draws']} draws reliable ({r['flagged']} flagged), "
          f"{n_bootstrap} bootstrap replicates, {took:.0f} s")
    for name, share in r["coverage"].items():
        covered, n = r["counts"][name]
        se = 100 * (share * (1 - share) / max(n, 1)) ** 0.5
        print(f"  {name:>10}: {covered:4d} of {n:4d} = {100 * share:5.1f}% (binomial SE {se:.1f}) hold the truth, "
              f"median width {r['median_width'][name]:.3g}"
              + ("" if share >= TARGET else f"  (below the {100 * TARGET:.0f}% target)"))
    print(f"  lowest: {100 * r['lowest']:.1f}% (target >= {100 * TARGET:.0f}%)", flush=True)


if __name__ == "__main__":
    main()
