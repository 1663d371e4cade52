"""The notebook API at ``scaling``'s top level: a simulated sweep from plan to report through it alone."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

LAW = {"E": 1.8, "A": 480.0, "B": 2100.0, "alpha": 0.35, "beta": 0.37}


def _plan(path: Path) -> Path:
    path.write_text(yaml.safe_dump({
        "name": "api",
        "runs_dir": str(path.parent / "runs"),
        "simulate": {"law": LAW, "noise": 0.003, "seed": 0},
        "train": {"batch_tokens": 4 * 1024 * 1024},
        "resources": {"num_cpus": 2},
        "grid": [{"models": [float(n) for n in np.geomspace(1.5e7, 6e9, 9)], "compute": [1e18, 1e19, 1e20]}],
    }, sort_keys=False))
    return path


@pytest.mark.ray
@pytest.mark.usefixtures("shared_ray")
def test_plan_sweep_results_fit_recommend_report_through_the_top_level(tmp_path: Path) -> None:
    import scaling

    url = f"sqlite:///{tmp_path / 'r.db'}"
    plan = scaling.load_plan(_plan(tmp_path / "plan.yaml"))
    result = scaling.run_sweep(plan, db=url, fit=False, report=False, echo=lambda s: None)
    assert result.outcome is not None and len(result.outcome.completed) == 27 and not result.outcome.failed

    runs = scaling.connect(url).runs(sweep="api")
    assert len(runs) == 27 and set(runs["status"]) == {"completed"}

    fit = scaling.fit(url, "api", bootstrap=20)
    assert isinstance(fit.laws["approach2"], scaling.FittedLaw)
    frame = fit.to_frame()
    assert {"value", "lo", "hi", "se", "withheld"} <= set(frame.columns)
    for law in fit.laws.values():
        for name, est in law.params.items():
            assert isinstance(est, scaling.Estimate)
            if est.interval is not None:  # an interval never excludes its estimate
                assert est.lo <= est.value <= est.hi, (law.kind, name, est)
            else:
                assert est.withheld, (law.kind, name, est)
        if not law.reliable:
            assert all(e.interval is None for e in law.params.values()), law.kind

    advice = scaling.recommend(1e21, db=url, sweep="api", bootstrap=20)
    assert advice.law in fit.laws and advice.law not in advice.left_out
    assert advice.N is not None and advice.N.interval is not None and advice.N.lo <= advice.N.value <= advice.N.hi
    assert math.isclose(advice.N.value * advice.D.value * 6, 1e21, rel_tol=0.05)
    for kind in advice.left_out:  # a law left out shows values only
        assert all(e.interval is None for e in advice.per_law[kind].values())
    assert advice.run is not None and advice.run["n_params"] > 0

    page = scaling.report(url, "api", tmp_path / "api.html")
    assert page.is_file() and "<html" in page.read_text()[:2000].lower()


def test_estimate_from_intervals_keeps_bounds_or_says_why_not() -> None:
    from scaling import Estimate

    e = Estimate.from_interval({"value": 2.0, "lo": 1.5, "hi": 3.0, "se": 0.4, "kind": "percentile"})
    assert e.interval == (1.5, 3.0) and e.se == 0.4 and e.withheld is None and "[1.5, 3]" in str(e)
    gone = Estimate.from_interval({"value": 2.0, "lo": math.nan, "hi": math.nan, "se": math.nan, "kind": "unreliable",
                                   "note": "the law is flagged unreliable: E is not identified"})
    assert gone.interval is None and gone.se is None and "not identified" in gone.withheld
    pinned = Estimate.from_interval({"value": 1.0, "lo": 1.0, "hi": 1.0, "kind": "pinned", "pinned": "by the plan"})
    assert pinned.interval is None and "pinned" in pinned.withheld


def test_import_scaling_stays_light() -> None:
    """The top level names the API but imports it on first use: fitting and reports stay torch- and Ray-free."""
    code = ("import sys, scaling, scaling.fitting, scaling.reports; "
            "print(sorted(m for m in ('torch', 'ray', 'scaling.api') if m in sys.modules)); "
            "print(' '.join(dir(scaling))); print('scaling.api' in sys.modules); "
            "scaling.Estimate; print('scaling.api' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    assert lines[0] == "[]" and lines[2:4] == ["False", "True"], out.stdout
    # dir() lists the lazily loaded API (a notebook's tab completion), without importing it
    import scaling

    assert set(scaling.__all__) <= set(lines[1].split()) and {"fit", "recommend", "report"} <= set(dir(scaling))


def test_the_top_level_exports_exactly_the_api() -> None:
    """``scaling`` exports every name of ``scaling.api.__all__`` (each defined there), and nothing else of it."""
    import scaling
    import scaling.api as api

    assert all(hasattr(api, name) for name in api.__all__) and len(set(api.__all__)) == len(api.__all__)
    assert set(scaling.__all__) == {*api.__all__, "__version__", "figures", "vocab"}
    assert scaling.hparams is api.hparams and scaling.Hparams is api.Hparams
    public = {n for n in vars(api) if not n.startswith("_") and getattr(vars(api)[n], "__module__", None) == api.__name__}
    assert public <= set(api.__all__), f"public in scaling.api but not exported: {sorted(public - set(api.__all__))}"


def test_the_explore_notebook_uses_only_the_top_level() -> None:
    """examples/explore.ipynb imports ``scaling`` and nothing below it (it runs in tests/reports)."""
    import ast

    import nbformat

    nb = nbformat.read(Path(__file__).resolve().parents[1] / "examples" / "explore.ipynb", as_version=4)
    imported = set()
    for cell in nb.cells:
        if cell.cell_type == "code":
            for node in ast.walk(ast.parse(cell.source)):
                if isinstance(node, ast.Import):
                    imported |= {a.name for a in node.names}
                elif isinstance(node, ast.ImportFrom):
                    imported.add(node.module or "")
    assert "scaling" in imported and not {m for m in imported if m.startswith("scaling.")}, imported
