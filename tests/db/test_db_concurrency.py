"""Real processes and threads against one database: claim races and concurrent metric writers."""

from __future__ import annotations

import threading

import pytest

from scaling.db import Store, connect
from scaling import vocab as names

from db_helpers import metric_rows, mp_context, records

WRITERS = 4
BATCHES = 40
STEPS_PER_BATCH = 25
METRIC_NAMES = (names.TRAIN_LOSS, names.LEARNING_RATE, names.GRAD_NORM, names.TOKENS_PER_SECOND)


def _claim(args: tuple[str, str, str]) -> int | None:
    url, key, host = args
    with Store(url) as store:
        return store.claim(key, host)


def test_claim_race_between_processes_has_one_winner(db_url: str) -> None:
    recs = records(1)
    key = recs[0]["key"]
    with Store(db_url) as store:
        store.register("s", recs)
    with mp_context().Pool(6) as pool:
        results = pool.map(_claim, [(db_url, key, f"host-{i}") for i in range(6)])
    assert sorted(results, key=lambda r: r is not None) == [None] * 5 + [1]
    with connect(db_url) as res:
        row = res.run(key)
    assert row is not None and row["attempts"] == 1 and row["status"] == "running"
    assert row["host"] == f"host-{results.index(1)}"


def test_claim_race_between_threads_has_one_winner(db_url: str) -> None:
    recs = records(1)
    key = recs[0]["key"]
    results: list[int | None] = []
    with Store(db_url) as store:
        store.register("s", recs)
        barrier = threading.Barrier(8)

        def go(i: int) -> None:
            barrier.wait()
            results.append(store.claim(key, f"t{i}"))

        threads = [threading.Thread(target=go, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert results.count(1) == 1 and results.count(None) == 7


def _write(args: tuple[str, str, int]) -> int:
    """One worker process: many batches, some replayed (as after a resume)."""
    url, key, seed = args
    n = 0
    with Store(url) as store:
        for b in range(BATCHES):
            steps = range(b * STEPS_PER_BATCH, (b + 1) * STEPS_PER_BATCH)
            n += store.log_metrics(key, metric_rows(steps, METRIC_NAMES, scale=seed + 1))
            if b % 10 == 0:
                store.heartbeat(key)
                store.log_event(key, b, names.RESUME, {"batch": b})
                store.log_metrics(key, metric_rows(steps, METRIC_NAMES, scale=seed + 1))  # replay
    return n


def test_concurrent_writer_processes_lose_nothing(db_url: str) -> None:
    recs = records(WRITERS)
    with Store(db_url) as store:
        store.register("s", recs)
        for r in recs:
            store.claim(r["key"], "h")
    with mp_context().Pool(WRITERS) as pool:
        counts = pool.map(_write, [(db_url, r["key"], i) for i, r in enumerate(recs)])
    per_run = BATCHES * STEPS_PER_BATCH * len(METRIC_NAMES)
    assert counts == [per_run] * WRITERS
    with connect(db_url) as res:
        df = res.metrics()
        events = res.events()
    assert len(df) == per_run * WRITERS
    assert df.groupby("run_key").size().to_dict() == {r["key"]: per_run for r in recs}
    for i, r in enumerate(recs):  # every value is the one its own writer wrote
        mine = df[(df["run_key"] == r["key"]) & (df["step"] == 7) & (df["name"] == names.TRAIN_LOSS)]
        assert mine["value"].tolist() == pytest.approx([(i + 1) / 8])
    assert len(events) == WRITERS * (BATCHES // 10)


@pytest.mark.parametrize("busy_timeout_s", [30.0, 0.05])
def test_writes_wait_out_a_long_lock_instead_of_failing(
    sqlite_url: str, busy_timeout_s: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer holds SQLite's write lock for a second: the other waits, no "database is locked".

    With a 30 s busy timeout SQLite itself waits; with 0.05 s SQLite raises "database is
    locked" many times and the Store's transaction retry loop absorbs it.
    """
    import sqlite3
    import time

    from scaling.db import engine
    from scaling.db.engine import sqlite_path

    monkeypatch.setattr(engine, "SQLITE_BUSY_TIMEOUT_S", busy_timeout_s)
    locked_seen: list[BaseException] = []
    real_is_locked = engine.is_locked

    def counting_is_locked(exc: BaseException) -> bool:
        locked = real_is_locked(exc)
        if locked:
            locked_seen.append(exc)
        return locked

    monkeypatch.setattr(engine, "is_locked", counting_is_locked)

    recs = records(1)
    key = recs[0]["key"]
    with Store(sqlite_url) as store:
        store.register("s", recs)
        blocker = sqlite3.connect(sqlite_path(sqlite_url), isolation_level=None, check_same_thread=False)
        blocker.execute("BEGIN IMMEDIATE")
        release = threading.Timer(1.0, lambda: blocker.execute("COMMIT"))
        release.start()
        t0 = time.monotonic()
        try:
            assert store.log_metrics(key, metric_rows(range(3))) == 3
        finally:
            release.join()
            blocker.close()
        assert time.monotonic() - t0 >= 0.9  # it really waited for the lock
    assert bool(locked_seen) == (busy_timeout_s < 1)  # the retry loop was (or was not) needed
    with connect(sqlite_url) as res:
        assert len(res.metrics()) == 3


def test_a_store_inherited_through_fork_opens_its_own_connections(sqlite_url: str) -> None:
    import multiprocessing as mp

    if "fork" not in mp.get_all_start_methods():
        pytest.skip("fork is not available on this platform")
    recs = records(2)
    store = Store(sqlite_url)
    store.register("s", recs)  # the parent's pool now holds a connection

    def child(key: str) -> None:
        store.log_metrics(key, metric_rows(range(50), METRIC_NAMES))

    procs = [mp.get_context("fork").Process(target=child, args=(r["key"],)) for r in recs]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    store.log_metrics(recs[0]["key"], metric_rows(range(50, 60), METRIC_NAMES))
    store.close()
    with connect(sqlite_url) as res:
        assert res.metrics().groupby("run_key").size().to_dict() == {recs[0]["key"]: 240, recs[1]["key"]: 200}


def _new_names(args: tuple[str, str, int]) -> None:
    url, key, batches = args
    with Store(url) as store:
        for b in range(batches):
            store.log_metrics(key, [(s, s, 1.0, names.task_metric(f"t{b}", names.TASK_ACC), 1.0) for s in range(20)])


def test_reads_while_a_writer_adds_new_metric_names(db_url: str) -> None:
    recs = records(1)
    key = recs[0]["key"]
    with Store(db_url) as store:
        store.register("s", recs)
        store.log_metrics(key, [(0, 0, 0.0, names.TRAIN_LOSS, 1.0)])
    proc = mp_context().Process(target=_new_names, args=((db_url, key, 150),))
    proc.start()
    reads = 0
    with connect(db_url) as res:
        while proc.is_alive() or reads == 0:
            df = res.metrics()
            assert df["name"].notna().all() and df["run_key"].notna().all()
            reads += 1
        proc.join(60)
        assert proc.exitcode == 0
        assert len(res.metrics()) == 1 + 150 * 20
    assert reads >= 1


def test_a_postgresql_deadlock_counts_as_a_lock_conflict_to_retry(postgres_url: str) -> None:
    """Two transactions that lock two runs in opposite orders: PostgreSQL kills one (deadlock_detected,
    40P01) and rolls it back; the store's retry takes that as it takes SQLite's "locked", so the
    write is tried again instead of stopping the sweep. (Every multi-run write of the store locks
    rows in id order, so two drivers never do this to each other.)"""
    from sqlalchemy import create_engine, text

    from scaling.db.engine import is_locked

    recs = records(2)
    with Store(postgres_url) as store:
        store.register("s", recs)
    engine = create_engine(postgres_url)
    with engine.connect() as conn:
        ids = [conn.execute(text("SELECT id FROM runs WHERE key = :k"), {"k": r["key"]}).scalar_one() for r in recs]
    both_hold_one = threading.Barrier(2)
    errors: list[BaseException] = []

    def lock(first: int, second: int) -> None:
        try:
            with engine.begin() as conn:
                conn.execute(text("SELECT id FROM runs WHERE id = :i FOR UPDATE"), {"i": first})
                both_hold_one.wait(timeout=10)
                conn.execute(text("SELECT id FROM runs WHERE id = :i FOR UPDATE"), {"i": second})
        except Exception as exc:  # noqa: BLE001 - the deadlock's victim
            errors.append(exc)

    threads = [threading.Thread(target=lock, args=order) for order in (ids, ids[::-1])]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    engine.dispose()
    assert len(errors) == 1 and "deadlock" in str(errors[0]).lower()
    assert is_locked(errors[0])
