"""Fitting and reports run without torch, Ray, the trainer or the orchestrator, on every path.

Checked after *calling* every public function of both packages in a fresh interpreter (a lazy
import inside a function is only seen when the function runs), not only after importing them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

CHECK = r"""
import inspect, sys
from pathlib import Path

import numpy as np

import scaling.fitting as fitting
from scaling.db import connect
from scaling.reports import blocks as B, report_data as RD, downsample as DS, figures as F, fitview as V, html as H, write_report
from scaling.reports import compare as C, compare_page as CP, figures_compare as FC

url, sweep, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
called = set()


def call(fn, *args, **kw):
    called.add(f"{fn.__module__}.{fn.__qualname__}")
    return fn(*args, **kw)


# -- fitting ---------------------------------------------------------------------------------
data, _ = call(fitting.from_db, url, sweep)
summary = call(fitting.fit_data, data, "all", n_bootstrap=5, settings={"approach3": {"grid": "coarse"}})
call(fitting.fit_sweep, url, sweep, law="approach2", n_bootstrap=5, save=False)
laws = {k: call(fitting.from_dict, law.to_dict()) for k, law in summary.laws.items()}
call(fitting.backtest, summary.laws["approach2"], data)
pts = data.points[["N", "D", "C", "loss"]]
call(fitting.from_frame, pts)
pts.to_csv(out / "points.csv", index=False)
call(fitting.from_csv, out / "points.csv")
call(fitting.fit_csv, str(out / "points.csv"), "approach2", n_bootstrap=0)
call(fitting.effective_tokens, np.array([1e9, 1e10]), 1e9)
call(fitting.recommend, call(fitting.fit_sweep, url, sweep, n_bootstrap=5), 1e15)
analysis = call(fitting.analyse, call(fitting.source_of, url, sweep),
                fitting.Settings(law="approach2", n_bootstrap=5, tasks=False))

# -- reports ---------------------------------------------------------------------------------
res = connect(url)
report = call(RD.ReportData.load, url, sweep, fit="memory")
runs, done = report.runs, report.completed
call(RD.normalise_runs, res.runs(sweep=sweep))
call(RD.thin_curves, report.curves)
call(RD.summarise_perf, res.metric_summary(sweep=sweep))
call(RD.load_fits, res, url, sweep, fit="stored")
call(RD.stored_fits, res, sweep)
call(RD.newest_analysis, res, sweep)
call(RD.stale_note, res, url, sweep)
call(RD.analysis_fits, analysis)
x = np.linspace(1.0, 100.0, 500)
call(DS.log_spaced_indices, x, 50)
call(DS.keep_minimum, np.arange(10), np.sin(x[:10]))
call(DS.downsample_curve, x, np.cos(x), 50)
call(DS.downsample_frame, report.curves, ["run_key", "name"], x="tokens", y="value", max_points=50)
call(DS.thin_runs, runs, 2)
call(DS.thin_table, runs, 2)
call(DS.thin_events, report.events, {"failure"}, 1)
call(H.drawn_points, runs)
call(H.thinned_note, runs)
for kind, law in laws.items():
    call(V.as_law, law.to_dict())
    call(V.kind_of, kind, law)
    call(V.label_of, kind, law)
    call(V.plot_info, law)
    call(V.frontier, kind, law)
call(V.isoflop_slices, laws["approach2"], done)
call(V.fitted_slices, laws["approach2"])
call(V.backtest_frame, laws)
call(F.size_colors, runs["N"])
call(F.size_groups, runs["N"])
envelope = call(F.loss_envelope, report.curves)
call(F.loss_curves, report.curves, runs, envelope=envelope)
call(F.isoflop_profiles, runs, laws["approach2"])
call(F.frontiers, laws, runs=runs, target=1e15)
call(F.parametric_contour, laws["approach3"], runs)
call(F.residuals, laws, runs)
call(F.backtest, V.backtest_frame(laws))
call(F.run_events, report.events, runs)
call(F.throughput, report.perf, runs)
target = call(H.next_budget, report)
call(H.recommendations, report, target)
call(H.recommend_for, report, target)
call(H.limit_notes, report)
call(B.script_json, "</script>")
call(H.render, report)
call(H.write_report_data, report, out / "a.html")
call(H.write_report, url, sweep, out / "b.html", fit="memory")
call(write_report, url, sweep, out / "c.html", fit="stored")
call(F.ema, np.array([3.0, 2.0, 2.5]))
call(F.empty_figure, "a figure", "nothing to draw")
call(F.run_label, runs.iloc[0])
call(F.with_alpha, "#1f77b4", 0.3)
call(H.render_page, title="page", sections=(), body="", page=B.Page())
call(H.optional_sections, ['<section id="tasks"><h2>Downstream tasks</h2></section>'])
call(H.utc_text, "2026-12-05 03:24:26.414379")

# -- comparison: the sweep and a twin of it (its runs registered again under another name) -------
import shutil
from scaling.db import Store

twin_db = out / "twin.db"
shutil.copy(url.removeprefix("sqlite:///"), twin_db)
twin_url = f"sqlite:///{twin_db}"
records = [{**r, "key": r["run_key"]} for r in done.to_dict("records")]
store = Store(twin_url)
store.register("twin", records)
for r in records:
    store.claim(r["key"], "host", sweep="twin")
    store.finish(r["key"], "completed", final_eval_loss=float(r["final_loss"]), sweep="twin")
store.close()
call(CP.compare_sweeps, twin_url, [sweep, "twin"], out / "compare.html", fit="stored")
comparison = call(C.load_comparison, twin_url, [sweep, "twin"], fit="stored")
same = {"params": "non_embedding", "flops": "6N"}
call(C.convert_runs, comparison.sides[0].runs, same, {"params": "total", "flops": "6N_attention"}, sweep)
sides = [C.SweepSide(name, runs, dict(laws), same) for name in ("a", "b")]
comparison = call(C.build_comparison, sides, same)
call(C.exponent_difference, laws["approach3"], laws["approach3"], "a")
call(FC.sweep_color, 0)
call(FC.frontiers, sides)
call(FC.isoflop_profiles, sides)
call(FC.exponent_differences, comparison.differences)
call(C.ranked, comparison.differences)
call(C.verdict_counts, comparison.differences)
call(C.verdict, comparison.differences[0])
call(CP.render, comparison)

# -- every public function was called ----------------------------------------------------------
public = {f"{fn.__module__}.{fn.__qualname__}" for name in fitting.__all__
          if inspect.isfunction(fn := getattr(fitting, name))}
for mod in (RD, DS, F, V, H, C, CP, FC):
    public |= {f"{mod.__name__}.{name}" for name, fn in vars(mod).items()
               if inspect.isfunction(fn) and fn.__module__ == mod.__name__ and not name.startswith("_")}
public.add("scaling.reports.write_report")
missing = sorted(public - called)
assert not missing, f"public functions this check does not call: {missing}"

heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'ray')
               or m == 'scaling.trainer' or m.startswith(('scaling.trainer.', 'scaling.orchestrator')))
print(heavy)
"""


def test_fitting_and_reports_import_nothing_heavy_on_any_path(sweeps, tmp_path: Path) -> None:
    shared, spec = sweeps["typical"]
    copy = tmp_path / "typical.db"  # the check stores fits: on a copy, so other tests see the sweep unfitted
    shutil.copy(shared.removeprefix("sqlite:///"), copy)
    res = subprocess.run([sys.executable, "-c", CHECK, f"sqlite:///{copy}", spec.sweep, str(tmp_path)],
                         capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().splitlines()[-1] == "[]"
