"""The report's first screen shows the answer: the recommendation is visible without scrolling.

Opened in real headless Chromium at a laptop's viewport (1280 x 720). The screenshot of that
first screen is kept as ``artifacts/reports/first-screen*.png``; docs/img/report-first-screen.png
is the same view of the example sweep's report (`make demo`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from scaling.fitting.core.doubts import DoubtKind
from scaling.reports.html import write_report_data

pytestmark = pytest.mark.browser

VIEWPORT = {"width": 1280, "height": 720}
#: Each element's box in the page, measured at the top of the first screen.
BOXES = """() => Object.fromEntries(['.headline', '#recommendations', '#notes', '#sweep-facts'].map(sel => {
    const el = document.querySelector(sel);
    if (!el) { return [sel, null]; }
    const r = el.getBoundingClientRect();
    return [sel, {top: r.top, bottom: r.bottom, text: el.innerText}];
}))"""
#: Each answer of the first screen (label, value, its box) and the navigation bar's links.
ANSWERS = """() => ({cells: Array.from(document.querySelectorAll('#answer .cell')).map(c => {
    const r = c.getBoundingClientRect();
    return {label: c.querySelector('dt').innerText, value: c.querySelector('dd').innerText, top: r.top,
            bottom: r.bottom, right: r.right};
}), nav: Array.from(document.querySelectorAll('nav a')).map(a => a.innerText), width: window.innerWidth})"""


def _artifacts() -> Path:
    """Where the browser tests keep screenshots (as tests/reports/conftest.py's ``artifacts_dir``)."""
    d = Path(os.environ.get("SCALING_ARTIFACTS", Path(__file__).resolve().parents[2] / "artifacts")) / "reports"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _first_screen(name: str) -> Any:
    """An action for ``Browser.open``: at the laptop viewport, scrolled to the top, the boxes and a screenshot."""
    def act(page) -> dict[str, Any]:
        page.set_viewport_size(VIEWPORT)
        page.evaluate("() => window.scrollTo(0, 0)")
        boxes = page.evaluate(BOXES)
        shot = _artifacts() / f"{name}.png"
        page.screenshot(path=str(shot), full_page=False)
        print(f"first screen: {shot}")
        return {"boxes": boxes, "height": page.evaluate("() => window.innerHeight"), "shot": shot,
                "answers": page.evaluate(ANSWERS)}
    return act


def _check_answer_above_the_fold(result: dict[str, Any]) -> dict[str, Any]:
    boxes = result["boxes"]
    head, table = boxes[".headline"], boxes["#recommendations"]
    assert head is not None and table is not None, boxes
    assert 0 <= head["top"] < head["bottom"] <= result["height"], f"the recommendation is not on the first screen: {head}"
    assert table["top"] < result["height"], f"the table of laws does not start on the first screen: {table}"
    order = [boxes[sel]["top"] for sel in (".headline", "#recommendations", "#notes", "#sweep-facts") if boxes[sel]]
    assert order == sorted(order), boxes  # the answer, the laws, what is undetermined, then the sweep
    assert result["shot"].stat().st_size > 10_000
    return boxes


def test_recommendation_is_on_the_first_screen(typical_data, answer_report, browser, tmp_path: Path) -> None:
    """The answer in one block on a laptop's first screen: N*, D*, the loss (with its unit), lr, batch and each
    task's accuracy, each with its interval or why none; the navigation bar links their sections."""
    from report_synth import ANSWER_TASK

    data = typical_data
    page = browser.open(write_report_data(data, tmp_path / "typical.html"), "typical-first",
                        actions=_first_screen("first-screen-typical"))
    assert page.console_errors == [] and page.dialogs == []
    boxes = _check_answer_above_the_fold(page.result)
    assert "N* (parameters)" in boxes[".headline"]["text"] and "recommended by" in boxes[".headline"]["text"]
    # a sweep without groups: lr and batch on the first screen too, saying where they come from
    cells = {c["label"]: c["value"] for c in page.result["answers"]["cells"]}
    assert "no hyperparameter groups" in cells["learning rate"] and "no hyperparameter groups" in cells["batch (tokens)"]

    # a sweep with hyperparameter groups and a task: every answer visible without scrolling
    _, path = answer_report
    page = browser.open(path, "answer-first", actions=_first_screen("first-screen-answer"))
    assert page.console_errors == [] and page.dialogs == []
    _check_answer_above_the_fold(page.result)
    answers = page.result["answers"]
    cells = {c["label"]: c for c in answers["cells"]}
    wanted = ["N* (parameters)", "D* (tokens)", "predicted loss (nats per token)", "learning rate", "batch (tokens)",
              f"{ANSWER_TASK} accuracy"]
    assert set(wanted) <= set(cells), list(cells)
    for label in wanted:
        c = cells[label]
        assert 0 <= c["top"] < c["bottom"] <= page.result["height"] and c["right"] <= answers["width"], c
        assert "[" in c["value"] or "no interval" in c["value"] or "none: " in c["value"], c
    assert {"Hyperparameters", "Downstream tasks"} <= set(answers["nav"]), answers["nav"]


def test_left_out_laws_do_not_push_the_answer_down(typical_data, browser, tmp_path: Path) -> None:
    """As in the example sweep: three of four laws flagged, each with a long reason; the answer still comes
    first, from the one law left, and the flagged laws show no interval."""
    from report_synth import reanswer

    from scaling.fitting.recommend import compare_laws
    from scaling.reports.fitview import LABELS
    from scaling.reports.html import next_budget

    data = typical_data
    rec = compare_laws(data.fits, next_budget(data))
    kept = rec.chosen
    flagged = [kind for kind in data.fits if kind != kept]
    for kind in flagged:
        data.fits[kind].add_unreliable(
            DoubtKind.UNDETERMINED, "the data do not determine Nc (its 95% bootstrap interval [1.36e+06, 2.69e+08] spans 2.3 "
            "orders of magnitude); Dc (its 95% bootstrap interval [1.14e+06, 8.23e+08] spans 2.9 orders of "
            "magnitude): do not trust this law's parameters or what it extrapolates")
    reanswer(data)
    page = browser.open(write_report_data(data, tmp_path / "flagged.html"), "flagged-first",
                        actions=_first_screen("first-screen"))
    assert page.console_errors == [] and page.dialogs == []
    boxes = _check_answer_above_the_fold(page.result)
    assert LABELS[kept] in boxes[".headline"]["text"]
    assert all(LABELS[kind] not in boxes[".headline"]["text"] for kind in flagged)
    rows = {line.split("\t")[0]: line for line in boxes["#recommendations"]["text"].splitlines()[1:]}
    for kind in flagged:
        assert rows[LABELS[kind]].endswith("left out: unreliable") and "[" not in rows[LABELS[kind]], rows
        assert f"{LABELS[kind]}: unreliable: the data do not determine Nc" in boxes["#notes"]["text"]


# -- the examples' reports as a new user opens them: the run to train on a 1280 x 800 first screen ----------
LAPTOP = {"width": 1280, "height": 800}
#: Every answer cell of the page (the headline's and the run block's): its block, label, value and box.
CELLS = """() => Array.from(document.querySelectorAll('.headline .cell, #next-run .cell')).map(c => {
    const r = c.getBoundingClientRect();
    return {block: c.closest('#next-run') ? 'run' : 'headline', label: c.querySelector('dt').innerText,
            value: c.querySelector('dd').innerText, top: r.top, bottom: r.bottom, left: r.left, right: r.right};
})"""
RUN_LABELS = ("run to train", "N (parameters)", "D (tokens)", "learning rate", "batch (tokens)", "memory per worker")


@pytest.fixture(scope="module")
def example_reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, Path]]:
    """The demo's plan (simulated) and the hyperparameter example, each trained, analysed as `scaling sweep`
    does (default bootstrap; the ranking of runs worth adding skipped, it is not on the first screen), its
    recommendation sized by the stored plan and its report written: name -> (sized recommendation, report)."""
    from example_sim import train_example
    from scaling.fitting import SweepSource, analyse
    from scaling.fitting.analysis import Settings
    from scaling.orchestrator.next_plan import run_plan_text
    from scaling.orchestrator.sweep import sized_recommendation
    from scaling.reports import write_report

    out = {}
    for name in ("plan", "sim-hparams"):
        folder = tmp_path_factory.mktemp(f"example-{name}")
        url, sweep = train_example(name, folder)
        analysis = analyse(SweepSource(url, sweep), Settings(next_runs=False), save=False)
        sized = sized_recommendation(url, analysis)
        report = write_report(url, sweep, folder / f"{name}.html", analysis=analysis, recommendation=sized,
                              next_plan=run_plan_text(url, sweep, sized))
        out[name] = (sized, report)
    return out


def _laptop_cells(name: str) -> Any:
    def act(page) -> dict[str, Any]:
        page.set_viewport_size(LAPTOP)
        page.evaluate("() => window.scrollTo(0, 0)")
        page.screenshot(path=str(_artifacts() / f"first-screen-{name}.png"), full_page=False)
        return {"cells": page.evaluate(CELLS), "height": page.evaluate("() => window.innerHeight"),
                "width": page.evaluate("() => window.innerWidth")}
    return act


@pytest.mark.parametrize("name", ["plan", "sim-hparams"])
def test_the_examples_first_screen_holds_the_run_to_train(example_reports, browser, name: str) -> None:
    """`make demo`'s plan and the hyperparameter example at 1280 x 800: every cell of the run to train (shape,
    N, D, lr, batch, memory per worker) is drawn inside the first screen, each value written as the closing
    answer writes it; lr and batch with their values; the demo's task accuracy with its interval."""
    from scaling.fitting.brief import brief
    from scaling.fitting.core.wording import run_line

    rec, report = example_reports[name]
    page = browser.open(report, f"example-{name}", actions=_laptop_cells(name), draw_all=False)
    assert page.console_errors == [] and page.dialogs == []
    cells, height, width = page.result["cells"], page.result["height"], page.result["width"]
    assert (height, width) == (LAPTOP["height"], LAPTOP["width"])
    for c in cells:  # nothing of the answer is cut off or below the fold
        assert 0 <= c["top"] < c["bottom"] <= height and 0 <= c["left"] < c["right"] <= width, c
    run = {c["label"]: c["value"] for c in cells if c["block"] == "run"}
    assert list(run) == list(RUN_LABELS), run
    # the page and the terminal name one run, in one format: each value is the closing answer's
    closing = run_line(rec.run, rec.run_source, rec.hparams)
    shape, n_params = run["run to train"].split(" (shape from")[0], run["N (parameters)"]
    assert closing.startswith(f"{shape} (shape from") and f"N = {n_params}," in closing, (run, closing)
    lr, batch, memory = (run[k].split()[0] for k in ("learning rate", "batch (tokens)", "memory per worker"))
    assert f"lr {lr}" in closing and f"batch {batch} tokens" in closing and f"{memory} GiB per worker" in closing
    assert re.fullmatch(r"\d+(\.\d+)?[KMBT]?", batch) and re.fullmatch(r"\d+(\.\d+)?[KMBT]", n_params), run
    assert f"D* = {run['D (tokens)']} " in " ".join(brief(rec)) or rec.chosen in rec.unreliable, run
    headline = {c["label"]: c["value"] for c in cells if c["block"] == "headline"}
    if name == "plan":  # the demo's runs are scored on the built-in task: its accuracy, with an interval
        assert re.match(r"0\.\d+ \[[0-9.]+, [0-9.]+\]", headline["next_line accuracy"]), headline
    else:  # the loss laws cannot recommend, but lr* and B* are fitted: their values at the largest run
        for label in ("learning rate", "batch (tokens)"):
            assert re.match(r"[0-9.]+[KMBT]? \[[0-9.]+[KMBT]?, [0-9.]+[KMBT]?\] \(at the largest run",
                            headline[label]), headline
