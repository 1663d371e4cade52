"""Do the reported 95% intervals hold? Synthetic laws, and published data held out.

Run by hand: ``python benchmarks/bench_coverage.py [--draws 200] [--bootstrap 100] [--parameters]``.
Prints, in this one run (each coverage with its binomial standard error):

1. for each method, over ``--draws`` synthetic data sets from random laws near published ones
   (:func:`scaling.fitting.loss.synthetic.coverage_study`): the share flagged unreliable, and among the
   rest the coverage of the true N* at ten times the largest budget by the reported interval and,
   as the baseline, by the parameters' bootstrap interval alone; then the flagged draws the
   at-budget rule (:func:`scaling.fitting.recommend.undetermined_at_budget`) lets recommend, and the
   coverage of every draw allowed to recommend;
2. the share of example-shaped (12-point) draws on which approach 3 is flagged, and those of them
   the at-budget rule lets recommend;
3. on every published set in tests/data (Porian et al. 2024's ten IsoFLOP sets, Epoch AI's
   Chinchilla points), the largest budget held out: how many held-out losses each law's
   prediction interval covers, against the bootstrap-only interval;
4. with ``--parameters``: over ``--parameter-draws`` data sets from the known law of
   :mod:`scaling.fitting.loss.synthetic` per method (approach 3's grid, approach 2's IsoFLOP slices,
   approach 1's curves, Kaplan's grid), the coverage of each parameter's 95% bootstrap interval
   (``--bootstrap`` replicates) and its median width over the truth (tests/fitting/test_fit_synthetic.py
   checks ten draws of it).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def published_sets():
    import pandas as pd

    from scaling.fitting import from_frame

    for path in sorted((ROOT / "tests/data/porian2024/isoflop_points").glob("*.csv")):
        yield path.stem, from_frame(pd.read_csv(path), source=path.name)
    df = pd.read_csv(ROOT / "tests/data/chinchilla_epoch/svg_extracted_data.csv").sort_values("loss").iloc[:-5]
    df = df.rename(columns={"Model Size": "N", "Training FLOP": "C"})[["N", "C", "loss"]]
    yield "chinchilla_epoch", from_frame(df, source="epoch")


def se(p: float, n: int) -> float:
    """Binomial standard error of a share ``p`` of ``n`` draws."""
    return math.sqrt(p * (1 - p) / n) if n else float("nan")


def parameter_designs() -> dict:
    """Per method: a function (seed, replicates) -> bootstrapped law, and the true parameters."""
    from scaling.fitting import ChinchillaEnvelope, ChinchillaIsoFLOP, ChinchillaParametric, KaplanLaw, from_frame
    from scaling.fitting.loss import synthetic as S

    a_true = S.TRUTH["beta"] / (S.TRUTH["alpha"] + S.TRUTH["beta"])
    return {
        "parametric": (lambda s, b: ChinchillaParametric(grid="small").fit(
            from_frame(S.grid_points(n_N=6, n_D=6, seed=s))).bootstrap(b, s), {**S.TRUTH, "a": a_true}),
        "isoflop": (lambda s, b: ChinchillaIsoFLOP().fit(from_frame(S.isoflop_points(seed=s))).bootstrap(b, s),
                    {"a": a_true}),
        "envelope": (lambda s, b: ChinchillaEnvelope().fit(S.curves(seed=s)).bootstrap(b, s), {"a": a_true}),
        "kaplan": (lambda s, b: KaplanLaw().fit(from_frame(S.grid_points(seed=s, law="kaplan"))).bootstrap(b, s),
                   {k: S.KAPLAN_TRUTH[k] for k in ("alpha_N", "alpha_D", "log_Nc", "log_Dc")}),
    }


def parameter_coverage(draws: int, n_boot: int) -> None:
    print(f"parameters' 95% bootstrap intervals, {draws} draws per method, {n_boot} bootstrap replicates")
    for method, (make, truth) in parameter_designs().items():
        t = time.perf_counter()
        hits = {k: 0 for k in truth}
        widths: dict[str, list[float]] = {k: [] for k in truth}
        for seed in range(100, 100 + draws):
            iv = make(seed, n_boot).intervals()
            for k, v in truth.items():
                hits[k] += iv[k].covers(v)
                widths[k].append((iv[k].hi - iv[k].lo) / abs(v) if iv[k].interval else math.nan)
        cells = [f"{k} {100 * h / draws:5.1f}% +- {100 * se(h / draws, draws):4.1f} (width "
                 f"{statistics.median(widths[k]):.3f} x truth)" for k, h in hits.items()]
        print(f"  {method:10s} " + "; ".join(cells) + f"  [{time.perf_counter() - t:.0f} s]", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--bootstrap", type=int, default=100)
    ap.add_argument("--designs", default="approach2,approach1,kaplan,approach3,underdetermined",
                    help="comma-separated synthetic designs to run (empty: none)")
    ap.add_argument("--skip-published", action="store_true")
    ap.add_argument("--parameters", action="store_true", help="also the parameters' interval coverage")
    ap.add_argument("--parameter-draws", type=int, default=50)
    args = ap.parse_args()

    from scaling.fitting.loss.synthetic import held_out_coverage
    from scaling.fitting.loss.synthetic import coverage_study

    designs = [d for d in args.designs.split(",") if d]
    if designs:
        print(f"N* at 10x the largest budget, {args.draws} draws per method, {args.bootstrap} bootstrap replicates")
    for design in designs:
        t = time.perf_counter()
        if design == "underdetermined":  # with the backtest, so that the at-budget rule can be judged on them
            r = coverage_study("underdetermined", args.draws, n_bootstrap=args.bootstrap, seed=6000)
            print(f"  12-point example-shaped draws: approach 3 flagged on {100 * r['flagged']:.1f}%", flush=True)
        else:
            r = coverage_study(design, args.draws, n_bootstrap=args.bootstrap, seed=5000)
            print(f"  {design:10s} flagged {100 * r['flagged']:5.1f}%  coverage {100 * r['coverage']:5.1f}% of "
                  f"{r['kept']} kept (+- {100 * se(r['coverage'], r['kept']):4.1f}; bootstrap only: {100 * r['coverage_bootstrap_only']:5.1f}%; loss at N*: "
                  f"{100 * r['coverage_loss']:5.1f}%)  median ln width {r['median_ln_width']:.2f}", flush=True)
        n_all = r["kept"] + r["added_at_budget"]
        print(f"  {'':10s} at-budget rule: {r['added_at_budget']} flagged draws may recommend, N* covered in "
              f"{r['added_covered']}, loss in {r['added_covered_loss']}; all {n_all} allowed: N* coverage "
              f"{100 * r['coverage_at_budget']:5.1f}% +- {100 * se(r['coverage_at_budget'], n_all):4.1f}, loss {100 * r['coverage_loss_at_budget']:5.1f}%  "
              f"[{time.perf_counter() - t:.0f} s]", flush=True)

    if args.parameters:
        parameter_coverage(args.parameter_draws, args.bootstrap)
    if args.skip_published:
        return
    print("published sets, largest budget held out: held-out losses inside the 95% prediction interval")
    totals: dict[tuple[str, bool], list[int]] = {}
    for name, data in published_sets():
        res = held_out_coverage(data, n_bootstrap=args.bootstrap, settings={"approach3": {"grid": "coarse"}})
        cells = []
        for kind, r in res.items():
            if "error" in r:
                cells.append(f"{kind}: not fitted")
                continue
            flag = " (flagged)" if r["flagged"] else ""
            cells.append(f"{kind}{flag} {r['covered']}/{r['n']} (bootstrap only {r['covered_bootstrap_only']}/{r['n']})")
            tot = totals.setdefault((kind, r["flagged"]), [0, 0, 0])
            tot[0] += r["covered"]
            tot[1] += r["covered_bootstrap_only"]
            tot[2] += r["n"]
        print(f"  {name:36s} " + "; ".join(cells), flush=True)
    for (kind, flagged), (c, cb, n) in sorted(totals.items()):
        print(f"  total {kind}{' flagged' if flagged else ''}: {c}/{n} = {100 * c / n:.0f}% covered "
              f"(bootstrap only {100 * cb / n:.0f}%; ratio {c / max(cb, 1):.2f})")


if __name__ == "__main__":
    main()
