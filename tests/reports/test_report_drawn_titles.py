"""Every figure of a report is titled as the browser draws it: title, each axis (with its unit), legend.

The report is of a simulated sweep with hyperparameter groups and two downstream tasks (the
simulated twin of ``examples/sim-hparams.yaml`` with two simulated tasks, trained in this process
by the real simulated trainer), so it holds every kind of figure a sweep report draws. It is opened
in headless Chromium, and the titles are read from the SVG text plotly.js drew (``.gtitle``,
``.xtitle``, ``.ytitle``, ``.legendtitletext``), not from the figure's JSON: a title in a form the
bundled plotly.js ignores is not drawn, and fails here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from in_process_sweep import train_plan

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
TASKS = [
    dict(name="sim_qa", E=0.5, A=5.0, B=20.0, alpha=0.3, beta=0.3, chance=0.25, slope=10.0, midpoint=0.95, items=2000),
    dict(name="sim_cloze", E=0.4, A=4.0, B=25.0, alpha=0.3, beta=0.3, chance=0.5, slope=8.0, midpoint=1.0, items=2000),
]

#: Per figure: its title, and each visible axis's id, domain and drawn title; the legend's drawn title when a
#: legend is drawn (null when none is).
DRAWN_TITLES = """() => Array.from(document.querySelectorAll('.figure')).map(d => {
    const fl = d._fullLayout;
    const text = el => el ? el.textContent.trim() : '';
    const axes = Object.keys(fl).filter(k => /^[xy]axis[0-9]*$/.test(k) && fl[k].visible).map(k => ({
        letter: k[0], id: fl[k]._id, domain: fl[k].domain.join(','),
        title: text(d.querySelector('text.' + fl[k]._id + 'title'))}));
    return {id: d.id, title: text(d.querySelector('.gtitle')), axes: axes,
            legend: d.querySelector('.legend') ? text(d.querySelector('.legendtitletext')) : null};
})"""


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report of a simulated sweep with hyperparameter groups and two tasks (fitted for the report)."""
    from scaling.reports import write_report

    folder = tmp_path_factory.mktemp("titled")
    plan = yaml.safe_load((REPO / "examples" / "sim-hparams.yaml").read_text())
    plan["simulate"]["tasks"] = TASKS
    plan["runs_dir"] = str(folder / "runs")
    (folder / "plan.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    url = f"sqlite:///{folder / 'results.db'}"
    train_plan(folder / "plan.yaml", url, folder)
    return write_report(url, plan["name"], folder / "report.html", fit="memory")


def test_every_drawn_figure_has_its_title_axis_titles_and_legend_title(report: Path, browser) -> None:
    page = browser.open(report, "drawn-titles", actions=lambda p: p.evaluate(DRAWN_TITLES))
    assert page.console_errors == []
    figures = {f["id"]: f for f in page.result}
    # every kind of figure a report of groups and tasks draws
    assert {"fig-loss-tokens", "fig-loss-flops", "fig-isoflop", "fig-frontiers", "fig-contour", "fig-residuals",
            "fig-backtest", "fig-hparam-loss-lr", "fig-hparam-laws", "fig-task-0-compute", "fig-task-0-loss",
            "fig-task-1-compute", "fig-task-1-loss"} <= set(figures)
    for f in figures.values():
        assert f["title"], f"{f['id']}: no title drawn"
        assert f["legend"] is None or f["legend"], f"{f['id']}: a legend without a title"
        for letter in "xy":
            # small multiples title one axis per row (y) or column (x): every drawn axis shares its
            # domain with a titled one
            axes = [a for a in f["axes"] if a["letter"] == letter]
            titled = {a["domain"] for a in axes if a["title"]}
            untitled = [a["id"] for a in axes if a["domain"] not in titled]
            assert not untitled, f"{f['id']}: axes {untitled} have no title drawn"

    def axis_titles(fig_id: str, letter: str) -> list[str]:
        return [a["title"] for a in figures[fig_id]["axes"] if a["letter"] == letter and a["title"]]

    # the two curve views say which quantity is on x, and the legend what the line styles mean
    assert axis_titles("fig-loss-tokens", "x") == ["D, tokens seen (tokens)"]
    assert axis_titles("fig-loss-flops", "x") == ["C, compute spent (FLOPs)"]
    assert axis_titles("fig-loss-tokens", "y") == ["loss (nats/token)"]
    assert "dotted: eval" in figures["fig-loss-tokens"]["legend"]
    assert figures["fig-loss-tokens"]["title"] == "Loss against tokens"
    # units on the fitted laws' axes, and the task's own name in its figures' titles
    assert axis_titles("fig-frontiers", "y") == ["N_opt (parameters)", "D_opt (tokens)"]
    assert axis_titles("fig-hparam-laws", "y") == ["lr* (peak learning rate)", "B* (tokens)"]
    tasks = {figures[f"fig-task-{i}-compute"]["title"].split(":")[0] for i in (0, 1)}
    assert tasks == {t["name"] for t in TASKS}
    assert axis_titles("fig-task-0-loss", "x") == ["task loss (bits per byte)"]


#: The runs table at 1280 px: its width against the page's, and its header and first row's cells.
RUNS_TABLE = """() => { const t = document.getElementById('runs-table');
    return {width: t.getBoundingClientRect().width, page: document.documentElement.clientWidth,
            head: Array.from(t.tHead.rows[0].cells).map(c => c.textContent),
            rows: Array.from(t.tBodies[0].rows).map(r => Array.from(r.cells).map(c => c.textContent))}; }"""


def test_the_runs_table_shows_lr_batch_and_group_within_1280_px(report: Path, browser) -> None:
    def at_1280(page):
        page.set_viewport_size({"width": 1280, "height": 800})
        return page.evaluate(RUNS_TABLE)

    got = browser.open(report, "runs-table-1280", actions=at_1280, draw_all=False).result
    assert {"lr", "batch", "group"} <= set(got["head"])
    assert got["width"] <= got["page"], f"the runs table is {got['width']} px wide on a {got['page']} px page"
    col = {name: i for i, name in enumerate(got["head"])}
    lrs = {r[col["lr"]] for r in got["rows"]}
    assert len(lrs) >= 3 and "–" not in lrs  # three learning rates per group
    assert len({r[col["batch"]] for r in got["rows"]}) == 3  # and three batches
    assert all(r[col["group"]].startswith("2x") for r in got["rows"])  # every run of the sweep is in a group


#: Per figure: the boxes (in page pixels) of every text drawn as a title, subplot title, annotation or legend,
#: and of the tick labels (``tick: ...``), which a title must not cover either.
TITLE_BOXES = """() => Array.from(document.querySelectorAll('.figure')).map(d => {
    const box = (el, what) => { const r = el.getBoundingClientRect();
        return {what: what + ': ' + el.textContent.trim().slice(0, 60), x0: r.left, y0: r.top, x1: r.right, y1: r.bottom}; };
    const boxes = [];
    d.querySelectorAll('.gtitle').forEach(el => boxes.push(box(el, 'title')));
    d.querySelectorAll('.infolayer text[class$="title"]').forEach(el => {
        if (!el.classList.contains('gtitle') && el.textContent.trim()) boxes.push(box(el, el.getAttribute('class'))); });
    d.querySelectorAll('.annotation').forEach(el => { if (el.textContent.trim()) boxes.push(box(el, 'annotation')); });
    d.querySelectorAll('.legend').forEach(el => boxes.push(box(el.querySelector('.bg') || el, 'legend')));
    d.querySelectorAll('.xtick text, .ytick text').forEach(el => {
        if (el.textContent.trim()) boxes.push(box(el, 'tick')); });
    return {id: d.id, boxes: boxes.filter(b => b.x1 > b.x0 && b.y1 > b.y0)};
})"""


def overlaps(boxes: list[dict], slack: float = 1.0) -> list[tuple[str, str]]:
    """Pairs of boxes that share more than ``slack`` pixels each way (two tick labels are plotly's to space)."""
    found = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            if a["what"].startswith("tick") and b["what"].startswith("tick"):
                continue
            if min(a["x1"], b["x1"]) - max(a["x0"], b["x0"]) > slack and min(a["y1"], b["y1"]) - max(a["y0"], b["y0"]) > slack:
                found.append((a["what"], b["what"]))
    return found


def test_no_two_drawn_titles_or_annotations_overlap_at_1280_px(report: Path, browser) -> None:
    def at_1280(page):
        page.set_viewport_size({"width": 1280, "height": 800})
        # plotly.js lays each figure out again at the new width (its own resize handler) before the boxes are read
        page.wait_for_function("Array.from(document.querySelectorAll('.figure'))"
                               ".every(d => Math.abs(d._fullLayout.width - d.clientWidth) < 2)", timeout=30_000)
        page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r())))")
        return page.evaluate(TITLE_BOXES)

    figures = browser.open(report, "title-boxes-1280", actions=at_1280).result
    assert len(figures) >= 13
    clashes = {f["id"]: overlaps(f["boxes"]) for f in figures}
    clashes = {k: v for k, v in clashes.items() if v}
    assert clashes == {}, f"drawn titles that overlap at 1280 px: {clashes}"
