"""The one run lifecycle the scheduler and `scaling train` share, on a real SQLite database: a refused
claim says whether the run is completed or held, a failure is counted as an event signed by its
claimant, and a run another claimant completed keeps that claimant's result."""

from __future__ import annotations

from db_helpers import records

from scaling import vocab
from scaling.db import Store, claimant_id, connect
from scaling.db.lifecycle import Lifecycle


def test_one_run_through_its_attempts(sqlite_url: str) -> None:
    rec = records(1)[0]
    key = rec["key"]
    with Store(sqlite_url) as store:
        runs = Lifecycle(store, "life")
        assert runs.register([rec], params_convention="non_embedding", flops_convention="6N") == [key]
        first = runs.claim(key)
        assert first.attempt == 1 and not first.completed
        held = runs.claim(key)  # this process holds it, with a fresh heartbeat
        assert held.attempt is None and held.status == vocab.RUNNING and held.holder == claimant_id()
        assert not held.completed
        runs.fail(key, "ValueError: boom", step=3, attempt=1)
        second = runs.claim(key)
        assert second.attempt == 2
        runs.interrupt(key, "lost: node died", attempt=2)
        third = runs.claim(key)
        assert third.attempt == 3
        assert runs.complete(key, final_train_loss=3.5, final_eval_loss=3.25) == 3.25
        done = runs.claim(key)
        assert done.completed and done.final_loss == 3.25
        # another claimant that took the run over completed it first: its result stays
        assert runs.complete(key, final_train_loss=9.0, final_eval_loss=9.0) == 3.25
        runs.close()
    with connect(sqlite_url) as res:
        row = res.run(key, sweep="life")
        events = res.events(sweep="life")
    assert row["status"] == vocab.COMPLETED and row["attempts"] == 3 and row["final_loss"] == 3.25
    failure = events[events["kind"] == vocab.FAILURE]["detail"].tolist()
    assert failure == [{"message": "ValueError: boom", "attempt": 1, "host": claimant_id()}]
    assert vocab.INTERRUPTED in set(events["kind"])
