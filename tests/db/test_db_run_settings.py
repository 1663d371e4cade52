"""Migration 0005 (runs.lr, batch_tokens, beta2, unique_tokens): a 0004 database with rows upgrades in
place, each row's columns filled from its stored spec as registration fills them for a new run, and
the fits read the columns, not the spec."""

from __future__ import annotations

import math

import pytest
import sqlalchemy as sa

from scaling.db import Store, connect
from scaling.db.engine import make_engine
from scaling.db.migrate import upgrade_database
from scaling.db.schema import HEAD
from scaling.fitting.hyperparams.hparams import runs_frame
from scaling.trainer.spec import RunSpec
from scaling.vocab import HPARAM_GROUP_TAG

from db_helpers import migrate

SETTINGS = ["lr", "batch_tokens", "beta2", "unique_tokens", "hparam_group"]


def _records() -> list[dict]:
    """Real RunSpecs' records: a group of two (the group only in the spec's tags), one with its corpus's
    unique tokens, one with the defaults; and a hand-written spec with nothing usable."""
    base = {"model": {"n_layer": 2, "d_model": 64, "n_head": 2}, "tokens": 65536}
    tags = {"tags": {HPARAM_GROUP_TAG: "2x64x2 D=6.554e+04"}}
    specs = [
        RunSpec.model_validate({**base, "batch_tokens": 4096, "optimizer": {"lr": 2e-3, "beta2": 0.99}, **tags}),
        RunSpec.model_validate({**base, "batch_tokens": 8192, "optimizer": {"lr": 4e-3, "beta2": 0.99}, **tags}),
        RunSpec.model_validate({**base, "data": {"unique_tokens": 20_000_000_000}, "seed": 1}),
        RunSpec.model_validate({**base, "seed": 2}),
    ]
    out = [s.record() for s in specs]
    out[0]["hparam_group"] = out[1]["hparam_group"] = None  # as a spec written before the column existed
    odd = dict(out[3], key="f" * 64, spec={"optimizer": {"lr": "fast", "beta2": True}, "batch_tokens": 1.5,
                                          "data": {"unique_tokens": -3}, "tags": {HPARAM_GROUP_TAG: ""}})
    return out + [odd]


def test_upgrade_from_0004_fills_the_columns_from_each_spec_as_registration_does(empty_url: str) -> None:
    migrate(empty_url, "0004")
    recs = _records()
    old = sa.table("runs", *(sa.column(c) for c in (
        "sweep_id", "key", "n_params", "n_params_total", "n_layer", "d_model", "n_head", "vocab_size", "context",
        "tokens", "flops", "seed", "status", "attempts", "created_at", "trunk_tokens", "hparam_group")),
        sa.column("spec", sa.JSON))
    engine = make_engine(empty_url)
    try:
        with engine.begin() as conn:  # rows as a 0004 scaling wrote them: the columns 0004 has
            conn.exec_driver_sql("INSERT INTO sweeps (name, params_convention, flops_convention, created_at) "
                                 "VALUES ('old', 'non_embedding', '6N', '2026-12-01 10:00:00')")
            sid = conn.exec_driver_sql("SELECT id FROM sweeps WHERE name = 'old'").scalar_one()
            conn.execute(sa.insert(old), [
                {"sweep_id": sid, "key": r["key"], "n_params": r["N"], "n_params_total": r["N_total"], "n_layer": 2,
                 "d_model": 64, "n_head": 2, "vocab_size": 256, "context": 256, "tokens": r["D"], "flops": r["C"],
                 "seed": r["seed"], "spec": r["spec"], "status": "completed", "attempts": 1,
                 "created_at": "2026-12-01 10:00:00", "trunk_tokens": 0, "hparam_group": r["hparam_group"]}
                for r in recs])
    finally:
        engine.dispose()

    assert f"upgraded from schema revision 0004 to {HEAD}" in upgrade_database(empty_url)
    with Store(empty_url) as store:  # the same records registered by this scaling
        store.register("new", recs)
    with connect(empty_url) as res:
        migrated = res.runs(sweep="old").set_index("run_key")[SETTINGS]
        registered = res.runs(sweep="new").set_index("run_key")[SETTINGS]
    assert migrated.astype(object).where(migrated.notna(), None).to_dict("index") == \
        registered.astype(object).where(registered.notna(), None).to_dict("index")
    rows = migrated.loc[[r["key"] for r in recs]].to_dict("records")
    assert [(r["lr"], r["batch_tokens"], r["beta2"]) for r in rows[:2]] == [(2e-3, 4096, 0.99), (4e-3, 8192, 0.99)]
    assert rows[0]["hparam_group"] == rows[1]["hparam_group"] == "2x64x2 D=6.554e+04"  # from the tags
    assert rows[2]["unique_tokens"] == 20_000_000_000 and pd_isnull(rows[3]["unique_tokens"])
    assert all(pd_isnull(rows[4][c]) for c in SETTINGS)  # nothing usable in the hand-written spec: NULL

    # the fits read the columns: a listing without its specs gives the same hyperparameters
    with connect(empty_url) as res:
        frame = runs_frame(res.runs(sweep="old", spec=False)).set_index("run_key")
    assert frame.loc[recs[0]["key"], "lr"] == 2e-3 and frame.loc[recs[1]["key"], "batch"] == 8192.0
    assert frame.loc[recs[1]["key"], "group"] == "2x64x2 D=6.554e+04" and math.isnan(frame.loc[recs[4]["key"], "lr"])

    migrate(empty_url, "0004", down=True)
    engine = make_engine(empty_url)
    try:
        cols = {c["name"] for c in sa.inspect(engine).get_columns("runs")}
    finally:
        engine.dispose()
    assert not {"lr", "batch_tokens", "beta2", "unique_tokens"} & cols and "hparam_group" in cols


def pd_isnull(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
