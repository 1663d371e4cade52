"""Downstream prediction on Gadre et al. (2024)'s RedPajama ladder, beside the authors' own figures.

Fits the small models (four sizes, 0.011B-0.411B parameters, eight token multipliers M = 5-640
each: 32 runs) and predicts the larger ones (1.4B at M = 20 and 640, 6.9B at M = 20): the C4 eval
loss by approach 3 (step 1) and the 17-task average top-1 error from that loss (step 2, fitted
on the small models plus the 1.4B M = 20 run, as the authors fit theirs), by Gadre et al.'s
exponential form and the OLMo sigmoid. The authors' method (their notebook's loss law on five
points and error law on six) is redone on the same data and printed alongside; their published
relative errors are in tests/data/README.md.

    python benchmarks/bench_task_laws.py [--bootstrap 200] [--grid epoch] [--recipe grid|ladder]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "fitting"))

from test_task_laws_gadre import DATA, PUBLISHED, SMALL, _authors_fit  # noqa: E402

from scaling.fitting.core.measurements import prepare  # noqa: E402
from scaling.fitting.loss.parametric import ChinchillaParametric  # noqa: E402
from scaling.fitting.tasks.task_laws import fit_task  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", type=int, default=200)
    ap.add_argument("--grid", default="epoch")
    ap.add_argument("--recipe", default="grid", help="step 1's search: grid, or ladder (OLMo's recipe)")
    args = ap.parse_args()
    rpj = pd.read_csv(DATA)
    ev = pd.DataFrame({"run_key": rpj.name, "N": rpj.N.astype(float), "D": rpj.D.astype(float),
                       "C": rpj.C.astype(float), "tokens": rpj.D.astype(float), "final": True, "task": "avg17",
                       "acc": 1 - rpj.err_avg17, "acc_norm": np.nan, "bpb": np.nan, "loss": rpj.loss})
    small = rpj.model.isin(SMALL).to_numpy()
    t0 = time.perf_counter()
    step1 = ChinchillaParametric(grid=args.grid, recipe=args.recipe).fit(prepare(ev[small][["N", "D", "C", "loss"]]))
    step1.bootstrap(args.bootstrap, 0)
    with_1b = small | ((rpj.model == "open_lm_1b") & (rpj.M_tokens_per_param == 20)).to_numpy()
    law = fit_task(ev[with_1b], "avg17", step1=step1, n_bootstrap=args.bootstrap, run_backtest=False)
    seconds = time.perf_counter() - t0
    authors = _authors_fit(rpj)
    print(f"step 1: {step1.params_} reliable={step1.reliable()}; fitted in {seconds:.1f} s")
    for form, curve in law.curves.items():
        print(f"step 2 {form}: {curve.params_} reliable={curve.reliable()}")
    print("| run | C4 loss: measured, predicted [95%] | rel. error (ours / authors', published) | "
          "17-task error: measured | exp: predicted [95%], rel. error | sigmoid: predicted [95%], rel. error | "
          "authors' error rel. (published) |")
    print("|---|---|---|---|---|---|---|")
    for _, r in rpj[~small].iterrows():
        p = law.predict_interval(r.N, r.D)
        L = p["task_loss"]
        cells = [f"{r.model} M={r.M_tokens_per_param:g}",
                 f"{r.loss:.4f}, {L.value:.4f} {L.bounds_text(3, lambda x, d: f'{x:.{d}f}')}"]
        pub = PUBLISHED.get((r.model, r.M_tokens_per_param))
        ours_loss = 100 * (L.value / r.loss - 1)
        cells.append(f"{ours_loss:+.2f}% / " + (f"{pub[0]:.2f}%" if pub else "fitted" if r.M_tokens_per_param == 20
                                                and r.model == "open_lm_1b" else "-"))
        cells.append(f"{r.err_avg17:.4f}")
        for form in ("exp", "sigmoid"):
            iv = p[form]
            err = 1 - iv.value
            lo, hi = (1 - iv.hi, 1 - iv.lo) if iv.interval is not None else (np.nan, np.nan)
            cells.append(f"{err:.4f} [{lo:.3f}, {hi:.3f}], {100 * (err / r.err_avg17 - 1):+.2f}%")
        cells.append(f"{pub[1]:.2f}%" if pub else "-")
        print("| " + " | ".join(cells) + " |")
    print("authors' method redone here (|rel. error| loss, error):",
          {f"{m} M={M:g}": (round(a, 4), round(b, 4)) for (m, M), (a, b) in authors.items()})


if __name__ == "__main__":
    main()
