"""Benchmark: the end of a finished sweep against `scaling fit` on it (issue 40's measurement).

A simulated sweep of 216 runs (6 sizes x 4 budgets, each point a group of 3 learning rates x 3
batches) scored on 4 downstream tasks is trained once into a SQLite file (``--db``, kept). Then,
each as its own process, as a user types them: ``scaling fit`` (which stores the fits), ``scaling
report``, ``scaling recommend`` and ``scaling sweep`` of the same plan (nothing left to train: the
sweep's end fits, reports and answers). Target: the finished sweep in at most 1.3x ``scaling fit``.

    python benchmarks/bench_sweep_end.py [--db /tmp/scaling-bench-sweep-end]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import sweep_golden as G  # noqa: E402

MODELS = [{"n_layer": 2, "d_model": d, "n_head": h}
          for d, h in ((16, 2), (24, 3), (32, 2), (48, 3), (64, 4), (96, 4))]
TASKS = [dict(G.TASKS[i % 2], name=f"sim_task{i}") for i in range(4)]


def scaling(*args: str) -> float:
    """Seconds one ``scaling`` command takes, in its own process (imports included, as a user sees it)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "scaling.cli", *args], check=True, env=env, cwd=ROOT,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", default="/tmp/scaling-bench-sweep-end", help="folder of the sweep (kept)")
    args = ap.parse_args()
    folder = Path(args.db)
    url = f"sqlite:///{folder / 'results.db'}"
    if not (folder / "results.db").exists():
        folder.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        G.build(folder, models=MODELS, tasks=TASKS, name="bench-sweep-end")
        print(f"built 216 simulated runs in {time.perf_counter() - t0:.1f} s")
    plan = str(folder / "plan.yaml")
    where = ["--db", url, "--sweep", "bench-sweep-end"]
    fit = scaling("fit", *where)  # stores the fits: everything below may reuse them
    times = {
        "scaling fit (stored fits reused)": scaling("fit", *where),
        "scaling report": scaling("report", *where, "--output", str(folder / "report.html")),
        "scaling recommend": scaling("recommend", *where),
        "scaling sweep (nothing to train)": scaling("sweep", plan, "--db", url),
    }
    print(f"scaling fit (first, storing): {fit:.1f} s")
    for what, seconds in times.items():
        print(f"{what}: {seconds:.1f} s")
    ratio = times["scaling sweep (nothing to train)"] / fit
    print(f"finished sweep / scaling fit: {ratio:.2f}x (target <= 1.3x)")


if __name__ == "__main__":
    main()
