"""`scaling runs` and `scaling status` read a sweep without decoding every run's spec, and the runs
table is plain text: aligned, and no terminal escape from a run's error reaches the terminal."""

from __future__ import annotations

from rich.cells import cell_len

from scaling.db import Store, connect
from scaling.orchestrator.status import list_runs, sweep_status
from scaling.trainer.spec import RunSpec


def _fill(url: str) -> list[str]:
    recs = [RunSpec(model={"n_layer": 2, "d_model": 64, "n_head": 2}, tokens=65536, batch_tokens=8192,
                    seed=i).record() for i in range(3)]
    keys = [r["key"] for r in recs]
    with Store(url) as store:
        store.register("listing", recs)
        store.claim(keys[0], "host-a")
        store.finish(keys[0], "completed", final_train_loss=3.25, final_eval_loss=3.5)
        store.claim(keys[1], "höst-b")
        store.finish(keys[1], "failed", error="boom \x1b[31mred\x1b[0m\nsecond line [bold]not markup[/bold]")
    return keys


def test_the_runs_table_is_aligned_plain_text(sqlite_url: str) -> None:
    keys = _fill(sqlite_url)
    table = list_runs(sqlite_url, "listing")
    lines = table.splitlines()
    assert lines[0] == "sweep listing: 3 runs"
    assert "\x1b" not in table and "?[31mred?[0m second line [bold]not markup[/bold]" in table
    assert len({cell_len(line) for line in lines[1:]}) == 1  # every rule and row as wide
    body = [line for line in lines if line.startswith("│")]
    assert [line.split()[1] for line in body] == keys and "höst-b" in body[1]


def test_runs_without_their_specs_read_the_same_rows(sqlite_url: str) -> None:
    _fill(sqlite_url)
    with connect(sqlite_url) as results:
        full, lean = results.runs(sweep="listing"), results.runs(sweep="listing", spec=False)
    assert list(full.columns) == list(lean.columns) and lean["spec"].isna().all() and full["spec"].notna().all()
    assert full.drop(columns=["spec"]).equals(lean.drop(columns=["spec"]))
    status = sweep_status(sqlite_url, "listing")
    assert status["counts"] == {"completed": 1, "failed": 1, "pending": 1} and status["runs"] == 3


def test_status_shows_running_runs_whose_driver_is_gone(sqlite_url: str) -> None:
    """A killed driver leaves its runs `running`; their heartbeats (3 min old here, as after the kill)
    say nothing runs them."""
    import sqlite3
    from datetime import datetime, timedelta, timezone

    from rich.console import Console

    from scaling.orchestrator.status import render_status

    keys = _fill(sqlite_url)
    with Store(sqlite_url) as store:
        store.claim(keys[2], "host-a")
    assert sweep_status(sqlite_url, "listing")["stale"] is None  # a fresh heartbeat: someone runs it
    old = (datetime.now(timezone.utc) - timedelta(minutes=3)).replace(tzinfo=None)
    with sqlite3.connect(sqlite_url.split("///", 1)[1]) as db:
        db.execute("UPDATE runs SET heartbeat_at = ? WHERE key = ?", (old.isoformat(sep=" "), keys[2]))
    status = sweep_status(sqlite_url, "listing")
    assert status["stale"]["runs"] == 1 and 170 < status["stale"]["since_s"] < 300
    console = Console(width=200, record=True, file=open("/dev/null", "w"))
    console.print(render_status(status))
    assert "1 running, heartbeats stale for 3 min: no live driver; re-run the sweep to recover them" in console.export_text()
