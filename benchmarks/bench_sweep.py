"""Orchestration overhead: a sweep of 8 runs (~10 s each) on Ray vs the same runs in a plain loop.

Run by hand: ``python benchmarks/bench_sweep.py [--steps 250] [--runs 8]``.

``--read URL [--sweep NAME]`` times reading a large sweep (``status``, ``runs``, ``fit``, ``report``
and the report's load in headless Chromium), e.g. the 10,000-run sweep kept by
``--scale 10000 --out /tmp/sweep10k`` (``--read sqlite:////tmp/sweep10k/scale.db``).

``--scale 250,1000,4000,10000`` instead runs the scale series: simulated sweeps (milliseconds of
"training" each, no fit, no report) of each size into SQLite, printing runs/s and the driver's
orchestration time per run (its CPU seconds per run), and the ratio of the largest size's
per-run time to the smallest's (goal: <= 1.5x; and >= 100 runs/s on 2 cores). With
``--postgres URL`` the largest sweep is run into PostgreSQL too, then two sweeps of
``--concurrent`` runs of one plan at once from two processes into that database; a query then
counts each run's trainings and its metric rows (every run exactly once, every row once).

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


#: The law simulated runs draw their losses from (Chinchilla-like).
LAW = {"E": 1.8, "A": 480.0, "B": 2100.0, "alpha": 0.35, "beta": 0.37}
#: Sizes of the scale series' grid (each seed adds this many runs).
SCALE_MODELS = [1e7, 2e7, 5e7, 1e8, 2e8, 5e8, 1e9, 2e9, 5e9, 1e10]


def write_simulated_plan(path: Path, name: str, runs_dir: Path, runs: int, cpus: int) -> Path:
    """A simulated sweep of ``runs`` runs (a multiple of len(SCALE_MODELS)): sizes x seeds at one budget."""
    plan = {
        "name": name,
        "runs_dir": str(runs_dir),
        "simulate": {"law": LAW, "noise": 0.005, "seed": 0},
        "train": {"batch_tokens": 4 * 1024 * 1024},
        "resources": {"num_cpus": cpus},
        "seeds": list(range(max(1, runs // len(SCALE_MODELS)))),
        "grid": [{"models": SCALE_MODELS, "compute": [1e22]}],
    }
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def simulated_sweep(plan_path: Path, url: str) -> dict[str, float]:
    """Run one simulated sweep; its runs, scheduling wall time, the driver's CPU time and Ray's start-up."""
    import ray

    from scaling.orchestrator import scheduler as sched_mod
    from scaling.orchestrator import sweep as sweep_mod

    timings: dict[str, float] = {}
    start_ray, run = sweep_mod.start_ray, sched_mod.Scheduler.run

    def timed_start(*a, **kw):
        t = time.perf_counter()
        start_ray(*a, **kw)
        timings["ray_s"] = time.perf_counter() - t

    def timed_run(self):  # the scheduling loop alone: Ray is up, the runs registered
        t, cpu = time.perf_counter(), time.process_time()
        try:
            return run(self)
        finally:
            timings["wall_s"] = time.perf_counter() - t
            timings["cpu_s"] = time.process_time() - cpu

    sweep_mod.start_ray, sched_mod.Scheduler.run = timed_start, timed_run
    try:
        t0 = time.perf_counter()
        result = sweep_mod.run_sweep(plan_path, db=url, fit=False, report=False, echo=lambda s: None)
        timings["total_s"] = time.perf_counter() - t0
    finally:
        sweep_mod.start_ray, sched_mod.Scheduler.run = start_ray, run
        if ray.is_initialized():
            ray.shutdown()
    out = result.outcome
    assert out is not None and out.ok, out
    timings["runs"] = float(len(out.completed))
    return timings


def scale_series(sizes: list[int], cpus: int, tmp: Path) -> None:
    url = f"sqlite:///{tmp / 'scale.db'}"
    print(f"{'runs':>6} {'runs/s':>8} {'driver ms/run':>14} {'wall ms/run':>12} {'loop s':>8} {'total s':>8}")
    per_run: dict[int, float] = {}
    rates: dict[int, float] = {}
    for n in sizes:
        plan = write_simulated_plan(tmp / f"scale{n}.yaml", f"scale{n}", tmp / "runs", n, cpus)
        t = simulated_sweep(plan, url)
        runs = int(t["runs"])
        rates[n] = runs / t["wall_s"]
        per_run[n] = t["cpu_s"] / runs
        print(f"{runs:>6} {rates[n]:>8.1f} {1e3 * per_run[n]:>14.2f} {1e3 * t['wall_s'] / runs:>12.2f} "
              f"{t['wall_s']:>8.1f} {t['total_s']:>8.1f}", flush=True)
    lo, hi = min(sizes), max(sizes)
    print(f"\ndriver time per run at {hi} / at {lo}: {per_run[hi] / per_run[lo]:.2f}x (goal <= 1.5x); "
          f"runs/s at {hi}: {rates[hi]:.1f} (goal >= 100 on 2 cores)", flush=True)


def postgres_series(url: str, n: int, concurrent: int, cpus: int, tmp: Path) -> None:
    """The largest sweep into PostgreSQL, then two drivers of one plan at once; counted by a query."""
    import subprocess

    plan = write_simulated_plan(tmp / f"pg{n}.yaml", f"pg{n}", tmp / "runs", n, cpus)
    t = simulated_sweep(plan, url)
    print(f"PostgreSQL, {int(t['runs'])} runs: {t['runs'] / t['wall_s']:.1f} runs/s, "
          f"driver {1e3 * t['cpu_s'] / t['runs']:.2f} ms/run", flush=True)
    twin = write_simulated_plan(tmp / "twin.yaml", "twin", tmp / "runs", concurrent, max(1, cpus // 2))
    cmd = [sys.executable, "-c", "from scaling.cli import main; main()", "sweep", str(twin), "--db", url, "--no-fit", "--no-report"]
    t0 = time.perf_counter()
    procs = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    errs = [p.communicate()[1] for p in procs]
    wall = time.perf_counter() - t0
    for p, err in zip(procs, errs):
        assert p.returncode == 0, err
    for sweep_name, path in ((f"pg{n}", plan), ("twin", twin)):
        counts = count_once(url, sweep_name)
        runs, rows = expected_rows(path)
        print(f"{sweep_name}: {counts['runs']} runs (expected {runs}), {counts['completed']} completed, "
              f"{counts['trained_twice']} trained more than once, {counts['rows']} metric rows (expected {rows}), "
              f"{counts['duplicate_rows']} duplicated", flush=True)
    print(f"two drivers of {concurrent} runs at once: {wall:.1f}s", flush=True)


def expected_rows(plan_path: Path) -> tuple[int, int]:
    """The plan's runs and the metric rows the simulator writes for them (train and eval losses)."""
    from scaling.orchestrator.expand import expand
    from scaling.orchestrator.plan import load_plan
    from scaling.trainer.simulate import EVAL_POINTS, log_steps

    plan, source = load_plan(plan_path)
    runs = expand(plan, source).runs
    sim = plan.simulate
    assert sim is not None
    rows = sum(len(log_steps(r.spec.steps, sim.points)) + len(log_steps(r.spec.steps, EVAL_POINTS)) for r in runs)
    return len(runs), rows


def count_once(url: str, sweep_name: str) -> dict[str, int]:
    """Runs, trainings per run (the simulator's one event per attempt) and metric rows, by SQL."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    q = {
        "runs": "SELECT count(*) FROM runs r JOIN sweeps s ON s.id = r.sweep_id WHERE s.name = :s",
        "completed": "SELECT count(*) FROM runs r JOIN sweeps s ON s.id = r.sweep_id "
                     "WHERE s.name = :s AND r.status = 'completed'",
        "trained_twice": "SELECT count(*) FROM (SELECT e.run_id FROM events e JOIN runs r ON r.id = e.run_id "
                         "JOIN sweeps s ON s.id = r.sweep_id WHERE s.name = :s AND e.kind = 'simulated' "
                         "GROUP BY e.run_id HAVING count(*) > 1) t",
        "rows": "SELECT count(*) FROM metrics m JOIN runs r ON r.id = m.run_id JOIN sweeps s ON s.id = r.sweep_id "
                "WHERE s.name = :s",
        "duplicate_rows": "SELECT count(*) FROM (SELECT m.run_id FROM metrics m JOIN runs r ON r.id = m.run_id "
                          "JOIN sweeps s ON s.id = r.sweep_id WHERE s.name = :s "
                          "GROUP BY m.run_id, m.step, m.name_id HAVING count(*) > 1) t",
    }
    with engine.connect() as conn:
        out = {k: int(conn.execute(text(sql), {"s": sweep_name}).scalar_one()) for k, sql in q.items()}
    engine.dispose()
    return out


def read_series(url: str, sweep: str, tmp: Path) -> None:
    """Reading a large sweep: each command as a user runs it (a fresh process, CPU and wall time), the
    notebook API in this process, and the report's size and load time in headless Chromium.

    ``scaling fit`` runs on a copy of a SQLite database without stored fits (its first fit), then
    again on that copy (the stored fit reused); the report fits as it does by default."""
    import shutil
    import subprocess

    def timed(args: list[str], db: str = url) -> tuple[float, float]:
        t0, c0 = time.perf_counter(), os.times()
        proc = subprocess.run([sys.executable, "-c", "from scaling.cli import main; main()", *args, "--db", db,
                               "--sweep", sweep], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        c1 = os.times()
        assert proc.returncode == 0, proc.stderr[-2000:]
        return time.perf_counter() - t0, (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)

    fresh = url
    if url.startswith("sqlite:///"):
        copy = tmp / "read-copy.db"
        shutil.copyfile(url[len("sqlite:///"):], copy)
        fresh = f"sqlite:///{copy}"
    print(f"{'what':<34} {'wall s':>8} {'CPU s':>8}", flush=True)
    for label, args, db in (("scaling status", ["status"], url), ("scaling runs", ["runs"], url),
                            ("scaling fit (first fit)", ["fit"], fresh), ("scaling fit (stored fit)", ["fit"], fresh),
                            ("scaling report", ["report", "-o", str(tmp / "report.html")], url)):
        wall, cpu = timed(args, db)
        print(f"{label:<34} {wall:>8.1f} {cpu:>8.1f}", flush=True)
    import scaling

    t0, c0 = time.perf_counter(), time.process_time()
    with scaling.connect(url) as res:
        runs = res.runs(sweep=sweep)
        last = res.last_metrics(sweep=sweep)
    print(f"{'notebook: runs() + last_metrics()':<34} {time.perf_counter() - t0:>8.1f} {time.process_time() - c0:>8.1f}"
          f"   ({len(runs):,} runs, {len(last):,} rows)", flush=True)
    report = tmp / "report.html"
    print(f"report: {report.stat().st_size / 1e6:.1f} MB; Chromium load (to every figure drawn): "
          f"{chromium_load(report):.1f} s", flush=True)


def chromium_load(path: Path) -> float:
    """Seconds from opening ``path`` in headless Chromium to every figure drawn (``data-rendered``), scrolling to
    each in turn (a figure is drawn as it nears the viewport)."""
    from playwright.sync_api import sync_playwright

    exe = os.environ.get("SCALING_CHROMIUM") or "/usr/bin/chromium"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, headless=True, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        t0 = time.perf_counter()
        page.goto(path.resolve().as_uri(), wait_until="load", timeout=600_000)
        page.evaluate("""async () => { for (const d of document.querySelectorAll('.figure')) {
                           d.scrollIntoView(); await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r()))); } }""")
        page.wait_for_function(
            "Array.from(document.querySelectorAll('.figure')).every(d => d.hasAttribute('data-rendered'))",
            timeout=600_000,
        )
        seconds = time.perf_counter() - t0
        browser.close()
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--steps", type=int, default=250, help="steps per run (~10 s on a laptop core)")
    ap.add_argument("--cpus", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--scale", help="the scale series' sizes, e.g. 250,1000,4000,10000")
    ap.add_argument("--postgres", help="a PostgreSQL URL for the scale series' PostgreSQL part")
    ap.add_argument("--concurrent", type=int, default=1000, help="runs of each of the two concurrent sweeps")
    ap.add_argument("--out", type=Path, help="the scale series' folder (its scale.db is kept for reading "
                    "benchmarks: status, runs, fit, report); default a fresh temporary folder")
    ap.add_argument("--read", metavar="URL", help="time status, runs, fit, report (and its Chromium load) on the "
                    "sweep --sweep of this database, e.g. the scale series' --out folder's scale.db")
    ap.add_argument("--sweep", default="scale10000", help="--read: the sweep to read")
    args = ap.parse_args()
    if args.read:
        read_series(args.read, args.sweep, Path(tempfile.mkdtemp(prefix="bench_read_")))
        return
    if args.scale:
        sizes = [int(float(v)) for v in args.scale.split(",")]
        tmp = args.out or Path(tempfile.mkdtemp(prefix="bench_scale_"))
        tmp.mkdir(parents=True, exist_ok=True)
        scale_series(sizes, args.cpus, tmp)
        if args.postgres:
            postgres_series(args.postgres, max(sizes), args.concurrent, args.cpus, tmp)
        return
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
