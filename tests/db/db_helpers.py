"""Helpers shared by the db tests: tiny run records that look like `RunSpec.record()`."""

from __future__ import annotations

from typing import Any

from scaling.trainer.spec import RunSpec


def records(n: int = 3, seed0: int = 0, **model: int) -> list[dict[str, Any]]:
    """``n`` distinct run records (different seeds) from real RunSpecs."""
    shape = {"n_layer": 2, "d_model": 64, "n_head": 2, **model}
    return [
        RunSpec(model=shape, tokens=65536, batch_tokens=8192, seed=seed0 + i).record() for i in range(n)
    ]


def metric_rows(steps: range, names: tuple[str, ...] = ("train/loss",), scale: float = 1.0) -> list[tuple]:
    """Rows ``(step, tokens, flops, name, value)`` for the given steps and metric names."""
    return [(s, s * 8192, s * 8192 * 6e5, n, scale / (s + 1)) for s in steps for n in names]


def mp_context():  # type: ignore[no-untyped-def]
    """Real worker processes; forked where possible (no re-import, so tests stay fast)."""
    import multiprocessing as mp

    return mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")


def migrate(url: str, revision: str, *, down: bool = False) -> None:
    """Upgrade (or downgrade) the database at ``url`` to the Alembic ``revision``."""
    from alembic import command

    from scaling.db.engine import make_engine
    from scaling.db.schema import alembic_config

    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            (command.downgrade if down else command.upgrade)(alembic_config(connection=conn), revision)
    finally:
        engine.dispose()
