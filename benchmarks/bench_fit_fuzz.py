"""The numerics fuzz of tests/fitting/test_fit_numerics.py at scale: many random simulated grids.

Run by hand: ``python benchmarks/bench_fit_fuzz.py [--draws 200] [--seed 0] [--dense]``. Each draw
is a random grid (1-12 sizes, 1-300 token counts over up to 3 decades, repeats, noise 0-0.5)
fitted with every law (full approach-3 grid, 20 bootstrap replicates), recommended from and
rendered as a report. Prints how many draws were fitted, refused with a FitError, or raised
anything else (with the draw's settings and the exception, so it can be made a test). ``--dense``
adds the grid of issue 42: 10 sizes x 300 token counts from 1e6 to 1e9, noise 0.005, seeds 0 and 9.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fitting"))

from test_fit_numerics import simulated_grid  # noqa: E402

from scaling.errors import FitError  # noqa: E402
from scaling.fitting import fit_data, from_frame  # noqa: E402
from scaling.fitting.recommend import recommend  # noqa: E402
from scaling.reports.report_data import ReportData  # noqa: E402
from scaling.reports.html import render  # noqa: E402


def one(df, seed: int) -> str:
    try:
        summary = fit_data(from_frame(df), "all", n_bootstrap=20, seed=seed)
    except FitError:
        return "refused"
    try:
        recommend(summary)
    except FitError:
        pass
    runs = df.assign(run_key=[f"r{i}" for i in range(len(df))], status="completed", final_loss=df["loss"])
    render(ReportData(sweep="fuzz", runs=runs, fits=dict(summary.laws)))
    return "fitted"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dense", action="store_true")
    args = ap.parse_args()
    cases = []
    if args.dense:
        cases += [(f"dense seed {s}", simulated_grid(np.random.default_rng(s), 10, 300, 3.0, 0.005), s) for s in (0, 9)]
    for k in range(args.draws):
        rng = np.random.default_rng(args.seed + k)
        settings = dict(n_sizes=int(rng.integers(1, 13)), n_tokens=int(rng.integers(1, 301)),
                        decades=float(rng.uniform(0, 3)), noise=float(rng.choice([0.0, 0.005, 0.05, 0.5])),
                        repeats=int(rng.choice([1, 1, 2, 3])))
        cases.append((f"draw {args.seed + k} {settings}", simulated_grid(rng, **settings), args.seed + k))
    counts = {"fitted": 0, "refused": 0, "raised": 0}
    t0 = time.perf_counter()
    for name, df, seed in cases:
        try:
            counts[one(df, seed)] += 1
        except Exception:  # noqa: BLE001 - what this benchmark looks for
            counts["raised"] += 1
            print(f"RAISED on {name} ({len(df)} points):\n{traceback.format_exc()}")
    print(f"{len(cases)} grids in {time.perf_counter() - t0:.0f} s: {counts}")
    sys.exit(1 if counts["raised"] else 0)


if __name__ == "__main__":
    main()
