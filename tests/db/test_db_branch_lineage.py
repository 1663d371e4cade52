"""Migration 0003 (runs.parent_key, runs.trunk_tokens): an 0002 database with rows upgrades in
place, its runs read back as trained from scratch, and branch records keep their lineage."""

from __future__ import annotations

import pytest
from sqlalchemy import inspect

from scaling.db import Store, connect
from scaling.db.engine import make_engine
from scaling.db.migrate import upgrade_database
from scaling.db.schema import HEAD, alembic_config, current_revision

from db_helpers import metric_rows, records


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_url(request: pytest.FixtureRequest) -> str:
    return request.getfixturevalue(f"empty_{request.param}_url")


def _migrate_to(url: str, revision: str) -> None:
    from alembic import command

    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            command.upgrade(alembic_config(connection=conn), revision)
    finally:
        engine.dispose()


def _insert_0002_rows(url: str, recs: list[dict]) -> None:
    """Rows as a 0002 scaling wrote them: through SQL on the tables 0002 has (no lineage columns)."""
    import json

    from sqlalchemy import text

    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text(
                "INSERT INTO sweeps (name, plan, params_convention, flops_convention, created_at) "
                "VALUES ('old', NULL, 'non_embedding', '6N', '2026-11-30 10:00:00')"
            ))
            sid = conn.execute(text("SELECT id FROM sweeps WHERE name = 'old'")).scalar_one()
            for r in recs:
                conn.execute(text(
                    "INSERT INTO runs (sweep_id, key, n_params, n_params_total, n_layer, d_model, n_head, vocab_size, "
                    "context, tokens, flops, seed, spec, status, attempts, created_at, final_eval_loss) VALUES "
                    "(:sid, :key, :N, :NT, :nl, :dm, :nh, :v, :ctx, :D, :C, :seed, :spec, 'completed', 1, "
                    "'2026-11-30 10:00:00', 3.5)"
                ), dict(sid=sid, key=r["key"], N=r["N"], NT=r["N_total"], nl=r["n_layer"], dm=r["d_model"],
                        nh=r["n_head"], v=r["vocab_size"], ctx=r["context"], D=r["D"], C=r["C"], seed=r["seed"],
                        spec=json.dumps(r["spec"])))
    finally:
        engine.dispose()


def test_upgrade_from_0002_keeps_rows_and_reads_them_as_trained_from_scratch(empty_url: str) -> None:
    _migrate_to(empty_url, "0002")
    recs = records(3)
    _insert_0002_rows(empty_url, recs)

    assert f"upgraded from schema revision 0002 to {HEAD}" in upgrade_database(empty_url)
    engine = make_engine(empty_url)
    try:
        with engine.connect() as conn:
            assert current_revision(conn) == HEAD
            cols = {c["name"] for c in inspect(conn).get_columns("runs")}
            indexes = {i["name"] for i in inspect(conn).get_indexes("runs")}
    finally:
        engine.dispose()
    assert {"parent_key", "trunk_tokens"} <= cols
    assert "ix_runs_parent_key" in indexes

    with connect(empty_url) as res:
        runs = res.runs(sweep="old").set_index("run_key")
    assert sorted(runs.index) == sorted(r["key"] for r in recs)
    assert runs["status"].eq("completed").all() and runs["final_loss"].eq(3.5).all()
    assert runs["parent_key"].isna().all()
    assert runs["trunk_tokens"].eq(0).all()

    # The upgraded database takes new rows with lineage beside the old ones.
    store = Store(empty_url)
    try:
        trunk, branch = records(2, seed0=10)
        branch = {**branch, "parent_key": trunk["key"], "trunk_tokens": 49152}
        assert store.register("old", [trunk, branch]) == [trunk["key"], branch["key"]]
        store.log_metrics(branch["key"], metric_rows(range(6, 8)), sweep="old")
    finally:
        store.close()
    with connect(empty_url) as res:
        row = res.run(branch["key"], sweep="old")
        assert row is not None and row["parent_key"] == trunk["key"] and row["trunk_tokens"] == 49152
        assert res.run(trunk["key"], sweep="old")["parent_key"] is None  # type: ignore[index]


def test_downgrade_from_0003_drops_only_the_lineage_columns(empty_url: str) -> None:
    from alembic import command

    Store(empty_url).close()
    _insert_0002_rows(empty_url, records(2))
    engine = make_engine(empty_url)
    try:
        with engine.begin() as conn:
            command.downgrade(alembic_config(connection=conn), "0002")
        with engine.connect() as conn:
            cols = {c["name"] for c in inspect(conn).get_columns("runs")}
            n = conn.exec_driver_sql("SELECT count(*) FROM runs").scalar_one()
    finally:
        engine.dispose()
    assert "parent_key" not in cols and "trunk_tokens" not in cols and "key" in cols
    assert n == 2
