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
