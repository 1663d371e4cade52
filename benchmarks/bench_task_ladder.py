"""Downstream prediction on the OLMo model ladder (Bhagia et al. 2024), beside the authors' own figures.

The ladder's 16 runs (190M, 370M, 760M and 1.3B parameters at 1, 2, 5 and 10 times Chinchilla's
tokens, every checkpoint's task bits per byte and accuracy on eight tasks; copied in
tests/data/olmo_ladder/, see its README) fit both steps; the held-back OLMo 2 targets, 7B at 3.9T
tokens and 13B at 5T, are predicted. Printed per recipe (``grid``: our default; ``ladder``: the
authors' recipe) and target: each task's predicted task loss and accuracy, and the mean absolute
accuracy error over the eight tasks, in points. The authors report 3.8 (7B) and 4.15 (13B).

    python benchmarks/bench_task_ladder.py [--bootstrap 0] [--recipes grid ladder]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "fitting"))

from test_task_ladder_olmo import AUTHORS_13B, TARGETS, TASKS, evaluations, target_values  # noqa: E402

from scaling.fitting.tasks.task_laws import fit_task  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", type=int, default=0)
    ap.add_argument("--recipes", nargs="+", default=["grid", "ladder"])
    args = ap.parse_args()
    for recipe in args.recipes:
        errors: dict[str, dict[str, list[float]]] = {t: {"sigmoid": [], "exp": []} for t in TARGETS}
        t0 = time.perf_counter()
        for task in TASKS:
            rows, chance = evaluations(task)
            law = fit_task(rows, task, chance=chance, n_bootstrap=args.bootstrap, run_backtest=False, recipe=recipe)
            for target, (N, D) in TARGETS.items():
                loss, acc = target_values(target, task)
                L = float(np.asarray(law.task_loss(N, D)))
                cells = [f"{recipe}", target, task, f"bpb {L:.4f} (measured {loss:.4f})"]
                for form, curve in law.curves.items():
                    pred = float(np.asarray(curve.predict(L)))
                    errors[target][form].append(abs(pred - acc))
                    cells.append(f"{form} {pred:.4f}")
                cells.append(f"measured {acc:.4f}")
                if target == "13B-5T":
                    cells.append(f"authors' {AUTHORS_13B[task]:.4f}")
                print(" | ".join(cells))
        for target in TARGETS:
            print(f"{recipe}: {target} mean abs error over {len(TASKS)} tasks: "
                  + ", ".join(f"{f} {100 * np.mean(v):.2f} points" for f, v in errors[target].items() if v))
        print(f"{recipe}: fitted in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
