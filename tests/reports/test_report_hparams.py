"""The report's hyperparameter section: drawn for a sweep with groups, absent (report unchanged) without."""

from __future__ import annotations

import json

import numpy as np
import pytest

from scaling.db import connect
from scaling.fitting import Settings, SweepSource, analyse
from scaling.fitting.hyperparams import hparams_synthetic as HS
from scaling.reports.report_data import ReportData
from scaling.reports.figures_hparams import hparams_section
from scaling.reports.blocks import Page
from scaling.reports.html import render


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('report-hp') / 'hp.db'}"
    runs = HS.sweep(HS.HparamTruth(), np.random.default_rng(2), sizes=(5e7, 1e8, 2e8),
                    tokens_per_param=(10, 20, 40), n_lr=5, n_batch=3, noise=0.001)
    HS.store_sweep(url, runs, "grid")
    HS.store_sweep(url, runs.groupby(["N", "D"], as_index=False).nth(7), "plain")
    return url


def report_data(url: str, sweep: str) -> ReportData:
    """What ReportData.load gathers: the sweep's analysis, with a quick Kaplan fit (the section does not
    depend on which laws)."""
    analysis = analyse(SweepSource(url, sweep), Settings(law="kaplan", n_bootstrap=20, tasks=False, next_runs=False),
                       save=False)
    return ReportData(sweep=sweep, runs=connect(url).runs(sweep=sweep), fits=dict(analysis.laws),
                      notes=list(analysis.notes), sweep_fit=analysis)


def test_a_sweep_with_groups_gets_the_section_with_its_figures_and_next_run(db: str) -> None:
    page = Page()
    html = hparams_section(report_data(db, "grid"), page)
    assert html.startswith('<section id="hparams">')
    assert 'id="fig-hparam-loss-lr"' in html and 'id="fig-hparam-laws"' in html
    assert 'id="hparam-groups"' in html and 'id="hparam-laws"' in html
    assert "tuned loss L*" in html  # which loss the loss laws were fitted on
    assert 'id="hparam-next"' in html and "lr = " in html
    figures = {div: json.loads(text) for div, text in page.figures}
    curves = [t for t in figures["fig-hparam-loss-lr"]["data"] if t.get("mode") == "lines+markers"]
    assert len(curves) == 9 * 3  # one curve per batch in each of the nine groups' panels
    assert any(str(t.get("name", "")).startswith("within 0.25% of L*") for t in figures["fig-hparam-loss-lr"]["data"])
    bands = [t for t in figures["fig-hparam-laws"]["data"] if t.get("fill") == "toself"]
    assert bands  # the fitted laws are drawn with their 95% bands


def test_with_no_loss_law_reliable_the_first_screen_gives_the_fitted_lr_and_batch_at_the_largest_run(db: str) -> None:
    """No run is recommended (every loss law flagged), yet lr* and B* are fitted: the first screen gives their values
    at the sweep's largest run, said to be there, and the unrecommended N*, D* and loss are de-emphasised."""
    import re

    from scaling.fitting.core.doubts import DoubtKind

    from dataclasses import replace

    from scaling.fitting.recommend import compare_laws, default_budget

    data = report_data(db, "grid")
    for law in data.fits.values():
        law.add_unreliable(DoubtKind.FEW_POINTS, "a doubt about the design")
    target = default_budget(float(data.completed["C"].max()))  # the analysis' answer with every law flagged
    data.sweep_fit = replace(data.sweep_fit, recommendation=compare_laws(data.fits, target, source="grid"))
    page = Page()
    section = hparams_section(data, page)
    largest = data.completed.loc[data.completed["C"].astype(float).idxmax()]
    assert "given at the sweep's largest run" in section
    cells = {a.label: a.value for a in page.answers}
    for label in ("learning rate", "batch (tokens)"):
        assert "at the largest run" in cells[label] and re.search(r"\[[^\]]+, [^\]]+\]", cells[label]), cells[label]
    lr = float(re.match(r"\s*([0-9.e+-]+)", re.sub("<[^>]+>", "", cells["learning rate"])).group(1))
    assert lr == pytest.approx(float(HS.HparamTruth().lr_star(float(largest["N"]), float(largest["D"]))), rel=0.3)
    headline = render(data).split('<div class="headline">', 1)[1].split("</div></dl>", 1)[0]
    assert headline.count('class="unrecommended"') == 3  # N*, D* and the loss


def test_a_sweep_without_groups_has_no_section(db: str) -> None:
    data = report_data(db, "plain")
    assert hparams_section(data, Page()) == ""
    assert 'id="hparams"' not in render(data)


def test_panels_have_axis_titles_with_units_and_sizes_as_counts(db: str) -> None:
    from scaling.naming import group_title
    from scaling.reports.figures_hparams import LOSS_AXIS, LR_AXIS, hparam_runs, loss_against_lr

    data = report_data(db, "grid")
    hp = hparam_runs(data.completed)
    fig = loss_against_lr(hp, data.sweep_fit.hparams)
    layout = fig.to_plotly_json()["layout"]
    titles = [a["text"] for a in layout["annotations"]]
    assert titles and not any("e+" in t for t in titles), titles  # D=2.0M, not D=1.99885e+06
    x_titles = {v.get("title", {}).get("text") for k, v in layout.items() if k.startswith("xaxis")}
    # a y title longer than its panel is broken over two lines (scaling.reports.titles.make_room)
    y_titles = {v.get("title", {}).get("text", "").replace("<br>", " ") for k, v in layout.items() if k.startswith("yaxis")}
    assert LR_AXIS in x_titles and LOSS_AXIS in y_titles and "nats per token" in LOSS_AXIS
    assert group_title("2x16x2 D=1.99885e+06") == "2x16x2 D=2.0M"
    assert group_title("N=2.16e+04, D=4.3e+05") == "N=22K, D=430K"


def test_a_near_optimal_region_of_one_run_says_best_run_only() -> None:
    from scaling.reports.figures_hparams import near_text

    one = {"n": 1, "of": 9, "lr_lo": 0.0148, "lr_hi": 0.0148, "batch_lo": 512.0, "batch_hi": 512.0}
    assert near_text(one) == "best run only (lr 0.0148, batch 512; of 9 settings)"
    some = {**one, "n": 3, "lr_hi": 0.03}
    assert near_text(some) == "3 of 9 settings: lr 0.0148–0.03, batch 512"  # no "512–512"
