"""``--fit stored`` checks that the stored analysis it shows was made from the sweep's current runs: the
data's key is recomputed (read, not fitted) and, where the sweep changed since, the page and the comparison
say so in one note that counts the runs then and now; an unchanged sweep gets no such note."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

import report_synth as S
from scaling.db import connect
from scaling.fitting import fit_sweep
from scaling.reports import write_report
from scaling.reports.compare import load_comparison
from scaling.reports.report_data import ReportData

BUDGETS = (1e13, 3e13, 1e14)
#: Words of the note only a stored analysis of older runs gets.
STALE = "the sweep's runs have changed since"


def _completed(url: str, sweep: str) -> int:
    return int((connect(url).runs(sweep=sweep)["status"] == "completed").sum())


def _stale(notes: list[str]) -> list[str]:
    return [n for n in notes if STALE in n]


def _shown(path: Path) -> str:
    """The page's text as read (its tags, and the attributes in them, left out)."""
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text()))


@pytest.fixture(scope="module")
def grown(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, int, int]:
    """(database, runs fitted, runs now) of sweep ``grows``, fitted and stored, then given a budget more; sweeps
    ``still`` and ``edited`` fitted and stored, unchanged (``edited`` is changed by its own test)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('stale') / 'stale.db'}"
    for seed, sweep in enumerate(("grows", "still", "edited")):
        S.build(url, S.SweepSpec(sweep=sweep, budgets=BUDGETS, sizes_per_budget=4, seed=seed))
        fit_sweep(url, sweep, n_bootstrap=20, next_runs=False)
    before = _completed(url, "grows")
    S.build(url, S.SweepSpec(sweep="grows", budgets=(3e14,), sizes_per_budget=4, seed=3))
    after = _completed(url, "grows")
    assert after > before
    return url, before, after


def test_a_stored_analysis_of_older_runs_is_shown_with_one_note(grown: tuple[str, int, int], tmp_path: Path) -> None:
    url, before, after = grown
    data = ReportData.load(url, "grows", fit="stored")
    assert data.sweep_fit is not None and data.fits  # the stored analysis is still shown
    (note,) = _stale(data.notes)
    assert f"made from {before} completed runs" in note and f"it has {after} completed runs now" in note
    assert "run `scaling fit`" in note
    page = _shown(write_report(url, "grows", tmp_path / "grows.html", fit="stored"))
    assert page.count(STALE) == 1 and f"it has {after} completed runs now" in page


def test_a_stored_analysis_of_the_current_runs_gets_no_note(grown: tuple[str, int, int], tmp_path: Path) -> None:
    url, _, _ = grown
    assert not _stale(ReportData.load(url, "still", fit="stored").notes)
    assert STALE not in _shown(write_report(url, "still", tmp_path / "still.html", fit="stored"))


def test_a_changed_result_is_a_changed_sweep(grown: tuple[str, int, int]) -> None:
    """The same runs, one of them with another final loss: the count is the same, the note is still given."""
    from sqlalchemy import text

    url, _, _ = grown
    assert not _stale(ReportData.load(url, "edited", fit="stored").notes)
    results = connect(url)
    with results.engine.begin() as conn:
        conn.execute(text("UPDATE runs SET final_eval_loss = final_eval_loss * 1.01 WHERE id = "
                          "(SELECT MIN(id) FROM runs WHERE status = 'completed' AND sweep_id = "
                          "(SELECT id FROM sweeps WHERE name = 'edited'))"))
    (note,) = _stale(ReportData.load(url, "edited", fit="stored").notes)
    n = _completed(url, "edited")
    assert f"made from {n} completed runs" in note and f"it has {n} completed runs now" in note


def test_compare_says_which_side_is_stale(grown: tuple[str, int, int]) -> None:
    url, before, after = grown
    record = load_comparison(url, ["grows", "still"], fit="stored").to_dict()
    sides = {s["sweep"]: s for s in record["sweeps"]}
    assert len(_stale(sides["grows"]["notes"])) == 1 and not _stale(sides["still"]["notes"])
    (note,) = _stale(record["notes"])
    assert note.startswith("grows: ") and f"made from {before} completed runs" in note and f"{after} completed" in note
