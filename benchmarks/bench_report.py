"""Benchmark: the HTML report of a large sweep (500 runs x 2,000 steps), time to write and size.

Targets: under 20 s and under 15 MB. The database is synthetic (tests/reports/report_synth.py:
an IsoFLOP grid of 10 budgets x 50 sizes, losses from a known law, written through the real
Store API: train loss, lr, grad norm, tokens/s and MFU every step, eval loss every 100 steps,
about 5 million metric rows). It is built once and kept (``--db``); fits are made and stored
first, as at the end of ``scaling sweep`` (timed on their own), so the report reuses them.

Baseline, measured in the same run: plotly's own ``write_html`` of one figure with every train-loss
point of every run (go.Scatter, plotly.js inlined), the naive way to plot these curves.

    python benchmarks/bench_report.py [--db /tmp/scaling-bench-report.db] [--out /tmp/bench-report.html]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "reports"))

import report_synth as S  # noqa: E402

SWEEP = "bench-500x2000"
BUDGETS = tuple(float(c) for c in (1e13, 2e13, 5e13, 1e14, 2e14, 5e14, 1e15, 2e15, 5e15, 1e16))
RUNS, STEPS = 500, 2000


def build(url: str) -> float:
    t0 = time.perf_counter()
    spec = S.SweepSpec(
        sweep=SWEEP, budgets=BUDGETS, sizes_per_budget=RUNS // len(BUDGETS), steps=STEPS, eval_every=100,
        perf_every=1, extra_metrics=True, repeat_shapes=True, failures=(7, 123), spikes=(3, 250, 400),
    )
    S.build(url, spec)
    return time.perf_counter() - t0


def naive_baseline(url: str, out: Path) -> tuple[float, int]:
    """Every train-loss point of every run in one plotly figure, written by plotly itself."""
    import plotly.graph_objects as go

    from scaling.db import connect
    from scaling import vocab as names

    t0 = time.perf_counter()
    m = connect(url).metrics(sweep=SWEEP, names=[names.TRAIN_LOSS])
    fig = go.Figure()
    for key, g in m.groupby("run_key", sort=False):
        fig.add_trace(go.Scatter(x=g["flops"].to_numpy(), y=g["value"].to_numpy(), mode="lines", name=key))
    fig.update_layout(xaxis_type="log", yaxis_type="log")
    fig.write_html(out, include_plotlyjs=True)
    return time.perf_counter() - t0, out.stat().st_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", default="/tmp/scaling-bench-report.db", help="SQLite file (built if missing)")
    ap.add_argument("--out", default="/tmp/bench-report.html")
    args = ap.parse_args()
    db = Path(args.db)
    url = f"sqlite:///{db.resolve()}"
    if not db.exists():
        print(f"building {RUNS} runs x {STEPS} steps into {db} ...", flush=True)
        print(f"  built in {build(url):.1f} s", flush=True)
    from scaling.db import connect

    runs = connect(url).runs(sweep=SWEEP)
    print(f"database: {db} ({db.stat().st_size / 1e6:.0f} MB), {len(runs)} runs")

    from scaling.fitting import fit_sweep
    from scaling.reports import write_report

    t0 = time.perf_counter()
    summary = fit_sweep(url, SWEEP)
    fit_s = time.perf_counter() - t0
    print(f"fits (made or reused, stored): {fit_s:.1f} s; reused: {summary.reused or 'none'}")

    out = Path(args.out)
    t0, c0 = time.perf_counter(), time.process_time()
    write_report(url, SWEEP, out)  # fit="sweep": reuses the stored fits after checking the data
    report_s, report_cpu = time.perf_counter() - t0, time.process_time() - c0
    size = out.stat().st_size

    from scaling.reports.data import ReportData
    from scaling.reports.html import write_report_data

    t0, c0 = time.perf_counter(), time.process_time()
    data = ReportData.load(url, SWEEP, fit="stored")
    load_s, load_cpu = time.perf_counter() - t0, time.process_time() - c0
    t1, c1 = time.perf_counter(), time.process_time()
    write_report_data(data, out.with_name(out.stem + "-stored.html"))
    render_s, render_cpu = time.perf_counter() - t1, time.process_time() - c1
    stored_s = load_s + render_s

    base = out.with_name(out.stem + "-naive.html")
    naive_s, naive_size = naive_baseline(url, base)

    print(f"report (fit=sweep, reusing stored fits): {report_s:.1f} s wall, {report_cpu:.1f} s CPU, {size / 1e6:.2f} MB  -> {out}")
    print(f"report (fit=stored, read-only):          {stored_s:.1f} s wall (read {load_s:.1f} s / {load_cpu:.1f} s CPU, "
          f"render {render_s:.1f} s / {render_cpu:.1f} s CPU)")
    print(f"naive plotly write_html of the raw curves: {naive_s:.1f} s, {naive_size / 1e6:.1f} MB -> {base}")
    print(f"ratios vs naive: time {report_s / naive_s:.2f}x, size {size / naive_size:.3f}x")
    try:
        import os

        print(f"load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    except OSError:
        pass
    print(f"targets: time < 20 s: {'met' if report_s < 20 else 'NOT met'}; size < 15 MB: {'met' if size < 15e6 else 'NOT met'}")


if __name__ == "__main__":
    main()
