"""`scaling plan` on large plans: seconds and peak memory at 10,000 and 100,000 runs.

Run by hand: ``python benchmarks/bench_plan.py [--sizes 10000 100000] [--baseline /path/to/other/checkout]``.
Each size is a simulated plan of 10 models x token budgets x 20 learning rates x 5 batches (one
hyperparameter group per model and budget), written to a temporary folder; each is planned in a
fresh process (the command line's ``scaling plan``, its table printed to a file), which reports
its wall seconds, CPU seconds and peak resident memory. ``--baseline`` plans the same files with
another checkout of the project (e.g. the main branch) in the same run, so the two are measured
on the same machine under the same load. The target (docs/benchmarks.md): 100,000 runs in 15 s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

import yaml

ROOT = Path(__file__).resolve().parents[1]

#: The child process: plan one file as `scaling plan` does, print its figures as JSON.
CHILD = """
import json, resource, sys, time
t0, c0 = time.perf_counter(), time.process_time()
from scaling.cli import main
sys.argv = ["scaling", "plan", sys.argv[1]]
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
figures = {"seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0,
           "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "exit": code}
print(json.dumps(figures), file=sys.stderr)
"""


def plan(runs: int) -> dict[str, Any]:
    """A simulated plan of ``runs`` runs: 10 models x runs / 1000 budgets x 20 lrs x 5 batches."""
    budgets = runs // 1000
    return {
        "name": f"bench-plan-{runs}",
        "simulate": {"law": {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}, "noise": 0.005,
                     "seed": 0},
        "model": {"vocab_size": 1024, "context": 128},
        "train": {"batch_tokens": 512, "optimizer": {"lr": 1e-2}},
        "grid": [{
            "models": [{"n_layer": 2, "d_model": 16 * (i + 1), "n_head": 2} for i in range(10)],
            "tokens": [float(round(1e7 * 1.05 ** j)) for j in range(budgets)],
            "hparams": {"lr": [round(1e-3 * 1.3 ** k, 8) for k in range(20)],
                        "batch_tokens": [128 * 2 ** k for k in range(5)]},
        }],
    }


def measure(checkout: Path, path: Path) -> dict[str, Any]:
    """Plan ``path`` with the project at ``checkout`` in a fresh process; its figures."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    with open(path.with_suffix(".out"), "w") as out:
        done = subprocess.run([sys.executable, "-c", CHILD, str(path.resolve())], env=env, cwd=checkout, stdout=out,
                              stderr=subprocess.PIPE, text=True, check=False)
    lines = done.stderr.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        return {"error": (lines[-1] if lines else f"exit {done.returncode}")[:200]}


def shown(figures: Optional[dict[str, Any]]) -> str:
    if figures is None:
        return ""
    if "error" in figures:
        return f"failed: {figures['error']}"
    return (f"{figures['seconds']:7.1f} s wall, {figures['cpu_seconds']:7.1f} s CPU, "
            f"{figures['peak_mib']:7.0f} MiB peak (exit {figures['exit']})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000], help="runs per plan (multiples of 1000)")
    ap.add_argument("--baseline", type=Path, default=None, help="another checkout to measure on the same files")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for runs in args.sizes:
            path = Path(tmp) / f"plan-{runs}.yaml"
            path.write_text(yaml.safe_dump(plan(runs)))
            print(f"{runs:>7,} runs  this checkout: {shown(measure(ROOT, path))}", flush=True)
            if args.baseline is not None:
                print(f"{'':>13}baseline:      {shown(measure(args.baseline.resolve(), path))}", flush=True)


if __name__ == "__main__":
    main()
