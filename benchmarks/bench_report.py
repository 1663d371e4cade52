"""Benchmark: the HTML report of a large sweep: time to write it, its size, and time to first screen.

Two sweeps:

* default: a 1,000-run simulated sweep (``simulate:`` runs through the real ``scaling sweep``: Ray,
  SQLite, 10 IsoFLOP budgets x 20 sizes x 5 seeds, losses from a known law). Targets: the report
  written in under 10 s (fits stored first, as at the end of ``scaling sweep``, and reused) and its
  first screen drawn in under 3 s in headless Chromium.
* ``--synthetic``: 500 runs x 2,000 steps of every metric (tests/reports/report_synth.py, about 5
  million metric rows). Targets: under 20 s and under 15 MB; baseline, measured in the same run:
  plotly's own ``write_html`` of one figure with every train-loss point of every run.

"First screen": from navigation start in headless Chromium (laptop viewport 1280 x 720) to the first
contentful paint done and every figure inside the viewport drawn (``data-rendered``), measured in
the page at each animation frame; the figures below it are drawn as they scroll into view. Also
printed: first contentful paint, the load event, and the time to draw every figure when the page
is scrolled to each in turn.

    python benchmarks/bench_report.py [--db PATH] [--out PATH] [--synthetic] [--docs] [--baseline CHECKOUT]

``--docs`` writes the figures, dated, into docs/benchmarks.md (between its ``bench_report`` markers).
The databases are built once and kept (``--db``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "reports"))

#: The synthetic sweep (``--synthetic``).
SWEEP = "bench-500x2000"
BUDGETS = tuple(float(c) for c in (1e13, 2e13, 5e13, 1e14, 2e14, 5e14, 1e15, 2e15, 5e15, 1e16))
RUNS, STEPS = 500, 2000

#: The simulated sweep (default): budgets x sizes x seeds = 1,000 runs.
SIM_SWEEP = "bench-sim1000"
SIM_BUDGETS = [1e18, 3e18, 1e19, 3e19, 1e20, 3e20, 1e21, 3e21, 1e22, 3e22]
SIM_SIZES, SIM_SEEDS = 20, 5
LAW = {"E": 1.8, "A": 480.0, "B": 2100.0, "alpha": 0.35, "beta": 0.37}
VIEWPORT = {"width": 1280, "height": 720}
FIRST_SCREEN_S, WRITE_S = 3.0, 10.0


def simulated_plan(path: Path, runs_dir: Path) -> Path:
    """10 budgets, each with 20 sizes from 1/8 to 8 times its compute-optimal N (about 20 tokens per
    parameter), 5 seeds: 1,000 simulated runs."""
    import numpy as np
    import yaml

    grid = []
    for c in SIM_BUDGETS:
        n_opt = (c / 120.0) ** 0.5
        sizes = [float(f"{n:.3g}") for n in np.geomspace(n_opt / 8, n_opt * 8, SIM_SIZES)]
        grid.append({"compute": [c], "models": sizes})
    plan = {"name": SIM_SWEEP, "runs_dir": str(runs_dir), "simulate": {"law": LAW, "noise": 0.01, "seed": 0},
            "model": {"aspect_ratio": 64, "head_size": 64, "vocab_size": 32000, "context": 2048},
            "train": {"batch_tokens": 4 * 1024 * 1024}, "resources": {"num_cpus": os.cpu_count() or 2},
            "seeds": list(range(SIM_SEEDS)), "grid": grid}
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def build_simulated(url: str, folder: Path) -> float:
    """Run the 1,000-run simulated sweep through ``run_sweep`` (no fit, no report); its seconds."""
    import ray

    from scaling.orchestrator.sweep import run_sweep

    folder.mkdir(parents=True, exist_ok=True)
    plan = simulated_plan(folder / "plan.yaml", folder / "runs")
    t0 = time.perf_counter()
    try:
        result = run_sweep(plan, db=url, fit=False, report=False, echo=lambda s: None)
    finally:
        if ray.is_initialized():
            ray.shutdown()
    assert result.outcome is not None and result.outcome.ok, result.outcome
    return time.perf_counter() - t0


def build_synthetic(url: str) -> float:
    import report_synth as S

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

    from scaling import vocab as names
    from scaling.db import connect

    t0 = time.perf_counter()
    m = connect(url).metrics(sweep=SWEEP, names=[names.TRAIN_LOSS])
    fig = go.Figure()
    for key, g in m.groupby("run_key", sort=False):
        fig.add_trace(go.Scatter(x=g["flops"].to_numpy(), y=g["value"].to_numpy(), mode="lines", name=key))
    fig.update_layout(xaxis_type="log", yaxis_type="log")
    fig.write_html(out, include_plotlyjs=True)
    return time.perf_counter() - t0, out.stat().st_size


#: In the page, polled at every animation frame: once the first contentful paint is done and every figure
#: that intersects the viewport is drawn, the seconds since navigation start (else null).
FIRST_SCREEN_DRAWN = """() => {
    const painted = performance.getEntriesByName('first-contentful-paint').length > 0;
    const drawn = Array.from(document.querySelectorAll('.figure')).filter(d => {
        const r = d.getBoundingClientRect(); return r.bottom > 0 && r.top < window.innerHeight;
    }).every(d => d.hasAttribute('data-rendered'));
    return painted && drawn && document.getElementById('summary') !== null ? performance.now() / 1000 : null;
}"""
#: Every figure drawn.
ALL_DRAWN = "Array.from(document.querySelectorAll('.figure')).every(d => d.hasAttribute('data-rendered'))"


def chromium_times(path: Path) -> dict[str, float]:
    """Seconds, in a fresh headless Chromium at a laptop's viewport: to the first screen drawn, first
    contentful paint, the load event, and every figure drawn while scrolling to each in turn."""
    from playwright.sync_api import sync_playwright

    exe = os.environ.get("SCALING_CHROMIUM") or "/usr/bin/chromium"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, headless=True, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport=VIEWPORT)
        page.goto(path.resolve().as_uri(), wait_until="commit", timeout=120_000)
        first = page.wait_for_function(FIRST_SCREEN_DRAWN, timeout=120_000, polling="raf").json_value()
        page.wait_for_load_state("load")
        paint = page.evaluate("""() => { const p = performance.getEntriesByName('first-contentful-paint')[0];
                                   const n = performance.getEntriesByType('navigation')[0];
                                   return {fcp: p ? p.startTime / 1000 : NaN, load: n.loadEventEnd / 1000}; }""")
        t1 = time.perf_counter()
        page.evaluate("""async () => { for (const d of document.querySelectorAll('.figure')) { d.scrollIntoView();
                           await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r()))); } }""")
        page.wait_for_function(ALL_DRAWN, timeout=300_000, polling=50)
        scrolled = time.perf_counter() - t1
        figures = page.evaluate("document.querySelectorAll('.figure').length")
        browser.close()
    return {"first_screen": first, "fcp": paint["fcp"], "load": paint["load"], "all_scrolled": scrolled,
            "figures": figures}


def load_average() -> str:
    try:
        return f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    except OSError:
        return "unknown"


def simulated(args: argparse.Namespace) -> dict[str, str]:
    db = Path(args.db or "/tmp/scaling-bench-sim1000.db")
    url = f"sqlite:///{db.resolve()}"
    if not db.exists():
        print(f"running the {len(SIM_BUDGETS) * SIM_SIZES * SIM_SEEDS:,}-run simulated sweep into {db} ...", flush=True)
        print(f"  swept in {build_simulated(url, db.with_suffix('.d')):.1f} s", flush=True)
    from scaling.db import connect
    from scaling.fitting import fit_sweep
    from scaling.reports import write_report

    runs = connect(url).runs(sweep=SIM_SWEEP)
    print(f"database: {db} ({db.stat().st_size / 1e6:.1f} MB), {len(runs):,} runs")
    t0 = time.perf_counter()
    fit_sweep(url, SIM_SWEEP)
    print(f"fits (made or reused, stored): {time.perf_counter() - t0:.1f} s", flush=True)
    out = Path(args.out or "/tmp/bench-report-sim1000.html")
    writes, firsts, results = [], [], []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        write_report(url, SIM_SWEEP, out)  # fit="sweep": the stored fits, reused after checking the data
        writes.append(time.perf_counter() - t0)
    size = out.stat().st_size
    for _ in range(args.repeat):
        r = chromium_times(out)
        results.append(r)
        firsts.append(r["first_screen"])
    w, f = statistics.median(writes), statistics.median(firsts)
    last = {key: statistics.median(r[key] for r in results) for key in results[-1]}  # medians of the loads
    load = load_average()
    print(f"report written: {', '.join(f'{s:.2f}' for s in writes)} s (median {w:.2f} s), {size / 1e6:.2f} MB -> {out}")
    print(f"first screen in headless Chromium: {', '.join(f'{s:.2f}' for s in firsts)} s (median {f:.2f} s); "
          f"medians: first contentful paint {last['fcp']:.2f} s, load event {last['load']:.2f} s; "
          f"all {last['figures']:.0f} figures drawn by scrolling to each: {last['all_scrolled']:.2f} s")
    base = None
    if args.baseline:
        base = baseline(Path(args.baseline), url, out.with_name(out.stem + "-baseline.html"))
        print(f"baseline {args.baseline}: written in {base['write']:.2f} s; first screen {base['first_screen']:.2f} s, "
              f"first contentful paint {base['fcp']:.2f} s, load event {base['load']:.2f} s")
    print(f"load average while measuring: {load}")
    print(f"targets: written < {WRITE_S:.0f} s: {'met' if w < WRITE_S else 'NOT met'}; "
          f"first screen < {FIRST_SCREEN_S:.0f} s: {'met' if f < FIRST_SCREEN_S else 'NOT met'}")
    return {"runs": f"{len(runs):,}", "write": f"{w:.2f}", "size": f"{size / 1e6:.1f}", "first": f"{f:.2f}",
            "fcp": f"{last['fcp']:.2f}", "load": f"{last['load']:.2f}", "scrolled": f"{last['all_scrolled']:.1f}",
            "figures": f"{last['figures']:.0f}", "loadavg": load,
            "baseline": "" if base is None else (
                f"| (baseline: a checkout of `{Path(args.baseline).name}`, one write and one load) | | {base['write']:.2f} s | | "
                f"{base['first_screen']:.2f} s | {base['fcp']:.2f} s | {base['load']:.2f} s | {base['all_scrolled']:.1f} s | |\n")}


def baseline(checkout: Path, url: str, out: Path) -> dict[str, float]:
    """The same report written by another checkout's code (a fresh process in that checkout, so ``import
    scaling`` is its own; the write's time includes the imports the first report of a process makes), and
    opened the same way."""
    import subprocess

    code = ("import sys, time; from scaling.reports import write_report; t = time.perf_counter(); "
            f"write_report({url!r}, {SIM_SWEEP!r}, {str(out)!r}); print(time.perf_counter() - t)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=checkout, env={**os.environ, "PYTHONPATH": str(checkout.resolve())})
    return {"write": float(proc.stdout.split()[-1]), **chromium_times(out)}


def synthetic(args: argparse.Namespace) -> None:
    db = Path(args.db or "/tmp/scaling-bench-report.db")
    url = f"sqlite:///{db.resolve()}"
    if not db.exists():
        print(f"building {RUNS} runs x {STEPS} steps into {db} ...", flush=True)
        print(f"  built in {build_synthetic(url):.1f} s", flush=True)
    from scaling.db import connect
    from scaling.fitting import fit_sweep
    from scaling.reports import write_report
    from scaling.reports.report_data import ReportData
    from scaling.reports.html import write_report_data

    runs = connect(url).runs(sweep=SWEEP)
    print(f"database: {db} ({db.stat().st_size / 1e6:.0f} MB), {len(runs)} runs")
    t0 = time.perf_counter()
    summary = fit_sweep(url, SWEEP)
    print(f"fits (made or reused, stored): {time.perf_counter() - t0:.1f} s; reused: {summary.reused or 'none'}")
    out = Path(args.out or "/tmp/bench-report.html")
    t0, c0 = time.perf_counter(), time.process_time()
    write_report(url, SWEEP, out)
    report_s, report_cpu = time.perf_counter() - t0, time.process_time() - c0
    size = out.stat().st_size
    t0, c0 = time.perf_counter(), time.process_time()
    data = ReportData.load(url, SWEEP, fit="stored")
    load_s, load_cpu = time.perf_counter() - t0, time.process_time() - c0
    t1, c1 = time.perf_counter(), time.process_time()
    write_report_data(data, out.with_name(out.stem + "-stored.html"))
    render_s, render_cpu = time.perf_counter() - t1, time.process_time() - c1
    base = out.with_name(out.stem + "-naive.html")
    naive_s, naive_size = naive_baseline(url, base)
    first = chromium_times(out)
    print(f"report (fit=sweep, reusing stored fits): {report_s:.1f} s wall, {report_cpu:.1f} s CPU, {size / 1e6:.2f} MB  -> {out}")
    print(f"report (fit=stored, read-only):          {load_s + render_s:.1f} s wall (read {load_s:.1f} s / {load_cpu:.1f} s CPU, "
          f"render {render_s:.1f} s / {render_cpu:.1f} s CPU)")
    print(f"first screen in headless Chromium: {first['first_screen']:.2f} s; all figures by scrolling: {first['all_scrolled']:.1f} s")
    print(f"naive plotly write_html of the raw curves: {naive_s:.1f} s, {naive_size / 1e6:.1f} MB -> {base}")
    print(f"ratios vs naive: time {report_s / naive_s:.2f}x, size {size / naive_size:.3f}x")
    print(f"load average while measuring: {load_average()}")
    print(f"targets: time < 20 s: {'met' if report_s < 20 else 'NOT met'}; size < 15 MB: {'met' if size < 15e6 else 'NOT met'}")


def write_docs(row: dict[str, str]) -> None:
    """Replace the dated report line between docs/benchmarks.md's ``bench_report`` markers."""
    doc = ROOT / "docs" / "benchmarks.md"
    text = doc.read_text()
    start, end = "<!-- bench_report -->", "<!-- /bench_report -->"
    if start not in text or end not in text:
        raise SystemExit(f"{doc}: no {start} ... {end} markers to write between")
    body = (f"\n| measured | runs | written | size | first screen | first paint | load event | all {row['figures']} figures (scrolled) | load average |\n"
            "|---|---|---|---|---|---|---|---|---|\n"
            f"| {date.today().isoformat()} | {row['runs']} | {row['write']} s | {row['size']} MB | {row['first']} s | "
            f"{row['fcp']} s | {row['load']} s | {row['scrolled']} s | {row['loadavg']} |\n" + row["baseline"])
    head, rest = text.split(start, 1)
    doc.write_text(head + start + body + end + rest.split(end, 1)[1])
    print(f"written into {doc}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", help="SQLite file (built if missing)")
    ap.add_argument("--out", help="the report file")
    ap.add_argument("--synthetic", action="store_true", help="the 500 x 2,000-step synthetic sweep instead")
    ap.add_argument("--repeat", type=int, default=3, help="simulated sweep: writes and browser loads timed")
    ap.add_argument("--baseline", metavar="CHECKOUT", help="simulated sweep: also write and open the report with "
                    "another checkout's code (e.g. the main branch), once, in the same run")
    ap.add_argument("--docs", action="store_true", help="write the simulated sweep's figures into docs/benchmarks.md")
    args = ap.parse_args()
    if args.synthetic:
        synthetic(args)
        return
    row = simulated(args)
    if args.docs:
        write_docs(row)


if __name__ == "__main__":
    main()
