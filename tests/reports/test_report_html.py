"""The HTML file: self-contained, every section present, user text escaped, edge cases reported."""

from __future__ import annotations

import html
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

import report_synth as S
from report_synth import HOSTILE, HOSTILE_TAG, reanswer
from scaling.db.jsonvalues import as_dict
from scaling.errors import NotFoundError
from scaling.fitting.core.doubts import DoubtKind
from scaling.reports import write_report
from scaling.reports.blocks import script_json
from scaling.reports.html import LIMITS_TITLE, SECTIONS


def _figure_data(text: str) -> dict:
    m = re.search(r'<script type="application/json" id="figure-data">(.*?)</script>', text, re.S)
    assert m, "figure data block missing"
    return json.loads(m.group(1))


def test_typical_report_is_self_contained_and_complete(sweeps, tmp_path: Path) -> None:
    url, spec = sweeps["typical"]
    path = write_report(url, None, tmp_path / "sub" / "r.html")
    assert path == (tmp_path / "sub" / "r.html").resolve() and path.is_file()
    text = path.read_text()
    # plotly.js inlined exactly once, nothing fetched from anywhere
    assert text.count("Plotly.newPlot") == 1 and text.count("plotly.js v") <= 2
    assert not re.search(r'<script[^>]+src=', text) and not re.search(r'<link[^>]+href=', text)
    for sid, _ in SECTIONS:
        assert f'<section id="{sid}">' in text
    figs = _figure_data(text)
    assert {"fig-loss-tokens", "fig-loss-flops", "fig-isoflop", "fig-frontiers", "fig-events", "fig-throughput"} <= set(figs)
    # SVG only: no WebGL trace anywhere
    assert all(t.get("type") != "scattergl" for f in figs.values() for t in f["data"])
    # every run is in the table, with its key
    for key in spec.keys:
        assert key in text
    assert "loss_spike" in text  # the spiked run's events are drawn


def test_hostile_names_are_escaped(sweeps, tmp_path: Path) -> None:
    url, _ = sweeps["hostile"]
    text = write_report(url, HOSTILE, tmp_path / "r.html").read_text()
    for bad in (HOSTILE, HOSTILE_TAG, "<script>alert(3)", "</script><!--", "<!--"):
        assert bad not in text, f"{bad!r} appears unescaped"
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text  # shown as text in title, table, plan
    assert "&lt;img src=x onerror=&quot;alert(2)&quot;&gt;" in text
    assert "boom &lt;/script&gt;&lt;script&gt;alert(3)&lt;/script&gt;" in text
    # the figures' JSON still holds the names (escaped for display), and parses
    figs = _figure_data(text)
    assert any("alert(1)" in json.dumps(f) for f in figs.values())
    # only our own four script elements exist
    assert text.count("<script") == 3


def test_failures_and_too_few_runs_say_what_is_missing(sweeps, tmp_path: Path) -> None:
    url, _ = sweeps["hostile"]
    text = write_report(url, HOSTILE, tmp_path / "r.html").read_text()
    assert 'id="failures"' in text and "failed" in text
    assert LIMITS_TITLE in text


def test_one_run_report(sweeps, tmp_path: Path) -> None:
    url, spec = sweeps["one_run"]
    text = write_report(url, "one-run", tmp_path / "r.html").read_text()
    assert spec.keys[0] in text
    assert LIMITS_TITLE in text and "not fitted" in text  # one run cannot support a fit


def test_sweep_without_finished_runs(sweeps, tmp_path: Path) -> None:
    url, _ = sweeps["pending"]
    text = write_report(url, "not-started", tmp_path / "r.html").read_text()
    assert "3 pending" in text
    assert "No loss curves recorded yet." in text
    assert "No recommendation: no run has completed yet." in text


def test_unknown_sweep_is_a_user_error(sweeps, tmp_path: Path) -> None:
    url, _ = sweeps["typical"]
    with pytest.raises(NotFoundError, match="no sweep named 'nope'"):
        write_report(url, "nope", tmp_path / "r.html")
    assert not (tmp_path / "r.html").exists()


def test_report_through_postgres_and_sqlite(db_url: str, tmp_path: Path) -> None:
    """The same read path works on both databases (the PostgreSQL variant needs the CI server)."""
    spec = S.build(db_url, S.SweepSpec(sweep="both", budgets=(1e13,), sizes_per_budget=3, steps=50, eval_every=10))
    text = write_report(db_url, "both", tmp_path / "r.html").read_text()
    assert all(k in text for k in spec.keys)


def test_script_json_cannot_close_the_script() -> None:
    raw = json.dumps({"x": "</script><!-- ]]> & <b>"})
    safe = script_json(raw)
    assert "<" not in safe and ">" not in safe and "&" not in safe
    assert json.loads(safe) == json.loads(raw)


def test_metric_summary_matches_the_rows(db_url: str) -> None:
    """Results.metric_summary (added for the report's throughput) agrees with the raw rows."""
    from scaling.db import connect
    from scaling import vocab as names

    S.build(db_url, S.SweepSpec(sweep="perf", budgets=(1e13,), sizes_per_budget=3, steps=40, eval_every=10))
    res = connect(db_url)
    perf = [names.TOKENS_PER_SECOND, names.MFU]
    summary = res.metric_summary(sweep="perf", names=perf).set_index(["run_key", "name"]).sort_index()
    rows = res.metrics(sweep="perf", names=perf).groupby(["run_key", "name"])["value"].agg(["count", "mean", "min", "max"])
    assert len(summary) == 6
    assert (summary["count"] == rows["count"]).all()
    for col in ("mean", "min", "max"):
        assert (abs(summary[col] - rows[col]) <= 1e-9 * abs(rows[col])).all()


def test_fit_modes(sweeps, tmp_path: Path) -> None:
    """'stored' and 'memory' write nothing to the database; 'memory' still fits every law."""
    from scaling.db import connect

    url, _ = sweeps["one_run"]
    text = write_report(url, "one-run", tmp_path / "stored.html", fit="stored").read_text()
    assert "No fits are stored for this sweep" in text
    url, _ = sweeps["typical"]
    before = len(connect(url).fits(sweep="typical"))
    text = write_report(url, "typical", tmp_path / "memory.html", fit="memory").read_text()
    assert len(connect(url).fits(sweep="typical")) == before
    assert "made for this report only" in text
    figs = _figure_data(text)
    assert {"fig-contour", "fig-residuals"} <= set(figs)
    with pytest.raises(ValueError, match="fit must be one of"):
        write_report(url, "typical", tmp_path / "x.html", fit="guess")
    with pytest.raises(ValueError, match="store_fits needs fit='sweep'"):
        write_report(url, "typical", tmp_path / "x.html", fit="memory", store_fits=True)


def _headline(text: str) -> str:
    """The answer block of a report's HTML: from the headline to the table of laws."""
    return re.search(r'<div class="headline">(.*?)<table id="recommendations">', text, re.S).group(1)


def test_headline_follows_the_best_determined_law_the_data_determine(typical_data) -> None:
    from scaling.reports.fitview import LABELS
    from scaling.reports.html import next_budget, recommend_for, render

    data = typical_data
    rec = recommend_for(data, next_budget(data))
    assert rec is not None and rec.chosen is not None
    assert rec.chosen not in rec.unreliable and not data.fits[rec.chosen].doubts()
    headline = _headline(render(data))
    assert LABELS[rec.chosen] in headline and "Why this law" in headline and "narrowest 95% interval" in headline
    # A doubt about a parameter alone does not unseat it while its bootstrap determines the budget asked,
    # but its row says so.
    first = rec.chosen
    data.fits[first].add_unreliable(DoubtKind.UNDETERMINED, "the data do not determine A (its 95% bootstrap interval spans 9 orders)")
    reanswer(data)
    text = render(data)
    row = re.search(rf"<tr><td>{re.escape(LABELS[first])}</td>.*?</tr>", text, re.S).group(0)
    assert "determined at this budget, though the data do not determine A" in row
    # The same law, once its notes say the data cannot test it, is no longer followed.
    data.fits[first].add_unreliable(DoubtKind.FEW_POINTS, "6 points for the 5 parameters of approach 3 leave "
                               "1 residual degree(s) of freedom")
    reanswer(data)
    text = render(data)
    headline = _headline(text)
    assert LABELS[first] not in headline
    row = re.search(rf'<tr class="unreliable"><td>{re.escape(LABELS[first])}</td>.*?</tr>', text, re.S).group(0)
    assert "left out: unreliable" in row and 'class="ci"' not in row  # no interval for an unreliable law
    # its reason, in the notes under the answer
    notes = re.search(r'<div class="notes limits" id="notes">(.*?)</div>', text, re.S).group(1)
    assert f"{LABELS[first]}: unreliable: the data do not determine A" in notes


def test_no_reliable_law_recommends_nothing(typical_data) -> None:
    """Every law flagged: the top says nothing is recommended and shows no interval anywhere in its answer."""
    from scaling.reports.html import render

    data = typical_data
    for law in data.fits.values():  # a doubt about the design, not only a parameter: no law recommends
        law.add_unreliable(DoubtKind.FEW_POINTS, "6 points for the 5 parameters leave 1 residual degree(s) of freedom")
    reanswer(data)
    text = render(data)
    headline = _headline(text)
    assert "nothing is recommended" in headline and "without intervals" in headline
    assert not re.search(r"\[[^\]]*,[^\]]*\]", headline) and "recommended by" not in headline  # no interval
    assert "no interval: no law is reliable" in headline
    table = re.search(r'<table id="recommendations">(.*?)</table>', text, re.S).group(1)
    assert 'class="ci"' not in table and table.count("left out: unreliable") == len(data.fits)


def test_the_answer_comes_first(typical_data) -> None:
    """The summary opens with the recommendation, then what the data cannot determine, then the sweep's facts;
    no notes box stands above it."""
    from scaling.reports.html import render

    data = typical_data
    data.notes.append("a note about the data")
    text = render(data)
    order = [text.index(mark) for mark in ('<section id="summary">', '<div class="headline">', 'id="recommendations"',
                                            'id="notes"', 'id="sweep-facts"', '<section id="runs">')]
    assert order == sorted(order), order
    assert text.count('id="notes"') == 1 and "a note about the data" in text
    assert "recommended by " in _headline(text)



def test_a_report_stores_fits_only_when_asked(tmp_path: Path) -> None:
    """The default report fits as `scaling fit` does but writes nothing; store_fits=True stores, and is reused."""
    from scaling.db import connect

    url = f"sqlite:///{tmp_path / 'own.db'}"
    S.build(url, S.SweepSpec(sweep="own", budgets=(1e13, 3e13), sizes_per_budget=4, steps=40, eval_every=10))
    text = write_report(url, "own", tmp_path / "read-only.html").read_text()
    assert connect(url).fits(sweep="own").empty
    assert "Chinchilla approach 2 (IsoFLOP)" in text
    write_report(url, "own", tmp_path / "stored.html", store_fits=True)
    stored = connect(url).fits(sweep="own")
    assert len(stored) == 1 and stored["law"].iloc[0] == "analysis"  # the whole analysis, one row
    write_report(url, "own", tmp_path / "again.html", store_fits=True)  # same data: the stored fits are reused
    assert len(connect(url).fits(sweep="own")) == len(stored)


def _cells(text: str) -> dict[str, str]:
    """The first screen's numbers: label -> value, as text."""
    grid = re.search(r'<dl class="answer-grid" id="answer">(.*?)</dl>', text, re.S).group(1)
    return {html.unescape(re.sub(r"<[^>]+>", "", label)): html.unescape(re.sub(r"<[^>]+>", "", value))
            for label, value in re.findall(r"<dt>(.*?)</dt><dd[^>]*>(.*?)</dd>", grid, re.S)}


def test_the_first_screen_answers_every_question_with_an_interval_or_why_none(answer_report) -> None:
    """A sweep with hyperparameter groups and a task: the answer block holds N*, D*, the loss with its unit,
    lr, batch and the task's accuracy, each with its 95% interval or why none, each linked to its section;
    the navigation bar links the Hyperparameters and Downstream sections."""
    from report_synth import ANSWER_TASK

    _, path = answer_report
    text = path.read_text()
    nav = re.search(r"<nav>(.*?)</nav>", text, re.S).group(1)
    assert '<a href="#hparams">Hyperparameters</a>' in nav and '<a href="#tasks">Downstream tasks</a>' in nav
    cells = _cells(text)
    assert list(cells)[:3] == ["N* (parameters)", "D* (tokens)", "predicted loss (nats per token)"], cells
    assert {"learning rate", "batch (tokens)", f"{ANSWER_TASK} accuracy"} <= set(cells), cells
    for label, value in cells.items():
        assert re.search(r"\[[^\]]+, [^\]]+\]", value) or "no interval" in value or "none: " in value, (label, value)
    for label in ("N* (parameters)", "D* (tokens)", "learning rate", "batch (tokens)"):
        assert "[" in cells[label], (label, cells[label])  # this sweep determines them
    assert re.match(r"\d[\d.]*[KMBT] \[", cells["N* (parameters)"]) and "e+" not in cells["D* (tokens)"]
    accuracy = cells[f"{ANSWER_TASK} accuracy"]
    assert all(0 <= float(x) <= 1 for x in re.findall(r"\d+\.\d+|\d+", accuracy.split("(")[0])), accuracy
    grid = re.search(r'<dl class="answer-grid" id="answer">(.*?)</dl>', text, re.S).group(1)
    assert {'href="#hparams"', 'href="#tasks"', 'href="#frontiers"'} <= set(re.findall(r'href="#\w+"', grid))
    # the sweep's facts: created in UTC to the second; the task section shows commands as code, each note once
    created = re.search(r"<th>created</th><td>(.*?)</td>", text).group(1)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", created), created
    tasks = re.search(r'<section id="tasks">(.*?)</section>', text, re.S).group(1)
    assert "`" not in tasks
    notes = re.findall(r"<li>(.*?)</li>", tasks)
    assert notes and len(notes) == len(set(notes)), notes
    assert "`" not in re.search(r'<div class="notes limits" id="notes">(.*?)</div>', text, re.S).group(1)


def test_a_simulated_sweep_claims_no_hardware_and_draws_no_throughput(typical_data) -> None:
    from scaling.reports.html import render

    data = typical_data
    data.runs["spec"] = [{**(s or {}), "simulate": {"law": {"E": 2.5}}} for s in data.runs["spec"].map(as_dict)]
    text = render(data)
    hardware = re.search(r"<th>hardware</th><td>(.*?)</td>", text).group(1)
    assert "simulated" in hardware and "device" not in hardware and "precision" not in hardware
    assert "fig-throughput" not in _figure_data(text) and "No throughput: every run is simulated" in text
    events = _figure_data(text)["fig-events"]
    assert all(t["name"] in ("loss_spike", "rollback", "retry") for t in events["data"] if t.get("x"))


def test_an_unreliable_law_says_so_once_in_the_parameters_table(typical_data) -> None:
    from scaling.reports.html import render

    data = typical_data
    for law in data.fits.values():
        law.add_unreliable(DoubtKind.UNDETERMINED, "the data do not determine E (its 95% bootstrap interval spans 8 orders)")
    table = re.search(r'<table id="parameters">(.*?)</table>', render(data), re.S).group(1)
    rows = re.findall(r"<tr><td>.*?</tr>", table, re.S)
    assert rows and all(row.count("law unreliable") == 1 for row in rows), rows


def test_the_first_screen_never_shows_an_accuracy_outside_0_1(answer_report) -> None:
    """A chain whose prediction (or an end of its interval) leaves [0, 1] is passed over, and with no other
    chain the first screen says why there is no accuracy instead of printing one."""
    from report_synth import ANSWER_TASK
    from scaling.fitting.tasks.task_laws import fit_tasks, tasks_from_db
    from scaling.reports.figures_tasks import headline_accuracy

    url, _ = answer_report
    law = fit_tasks(tasks_from_db(url, "answer"), n_bootstrap=10, grid="coarse").laws[ANSWER_TASK]
    p = law.predict_interval(2e9, 4e10)
    forms = [f for f in p if f in law.curves]
    assert forms
    shown = headline_accuracy(law, p)
    assert "[" in shown or "no interval" in shown, shown
    over = {**p, **{f: replace(p[f], value=1.05, lo=0.98, hi=1.21) for f in forms}}
    text = headline_accuracy(law, over)
    assert "1.05" not in text and "1.21" not in text and "none: no chain predicts an accuracy within [0, 1]" in text
    assert "none: no reliable law recommends a run" in headline_accuracy(law, None)
