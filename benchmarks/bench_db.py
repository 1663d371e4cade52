"""Metric ingestion and read-back: `Store.log_metrics` vs MLflow's `log_batch`, both into SQLite.

Run by hand (numbers are printed, nothing is asserted):

    python benchmarks/bench_db.py [--rows 1000000] [--batch 1000] [--mlflow-rows 100000]

MLflow is not a dependency of scaling. The benchmark uses it when `import mlflow` works in this
interpreter, or runs that part with the interpreter named by $MLFLOW_PYTHON (e.g. a separate
venv: `python -m venv /tmp/mlflow-venv && /tmp/mlflow-venv/bin/pip install mlflow`, so that
MLflow's own pins do not change the project's environment); otherwise it says so and skips it.

Targets (docs/architecture.md): ingestion at least 20x MLflow's rows/s; 1,000,000 rows read back
as a DataFrame in at most 3 s, printed next to plain `sqlite3` fetching the same rows.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

METRIC_NAMES = ("train/loss", "train/lr", "train/grad_norm", "perf/tokens_per_s")
RUNS = 10

# MLflow's side, run in whichever interpreter has MLflow: rows of the same shape, its own SQLite
# store, batches of at most 1,000 metrics (MLflow's limit per log_batch call).
MLFLOW_SCRIPT = r"""
import json, sys, time
import mlflow
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient
uri, rows, batch, names = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split(",")
client = MlflowClient(tracking_uri=uri)
run_id = client.create_run(client.create_experiment("bench")).info.run_id
ts = int(time.time() * 1000)
steps = rows // len(names)
t0, c0 = time.perf_counter(), time.process_time()
for start in range(0, steps, batch // len(names)):
    metrics = [Metric(n, 1.0 / (s + 1), ts, s) for s in range(start, min(start + batch // len(names), steps)) for n in names]
    client.log_batch(run_id, metrics=metrics)
dt, cpu = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps({"rows": steps * len(names), "seconds": dt, "cpu_seconds": cpu, "mlflow": mlflow.__version__}))
"""


def bench_scaling(url: str, rows: int, batch: int) -> tuple[float, float]:
    """Wall and CPU seconds to write ``rows`` metric rows through `Store.log_metrics` in batches of ``batch``."""
    from scaling.db import Store
    from scaling.trainer.spec import RunSpec

    store = Store(url)
    recs = [RunSpec(model={"n_layer": 2, "d_model": 64, "n_head": 2}, tokens=65536, seed=i).record() for i in range(RUNS)]
    store.register("bench", recs)
    steps_per_run = rows // (RUNS * len(METRIC_NAMES))
    steps_per_batch = max(1, batch // len(METRIC_NAMES))
    t0, c0 = time.perf_counter(), time.process_time()
    for rec in recs:
        for start in range(0, steps_per_run, steps_per_batch):
            stop = min(start + steps_per_batch, steps_per_run)
            store.log_metrics(
                rec["key"], [(s, s * 8192, s * 8192 * 6e5, n, 1.0 / (s + 1)) for s in range(start, stop) for n in METRIC_NAMES]
            )
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    store.close()
    return seconds, cpu


def bench_mlflow(folder: Path, rows: int, batch: int) -> dict | None:
    """MLflow's rows/s into its own SQLite store, or None (with a message) when MLflow is absent."""
    python = sys.executable
    try:
        import mlflow  # noqa: F401
    except ImportError:
        python = os.environ.get("MLFLOW_PYTHON", "")
        if not python:
            print("MLflow: skipped (not installed here and $MLFLOW_PYTHON not set; see this file's docstring)")
            return None
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    env = dict(os.environ, MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR="false")
    done = subprocess.run(
        [python, "-c", MLFLOW_SCRIPT, uri, str(rows), str(min(batch, 1000)), ",".join(METRIC_NAMES)],
        capture_output=True, text=True, cwd=folder, env=env,
    )  # fmt: skip
    if done.returncode:
        print(f"MLflow: failed\n{done.stderr[-2000:]}")
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def best_of(n: int, fn) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    best, out = float("inf"), None
    for _ in range(n):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=1000, help="rows per log_metrics / log_batch call")
    ap.add_argument("--mlflow-rows", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=5, help="reads are timed this many times; best shown")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-db-") as tmp:
        folder = Path(tmp)
        path = folder / "scaling.db"
        url = f"sqlite:///{path}"
        print(f"CPU cores: {os.cpu_count()}, load average: {os.getloadavg()[0]:.1f}")

        seconds, cpu = bench_scaling(url, args.rows, args.batch)
        ours, ours_cpu = args.rows / seconds, args.rows / cpu
        print(
            f"scaling  log_metrics: {args.rows:>9,} rows in {seconds:6.2f} s = {ours:>10,.0f} rows/s "
            f"({ours_cpu:,.0f} rows per CPU-second; batches of {args.batch})"
        )

        ml = bench_mlflow(folder, args.mlflow_rows, args.batch)
        if ml is not None:
            theirs, theirs_cpu = ml["rows"] / ml["seconds"], ml["rows"] / ml["cpu_seconds"]
            print(
                f"MLflow {ml['mlflow']} log_batch: {ml['rows']:>9,} rows in {ml['seconds']:6.2f} s = {theirs:>10,.0f} rows/s "
                f"({theirs_cpu:,.0f} rows per CPU-second)"
            )
            print(
                f"ingestion ratio scaling/MLflow: {ours / theirs:.1f}x wall, {ours_cpu / theirs_cpu:.1f}x CPU "
                "(target >= 20x; the CPU ratio is the steadier one on a loaded machine)"
            )

        from scaling.db import connect

        res = connect(url)
        sql = "SELECT run_id, step, tokens, flops, name_id, value FROM metrics ORDER BY run_id, step, name_id"

        def plain() -> list:
            conn = sqlite3.connect(path)
            try:
                return conn.execute(sql).fetchall()
            finally:
                conn.close()

        def read_sql() -> object:
            """The obvious alternative: pandas.read_sql on the joined select() (names as text)."""
            import pandas as pd
            from sqlalchemy import create_engine, select

            from scaling.db.models import Metric, MetricName, Run

            q = (
                select(Run.key.label("run_key"), Metric.step, Metric.tokens, Metric.flops, MetricName.name, Metric.value)
                .join(Run, Run.id == Metric.run_id)
                .join(MetricName, MetricName.id == Metric.name_id)
                .order_by(Metric.run_id, Metric.step, Metric.name_id)
            )
            engine = create_engine(url)
            try:
                with engine.connect() as conn:
                    return pd.read_sql(q, conn)
            finally:
                engine.dispose()

        # Alternate the readers within each repeat so a load spike on a shared machine hits
        # them alike; report each one's best.
        times: dict[str, float] = {"df": float("inf"), "raw": float("inf"), "pd": float("inf")}
        for _ in range(args.repeats):
            for label, fn in (("df", res.metrics), ("raw", plain), ("pd", read_sql)):
                t, out = best_of(1, fn)
                times[label] = min(times[label], t)
                if label == "df":
                    df = out
                elif label == "raw":
                    raw = out
        res.close()
        t_df, t_raw, t_pd = times["df"], times["raw"], times["pd"]
        assert len(df) == len(raw) == args.rows, (len(df), len(raw))  # type: ignore[arg-type]
        print(f"read {len(df):,} rows: connect().metrics() DataFrame {t_df:.2f} s (target <= 3 s); "
              f"plain sqlite3 fetchall {t_raw:.2f} s; ratio {t_df / t_raw:.2f}x (best of {args.repeats})")  # fmt: skip
        print(f"  (for reference: pandas.read_sql on the joined select() {t_pd:.2f} s)")


if __name__ == "__main__":
    main()
