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
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # this checkout's scaling, as the timed commands use

import sweep_golden as G  # noqa: E402

MODELS = [{"n_layer": 2, "d_model": d, "n_head": h}
          for d, h in ((16, 2), (24, 3), (32, 2), (48, 3), (64, 4), (96, 4))]
TASKS = [dict(G.TASKS[i % 2], name=f"sim_task{i}") for i in range(4)]


def scaling(*args: str) -> tuple[float, float]:
    """(wall, CPU) seconds of one ``scaling`` command in its own process (imports included, as a user sees
    it). CPU is the command's own user + system time: on a shared machine it is the steadier figure
    (Ray's daemons, which ``scaling sweep`` starts, are not counted)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import sys; from scaling.cli import main; main(sys.argv[1:])", *args],
                   check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


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
    print(f"scaling fit (first, storing): {fit[0]:.1f} s wall, {fit[1]:.1f} s CPU")
    for what, (wall, cpu) in times.items():
        print(f"{what}: {wall:.1f} s wall, {cpu:.1f} s CPU")
    sweep = times["scaling sweep (nothing to train)"]
    print(f"finished sweep / scaling fit: {sweep[0] / fit[0]:.2f}x wall, {sweep[1] / fit[1]:.2f}x CPU (target <= 1.3x)")


if __name__ == "__main__":
    main()
