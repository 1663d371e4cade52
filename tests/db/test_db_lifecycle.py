"""The one run lifecycle the scheduler and `scaling train` share, on a real SQLite database: a refused
claim says whether the run is completed or held, a failure is counted as an event signed by its
claimant, and a run another claimant completed keeps that claimant's result."""

from __future__ import annotations

import pytest
from db_helpers import records

from scaling import vocab
from scaling.db import Store, claimant_id, connect
from scaling.db.lifecycle import (CLAIMABLE, QUEUED, RESERVING, TRANSITIONS, WAITING, IllegalTransition,
                                   Lifecycle, check_transition, sources)


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


def test_one_table_of_transitions() -> None:
    """Every state a run can be in, in the database or a sweep's driver, is in the table, and only
    its moves are allowed: a completed run is never claimed or failed, and nothing returns to pending."""
    states = set(vocab.STATUSES) | {QUEUED, RESERVING, WAITING}
    assert set(TRANSITIONS) == states and set().union(*TRANSITIONS.values()) <= states - {vocab.PENDING}
    assert CLAIMABLE == (vocab.PENDING, vocab.FAILED, vocab.INTERRUPTED, vocab.SUPERSEDED)
    assert vocab.COMPLETED not in sources(vocab.FAILED) + sources(vocab.RUNNING)
    assert check_transition(QUEUED, RESERVING) == RESERVING
    for old, new in [(vocab.COMPLETED, vocab.RUNNING), (vocab.COMPLETED, vocab.FAILED), (RESERVING, vocab.RUNNING),
                     (vocab.FAILED, QUEUED), (vocab.PENDING, vocab.COMPLETED), (QUEUED, vocab.INTERRUPTED)]:
        with pytest.raises(IllegalTransition, match=f"from '{old}' to '{new}'"):
            check_transition(old, new)


def test_a_completed_row_is_not_failed_or_interrupted_by_a_late_claimant(sqlite_url: str) -> None:
    """A claimant whose run another claimant took over and completed reports a failure or a stop
    afterwards: the row keeps the completed result and no failure is counted; only a trunk's
    retraining moves a completed run on."""
    rec = records(1)[0]
    key = rec["key"]
    with Store(sqlite_url) as store:
        runs = Lifecycle(store, "late")
        runs.register([rec], params_convention="non_embedding", flops_convention="6N")
        assert runs.claim(key).attempt == 1
        assert runs.complete(key, final_train_loss=3.5, final_eval_loss=3.25) == 3.25
        assert runs.fail(key, "ValueError: too late", attempt=1) is False
        assert runs.interrupt(key, "lost: node died", attempt=1) is False
        assert runs.row(key)["status"] == vocab.COMPLETED and runs.row(key)["final_loss"] == 3.25
        assert runs.retrain(key, "a branch's checkpoint is missing", step=4, message="set aside 1") is True
        assert runs.row(key)["status"] == vocab.INTERRUPTED
        assert runs.claim(key).attempt == 2
        runs.close()
    with connect(sqlite_url) as res:
        kinds = list(res.events(sweep="late")["kind"])
    assert vocab.FAILURE not in kinds and kinds.count(vocab.TRUNK_RETRAIN) == 1
