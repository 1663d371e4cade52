"""Metric writes (batched, idempotent) and the DataFrame read API."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from scaling.db import Store, connect
from scaling import vocab as names

from db_helpers import metric_rows, records

NAMES = (names.TRAIN_LOSS, names.LEARNING_RATE)


def test_metric_writes_are_idempotent(db_url: str) -> None:
    recs = records(1)
    key = recs[0]["key"]
    with Store(db_url) as store:
        store.register("s", recs)
        assert store.log_metrics(key, metric_rows(range(10), NAMES)) == 20
        assert store.log_metrics(key, metric_rows(range(10), NAMES)) == 20  # a replay after a resume
        store.log_metrics(key, metric_rows(range(5, 15), NAMES, scale=2.0))  # overlapping, new values win
        assert store.log_metrics(key, []) == 0
    with connect(db_url) as res:
        df = res.metrics()
    assert len(df) == 30
    assert not df.duplicated(["run_key", "step", "name"]).any()
    loss = df[df["name"] == names.TRAIN_LOSS].set_index("step")["value"]
    assert loss[4] == pytest.approx(1 / 5) and loss[5] == pytest.approx(2 / 6) and loss[14] == pytest.approx(2 / 15)


def test_last_row_of_a_batch_wins_and_nan_reads_back(db_url: str) -> None:
    recs = records(1)
    key = recs[0]["key"]
    with Store(db_url) as store:
        store.register("s", recs)
        rows = [
            (1, 8192, 1e9, names.TRAIN_LOSS, 5.0),
            (1, 8192, 1e9, names.TRAIN_LOSS, 4.0),
            (2, 16384, 2e9, names.TRAIN_LOSS, float("nan")),
            (2, 16384, 2e9, names.GRAD_NORM, float("inf")),
            (3, 24576, 3e30, names.TRAIN_LOSS, None),
            (4, 32768, 4e9, names.TRAIN_LOSS, 1 / 3),
        ]
        assert store.log_metrics(key, rows) == 5
    with connect(db_url) as res:
        df = res.metrics()
    assert list(df["step"]) == [1, 2, 2, 3, 4]
    assert df["value"][0] == 4.0
    by = df.set_index(["step", "name"])["value"]
    assert math.isnan(by[(2, names.TRAIN_LOSS)]) and math.isinf(by[(2, names.GRAD_NORM)])
    assert math.isnan(by[(3, names.TRAIN_LOSS)])
    assert df["flops"].iloc[-2] == 3e30  # C beyond 2**63 stays exact enough as a float
    assert by[(4, names.TRAIN_LOSS)] == 1 / 3  # floats round-trip exactly


def test_metrics_frame_filters_and_wide(db_url: str) -> None:
    recs = records(2)
    k0, k1 = recs[0]["key"], recs[1]["key"]
    with Store(db_url) as store:
        store.register("s", recs)
        store.log_metrics(k0, metric_rows(range(3), NAMES))
        store.log_metrics(k1, metric_rows(range(4), (names.TRAIN_LOSS, names.EVAL_LOSS)))
    with connect(db_url) as res:
        df = res.metrics()
        assert list(df.columns) == ["run_key", "step", "tokens", "flops", "name", "value"]
        assert str(df["step"].dtype) == "int64" and str(df["tokens"].dtype) == "int64"
        assert str(df["value"].dtype) == "float64"
        assert len(df) == 14
        assert df[["run_key", "step"]].apply(tuple, axis=1).is_monotonic_increasing == (k0 < k1)
        assert set(res.metrics(run_keys=[k1])["run_key"]) == {k1}
        only = res.metrics(names=[names.EVAL_LOSS])
        assert set(only["name"]) == {names.EVAL_LOSS} and len(only) == 4
        assert res.metrics(run_keys=[k0], names=[names.EVAL_LOSS]).empty
        assert res.metrics(run_keys=[]).empty
        wide = res.metrics(wide=True)
        assert list(wide.index.names) == ["run_key", "step", "tokens", "flops"]
        assert set(wide.columns) == {names.TRAIN_LOSS, names.LEARNING_RATE, names.EVAL_LOSS}
        assert len(wide) == 7
        assert wide.loc[(k1, 3)][names.EVAL_LOSS].iloc[0] == pytest.approx(1 / 4)
        assert math.isnan(wide.loc[(k1, 3)][names.LEARNING_RATE].iloc[0])
        empty = res.metrics(names=["nothing/here"])
        assert empty.empty and list(empty.columns) == list(df.columns)


def test_runs_sweeps_and_latest(db_url: str) -> None:
    r1, r2 = records(2), records(1, seed0=10)
    with Store(db_url) as store:
        store.register("first", r1, plan="a: 1")
        store.register("second", r2, params_convention="total", flops_convention="6N_attention")
        store.claim(r1[0]["key"], "node-1")
        store.finish(r1[0]["key"], "completed", final_train_loss=3.2, final_eval_loss=3.3)
    with connect(db_url) as res:
        assert res.latest_sweep() == "second"
        runs = res.runs()
        for col in ("run_key", "sweep", "N", "N_total", "D", "C", "n_layer", "d_model", "n_head", "seed", "status",
                    "attempts", "final_loss", "final_train_loss", "error", "host", "started_at", "finished_at", "spec"):
            assert col in runs.columns, col
        assert list(runs["sweep"]) == ["first", "first", "second"]
        first = res.runs(sweep="first")
        assert list(first["run_key"]) == [r["key"] for r in r1]
        done = res.runs(status="completed")
        assert len(done) == 1 and done["final_loss"][0] == 3.3 and done["final_train_loss"][0] == 3.2
        assert done["host"][0] == "node-1" and isinstance(done["spec"][0], dict)
        assert pd.api.types.is_integer_dtype(runs["N"]) and pd.api.types.is_float_dtype(runs["C"])
        assert len(res.runs(status=["pending", "completed"])) == 3
        sweeps = res.sweeps()
        assert list(sweeps["sweep"]) == ["first", "second"]
        assert list(sweeps["runs"]) == [2, 1] and list(sweeps["completed"]) == [1, 0]
        assert sweeps["params_convention"][1] == "total"
        info = res.sweep_info("second")
        assert info["flops_convention"] == "6N_attention" and info["plan"] is None
        from scaling.errors import NotFoundError

        with pytest.raises(NotFoundError, match="nope"):
            res.runs(sweep="nope")
        with pytest.raises(NotFoundError):
            res.sweep_info("nope")


def test_empty_database_reads(db_url: str) -> None:
    with connect(db_url) as res:
        assert res.latest_sweep() is None
        assert res.sweeps().empty and res.runs().empty and res.metrics().empty
        assert res.events().empty and res.fits().empty
        assert "run_key" in res.runs().columns and "final_loss" in res.runs().columns


def test_a_batch_is_one_statement(db_url: str) -> None:
    """One INSERT ... ON CONFLICT DO UPDATE per batch, whatever its size (one round trip)."""
    from sqlalchemy import event

    recs = records(1)
    key = recs[0]["key"]
    with Store(db_url) as store:
        store.register("s", recs)
        store.log_metrics(key, metric_rows(range(1), NAMES))  # first sight of the names
        statements: list[str] = []

        @event.listens_for(store.engine, "before_cursor_execute")
        def count(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
            statements.append(" ".join(statement.split()).upper())

        assert store.log_metrics(key, metric_rows(range(2500), NAMES)) == 5000
    inserts = [s for s in statements if s.startswith("INSERT")]
    assert len(inserts) == 1, statements
    assert "ON CONFLICT (RUN_ID, STEP, NAME_ID) DO UPDATE" in inserts[0]
    with connect(db_url) as res:
        assert len(res.metrics()) == 5000
