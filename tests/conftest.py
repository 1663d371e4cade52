"""Shared fixtures: fresh results databases on SQLite and on the PostgreSQL CI starts.

- ``db_url``: parametrized over ``sqlite`` and ``postgres``; a fresh database with the schema
  created and no rows. The PostgreSQL variant skips (saying why) when
  ``$SCALING_TEST_POSTGRES_URL`` is unset.
- ``sqlite_url``: the SQLite variant only. ``postgres_url``: the PostgreSQL variant only.
- ``empty_sqlite_url`` / ``empty_postgres_url``: the same without the schema (for migration tests).
- ``shared_ray``: the session's one local Ray, which in-process sweeps join instead of starting
  (and shutting down) their own; ``no_shared_ray`` stops it for a test that builds its own cluster.
- ``curve_sweep_analysis``: a simulated sweep with curve laws and its analysis, built once.

Under pytest-xdist (``-n 2 --dist worksteal``) each test goes to whichever worker is free; each worker
starts at most one shared Ray, and builds a session fixture once if it runs a test that needs it.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Iterator

import pytest

PG_ENV = "SCALING_TEST_POSTGRES_URL"
PG_SKIP = f"${PG_ENV} is not set: PostgreSQL variants skipped (`make test` starts a server and sets it)"


def _init_schema(url: str) -> str:
    from scaling.db import Store

    Store(url).close()
    return url


@pytest.fixture
def empty_sqlite_url(tmp_path: Path) -> str:
    """A SQLite URL whose file does not exist yet."""
    return f"sqlite:///{tmp_path / 'results.db'}"


@pytest.fixture
def empty_postgres_url() -> Iterator[str]:
    """A freshly created, empty PostgreSQL database (dropped afterwards)."""
    base = os.environ.get(PG_ENV)
    if not base:
        pytest.skip(PG_SKIP)
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5})
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        yield make_url(base).set(database=name).render_as_string(hide_password=False)
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


@pytest.fixture
def sqlite_url(empty_sqlite_url: str) -> str:
    """A fresh SQLite results database (schema created, no rows)."""
    return _init_schema(empty_sqlite_url)


@pytest.fixture
def postgres_url(empty_postgres_url: str) -> str:
    """A fresh PostgreSQL results database (schema created, no rows)."""
    return _init_schema(empty_postgres_url)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    """A fresh results database, once on SQLite and once on PostgreSQL."""
    return request.getfixturevalue(f"{request.param}_url")


@pytest.fixture(scope="session")
def _ray_session_end() -> Iterator[None]:
    yield
    import ray

    ray.shutdown()


@pytest.fixture
def shared_ray(_ray_session_end: None) -> None:
    """The session's local Ray, started on first use: a sweep run in-process joins it and leaves it up."""
    from scaling.orchestrator.sweep import start_ray

    start_ray(None, None)


@pytest.fixture
def no_shared_ray() -> None:
    """No Ray in this process: the test starts (and stops) a cluster of its own."""
    import ray

    ray.shutdown()


@pytest.fixture(scope="session")
def curve_sweep_analysis(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, object]:
    """A simulated sweep whose runs follow a known curve law, one size under several schedules
    (tests/curve_sweep.py), and its analysis (8 bootstrap replicates: its tests are about what is said)."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    import curve_sweep

    from scaling.fitting.analysis import fit_sweep

    tmp = tmp_path_factory.mktemp("curve-sweep")
    url = f"sqlite:///{tmp / 'curves.db'}"
    curve_sweep.build(url, tmp / "runs")
    return url, fit_sweep(url, "curves", n_bootstrap=8, next_runs=False)
