"""Migration 0004 (runs.hparam_group): an 0003 database with rows upgrades in place, old runs
belong to no group, grouped records keep their label, and a group may gain combinations but not
retrain one of them differently."""

from __future__ import annotations

import pytest
from sqlalchemy import inspect

from scaling.db import Store, connect
from scaling.db.engine import make_engine
from scaling.db.migrate import upgrade_database
from scaling.db.schema import HEAD, current_revision
from scaling.errors import PlanError
from scaling.trainer.spec import RunSpec
from scaling.vocab import HPARAM_GROUP_TAG

from db_helpers import migrate, records

GROUP = "2x64x2 D=6.554e+04"


def _columns(url: str) -> tuple[str, set[str], int]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            cols = {c["name"] for c in inspect(conn).get_columns("runs")}
            return current_revision(conn) or "", cols, conn.exec_driver_sql("SELECT count(*) FROM runs").scalar_one()
    finally:
        engine.dispose()


def grouped(lr: float, batch: int = 8192, **optimizer: float) -> dict:
    """The record of one combination of the group's point (a real RunSpec's)."""
    spec = RunSpec.model_validate({"model": {"n_layer": 2, "d_model": 64, "n_head": 2}, "tokens": 65536,
                                   "batch_tokens": batch, "optimizer": {"lr": lr, **optimizer},
                                   "tags": {HPARAM_GROUP_TAG: GROUP}})
    return spec.record()


def test_models_match_the_migrated_schema(empty_url: str) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from scaling.db.models import Base

    Store(empty_url).close()
    engine = make_engine(empty_url)
    try:
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    finally:
        engine.dispose()


def test_upgrade_from_0003_keeps_rows_outside_any_group_and_stores_new_groups(empty_url: str) -> None:
    migrate(empty_url, "0003")
    old = records(2)
    engine = make_engine(empty_url)
    try:
        with engine.begin() as conn:  # rows as a 0003 scaling wrote them: the columns 0003 has
            conn.exec_driver_sql("INSERT INTO sweeps (name, params_convention, flops_convention, created_at) "
                                 "VALUES ('old', 'non_embedding', '6N', '2026-12-01 10:00:00')")
            sid = conn.exec_driver_sql("SELECT id FROM sweeps WHERE name = 'old'").scalar_one()
            for r in old:
                conn.exec_driver_sql(
                    "INSERT INTO runs (sweep_id, key, n_params, n_params_total, n_layer, d_model, n_head, vocab_size, "
                    "context, tokens, flops, seed, spec, status, attempts, created_at, trunk_tokens) VALUES "
                    f"({sid}, '{r['key']}', {r['N']}, {r['N_total']}, 2, 64, 2, 256, 256, {r['D']}, {r['C']}, "
                    f"{r['seed']}, '{{}}', 'completed', 1, '2026-12-01 10:00:00', 0)")
    finally:
        engine.dispose()

    assert f"upgraded from schema revision 0003 to {HEAD}" in upgrade_database(empty_url)
    revision, cols, n = _columns(empty_url)
    assert revision == HEAD and "hparam_group" in cols and n == 2

    new = [grouped(2e-3), grouped(3e-3)]  # (lr 1e-3 is an old run's key: the same run)
    with Store(empty_url) as store:
        assert store.register("old", new, one_per_point=True) == [r["key"] for r in new]
    with connect(empty_url) as res:
        runs = res.runs(sweep="old").set_index("run_key")
    assert runs.loc[[r["key"] for r in old], "hparam_group"].isna().all()
    assert runs.loc[[r["key"] for r in new], "hparam_group"].eq(GROUP).all()


def test_downgrade_from_0004_drops_only_the_group_column(empty_url: str) -> None:
    with Store(empty_url) as store:
        store.register("s", [grouped(1e-3), grouped(2e-3)])
    migrate(empty_url, "0003", down=True)
    revision, cols, n = _columns(empty_url)
    assert revision == "0003" and "hparam_group" not in cols and {"key", "parent_key"} <= cols and n == 2


def test_a_group_gains_combinations_but_does_not_retrain_one_differently(sqlite_url: str) -> None:
    first = [grouped(1e-3), grouped(1e-3, batch=16384)]
    with Store(sqlite_url) as store:
        store.register("s", first, one_per_point=True)
        for r in first:  # completed: each holds its combination of the point
            store.claim(r["key"], "host:1", sweep="s")
            store.finish(r["key"], "completed", final_eval_loss=3.0, sweep="s")
        wider = grouped(3e-3)  # another learning rate of the same point: welcome
        assert store.register("s", [wider], one_per_point=True) == [wider["key"]]
        changed = grouped(1e-3, eps=1e-6)  # the same combination trained differently: refused
        with pytest.raises(PlanError, match=r"already holds run .* differing in optimizer.eps"):
            store.register("s", [changed], one_per_point=True)
        plain = RunSpec.model_validate({**RunSpec.model_validate(first[0]["spec"]).model_dump(), "tags": {},
                                        "optimizer": {"lr": 5e-3}}).record()
        # the point outside the group (a run with a transferred lr) is another point
        assert store.register("s", [plain], one_per_point=True) == [plain["key"]]
    with connect(sqlite_url) as res:
        runs = res.runs(sweep="s")
    assert sorted(runs["hparam_group"].fillna("-")) == ["-", GROUP, GROUP, GROUP]
