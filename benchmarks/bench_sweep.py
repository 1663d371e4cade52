"""Orchestration overhead: a sweep of 8 runs (~10 s each) on Ray vs the same runs in a plain loop.

Run by hand: ``python benchmarks/bench_sweep.py [--steps 250] [--runs 8]``.

Both sides train the same specs with the same trainer and write to a SQLite database (the
loop claims and finishes each run itself), so the difference is what the orchestrator adds:
Ray's start-up, task dispatch, heartbeats, progress reads and bookkeeping. Printed:
- the wall-time ratio sweep / loop with one run at a time (target <= 1.3x, Ray start-up included);
- the same with as many runs at once as the machine's cores allow (what users get);
- the per-run scheduling overhead in seconds, with and without Ray's start-up.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml


def write_plan(path: Path, name: str, runs_dir: Path, runs: int, steps: int, cpus: int) -> Path:
    plan = {
        "name": name,
        "runs_dir": str(runs_dir),
        "model": {"aspect_ratio": 16, "head_size": 16, "context": 64},
        "train": {
            "precision": "fp32",
            "batch_tokens": 2048,
            "eval_interval": 10_000,
            "eval_tokens": 8192,
            "checkpoint_interval": 100,
        },
        "resources": {"num_cpus": cpus},
        "seeds": list(range(runs)),
        "grid": [{"models": [{"n_layer": 2, "d_model": 32, "n_head": 2}], "tokens": [2048 * steps]}],
    }
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def plain_loop(plan_path: Path, url: str, runs_dir: Path) -> float:
    """The baseline: the same runs, one after another, in this process."""
    import torch

    from scaling.db import Store
    from scaling.orchestrator.expand import expand
    from scaling.orchestrator.plan import load_plan
    from scaling.orchestrator.sweep import register
    from scaling.trainer import train

    torch.set_num_threads(1)
    plan, source = load_plan(plan_path)
    expansion = expand(plan, source)
    store = Store(url)
    register(store, plan, expansion)
    t0 = time.perf_counter()
    for run in expansion.runs:
        attempt = store.claim(run.key, "bench", sweep=plan.name)
        res = train(run.spec, url, runs_dir / plan.name / run.key, attempt=attempt, sweep=plan.name)
        store.finish(run.key, "completed", final_train_loss=res.final_train_loss,
                     final_eval_loss=res.final_eval_loss, sweep=plan.name)
    return time.perf_counter() - t0


def sweep(plan_path: Path, url: str, max_concurrent: int) -> tuple[float, float, float]:
    """(total wall including Ray start-up and shutdown, Ray start-up alone, mean per-run overhead)."""
    import ray

    from scaling.orchestrator import sweep as sweep_mod

    start_ray = sweep_mod.start_ray
    ray_start: list[float] = []

    def timed_start(*a, **kw):  # measure Ray's start-up inside the sweep
        t = time.perf_counter()
        start_ray(*a, **kw)
        ray_start.append(time.perf_counter() - t)

    sweep_mod.start_ray = timed_start
    try:
        t0 = time.perf_counter()
        result = sweep_mod.run_sweep(plan_path, db=url, max_concurrent=max_concurrent, fit=False, report=False,
                                     echo=lambda s: None)
        wall = time.perf_counter() - t0
    finally:
        sweep_mod.start_ray = start_ray
        if ray.is_initialized():
            ray.shutdown()
    out = result.outcome
    assert out is not None and len(out.completed) > 0, result
    per_run = sum(out.overhead_seconds.values()) / max(1, len(out.overhead_seconds))
    return wall, ray_start[0], per_run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--steps", type=int, default=250, help="steps per run (~10 s on a laptop core)")
    ap.add_argument("--cpus", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_sweep_"))
    url = f"sqlite:///{tmp / 'bench.db'}"
    results = {}
    # Loop first, then sweeps with 1 and with `cpus` runs at once (distinct sweep names, fresh runs).
    loop_plan = write_plan(tmp / "loop.yaml", "loop", tmp / "runs", args.runs, args.steps, args.cpus)
    results["loop"] = plain_loop(loop_plan, url, tmp / "runs")
    print(f"plain loop: {results['loop']:.1f}s for {args.runs} runs ({results['loop'] / args.runs:.1f}s each)",
          flush=True)
    for k in (1, args.cpus):
        # Different seeds' offsets keep the keys apart from the loop's runs (a key lives in one sweep).
        p = write_plan(tmp / f"sweep{k}.yaml", f"sweep{k}", tmp / "runs", args.runs, args.steps + k, args.cpus)
        wall, ray_s, per_run = sweep(p, url, k)
        results[f"sweep{k}"] = (wall, ray_s, per_run)
        print(f"sweep, {k} at once: {wall:.1f}s (Ray start-up {ray_s:.1f}s, measured dispatch+collect "
              f"{per_run:.2f}s per run)", flush=True)
    loop = results["loop"]
    wall1, ray1, per_run1 = results["sweep1"]
    wallk, _, _ = results[f"sweep{args.cpus}"]
    print()
    print(f"ratio sweep(1 at once) / loop           : {wall1 / loop:.2f}x  (target <= 1.3x, Ray start-up included)")
    print(f"ratio sweep({args.cpus} at once) / loop           : {wallk / loop:.2f}x")
    print(f"per-run scheduling overhead             : {(wall1 - loop) / args.runs:.2f}s "
          f"(wall difference incl. Ray start-up), {(wall1 - ray1 - loop) / args.runs:.2f}s (excl.)")
    print(f"per-run dispatch + collect, measured    : {per_run1:.2f}s (task submit -> trainer start, "
          f"trainer end -> driver)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
