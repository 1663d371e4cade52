"""`Store`: the write API every process of a sweep uses (orchestrator, trainers, fitting).

Each method is one short transaction (so nothing is half-written), retried while SQLite reports
"database is locked". Run keys are unique *within a sweep*: the same spec may appear in two
sweeps. Methods taking a ``key`` accept ``sweep=`` to say which; without it a key that is in one
sweep only (the usual case) is found directly, and a key in several sweeps resolves to the one
that is running, else raises :class:`AmbiguousRunError`.
"""

from __future__ import annotations

import json
import math
import os
from datetime import datetime, timedelta
from typing import Any, Callable, Iterable, Optional, Sequence, TypeVar

from sqlalchemy import BigInteger, Connection, Float, Integer, Text, bindparam, cast, func, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite

from scaling.db.engine import make_engine, resolve_url, retrying
from scaling.db.models import (
    CLAIMABLE,
    COMPLETED,
    FINAL,
    INTERRUPTED,
    RUNNING,
    STATUSES,
    Event,
    Fit,
    Metric,
    MetricName,
    Run,
    Sweep,
    utcnow,
)
from scaling.db.schema import ensure_schema
from scaling.errors import NotFoundError, PlanError, mask_url
from scaling.trainer import names

T = TypeVar("T")

HEARTBEAT_TIMEOUT_S = 120.0  # a running run whose heartbeat is older than this has no live claimant

RECORD_FIELDS = ("key", "N", "N_total", "n_layer", "d_model", "n_head", "vocab_size", "context", "D", "C", "seed", "spec")
MetricRow = tuple[int, int, float, str, Optional[float]]
_UPSERT_ORDER = ("run_id", "step", "name_id", "tokens", "flops", "value")


class AmbiguousRunError(LookupError):
    """A run key that is in several sweeps, none of them running it: the caller must pass sweep=."""


def json_safe(value: Any) -> Any:
    """``value`` with non-finite floats as strings: PostgreSQL's json type refuses NaN and Infinity."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def _check_json(value: Any, what: str) -> Any:
    value = json_safe(value)
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} must be JSON-serializable: {exc}") from None
    return value


def run_row(run: Any, sweep_name: str) -> dict[str, Any]:
    """One run as a dict with the read API's plain names (``N``, ``D``, ``C``, ``final_loss`` ...)."""
    return {
        "run_key": run.key,
        "sweep": sweep_name,
        "N": run.n_params,
        "N_total": run.n_params_total,
        "D": run.tokens,
        "C": run.flops,
        "n_layer": run.n_layer,
        "d_model": run.d_model,
        "n_head": run.n_head,
        "vocab_size": run.vocab_size,
        "context": run.context,
        "seed": run.seed,
        "status": run.status,
        "attempts": run.attempts,
        "final_loss": run.final_eval_loss,
        "final_train_loss": run.final_train_loss,
        "error": run.error,
        "host": run.host,
        "heartbeat_at": run.heartbeat_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "created_at": run.created_at,
        "spec": run.spec,
    }


# Every column of runs plus the sweep's name (Core rows: attribute access by column name).
_RUNS = select(Run.__table__, Sweep.name.label("sweep_name")).join(Sweep, Sweep.id == Run.sweep_id)


class Store:
    """Writes to the results database at ``url`` (None: :func:`resolve_url`'s default).

    Opening it creates the schema in an empty database and refuses one at an older schema
    revision (:class:`~scaling.errors.SchemaOutdatedError`). Create one ``Store`` per process;
    pickling a ``Store`` (e.g. into a Ray task) sends only its URL and reconnects on arrival.
    """

    def __init__(self, url: Optional[str] = None, *, stale_after_s: float = HEARTBEAT_TIMEOUT_S) -> None:
        self.url = resolve_url(url)
        self.stale_after_s = float(stale_after_s)
        self.engine = make_engine(self.url)
        self._pid = os.getpid()
        self._ids: dict[tuple[Optional[str], str], int] = {}
        try:
            retrying(lambda: ensure_schema(self.engine, self.url), self.url, "open")
        except BaseException:
            self.engine.dispose()
            raise
        self._name_ids: dict[str, int] = {}
        self._upsert = self._metrics_upsert()
        self._upsert_sql = self._compiled_upsert()

    # -- plumbing ----------------------------------------------------------------------------
    def __reduce__(self) -> tuple:
        return (type(self), (self.url,), {"stale_after_s": self.stale_after_s})

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.stale_after_s = state["stale_after_s"]

    def __repr__(self) -> str:
        return f"Store({mask_url(self.url)!r})"

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _tx(self, fn: Callable[[Connection], T], *, write: bool = True) -> T:
        """Run ``fn`` in one transaction (``BEGIN IMMEDIATE`` on SQLite when writing), retried when locked."""
        if self._pid != os.getpid():  # forked: never reuse the parent's pooled connections
            self.engine.dispose(close=False)
            self._pid = os.getpid()

        def attempt() -> T:
            with self.engine.connect() as conn:
                conn.execution_options(scaling_write=write)
                with conn.begin():
                    return fn(conn)

        return retrying(attempt, self.url, "write to" if write else "read")

    def _insert(self, model: type) -> Any:
        """The dialect's INSERT, which has ``on_conflict_do_update`` / ``_do_nothing``."""
        dialect = self.engine.dialect.name
        if dialect == "sqlite":
            return sqlite.insert(model)
        if dialect == "postgresql":
            return postgresql.insert(model)
        raise NotImplementedError(f"unsupported database dialect {dialect!r} (SQLite or PostgreSQL)")

    def _metrics_upsert(self) -> Any:
        if self.engine.dialect.name == "postgresql":
            # One statement per batch whatever its size: the rows travel as six array literals
            # ('{1,2,3}', built by str.join: far cheaper than adapting each element) and
            # unnest() turns them back into rows on the server.
            types = {"run_id": Integer, "step": Integer, "name_id": Integer, "tokens": BigInteger, "flops": Float, "value": Float}
            rows = (
                func.unnest(*(cast(bindparam(c, type_=Text), postgresql.ARRAY(t)) for c, t in types.items()))
                .table_valued(*types)
                .render_derived(name="batch")
            )
            stmt = postgresql.insert(Metric).from_select(list(types), select(*(rows.c[c] for c in types)))
        else:
            stmt = self._insert(Metric)
        return stmt.on_conflict_do_update(
            index_elements=[Metric.run_id, Metric.step, Metric.name_id],
            set_={"tokens": stmt.excluded.tokens, "flops": stmt.excluded.flops, "value": stmt.excluded.value},
        )

    def _compiled_upsert(self) -> Optional[str]:
        """On SQLite, the upsert's SQL text with ``?`` in _UPSERT_ORDER (skips per-row binding)."""
        if self.engine.dialect.name != "sqlite":
            return None
        compiled = self._upsert.compile(dialect=self.engine.dialect, column_keys=list(_UPSERT_ORDER))
        assert tuple(compiled.positiontup or ()) == _UPSERT_ORDER, compiled.positiontup
        return str(compiled)

    def _resolve(self, conn: Connection, key: str, sweep: Optional[str], *, required: bool = True) -> Optional[int]:
        cached = self._ids.get((sweep, key))
        if cached is not None:
            return cached
        q = select(Run.id, Run.status, Sweep.name).join(Sweep, Sweep.id == Run.sweep_id).where(Run.key == key)
        if sweep is not None:
            q = q.where(Sweep.name == sweep)
        rows = conn.execute(q).all()
        if len(rows) == 1:
            if sweep is not None:  # (sweep, key) never changes run; a bare key may gain a sweep later
                self._ids[(sweep, key)] = rows[0].id
            return rows[0].id
        if not rows:
            if not required:
                return None
            where = f" in sweep {sweep!r}" if sweep is not None else ""
            raise NotFoundError(f"run {key}{where} not found in {mask_url(self.url)}")
        running = [r for r in rows if r.status == RUNNING]
        if len(running) == 1:
            return running[0].id
        raise AmbiguousRunError(
            f"run key {key} is in sweeps {', '.join(sorted(r.name for r in rows))}: pass sweep= to say which"
        )

    def _sweep_id(self, conn: Connection, name: str) -> int:
        sid = conn.scalar(select(Sweep.id).where(Sweep.name == name))
        if sid is None:
            raise NotFoundError(f"sweep {name!r} not found in {mask_url(self.url)}")
        return sid

    # -- sweeps and runs ---------------------------------------------------------------------
    def register(
        self,
        sweep: str,
        records: Iterable[dict[str, Any]],
        *,
        plan: Any = None,
        params_convention: str = "non_embedding",
        flops_convention: str = "6N",
    ) -> list[str]:
        """Create ``sweep`` if new and a pending run per record whose key it lacks; return the new keys.

        Runs already in the sweep, whatever their status, are left untouched (a completed run
        is never redone). A sweep keeps the conventions it was created with: registering with
        different ones raises :class:`~scaling.errors.PlanError`.
        """
        if not sweep or not str(sweep).strip():
            raise PlanError("a sweep needs a non-empty name")
        recs: dict[str, dict[str, Any]] = {}
        for i, rec in enumerate(records):
            missing = [f for f in RECORD_FIELDS if f not in rec]
            if missing:
                raise ValueError(f"record {i} lacks {', '.join(missing)} (expected RunSpec.record())")
            recs.setdefault(str(rec["key"]), rec)
        plan_json = _check_json(plan, "plan") if plan is not None else None

        def tx(conn: Connection) -> list[str]:
            row = conn.execute(
                select(Sweep.id, Sweep.params_convention, Sweep.flops_convention, Sweep.plan).where(Sweep.name == sweep)
            ).first()
            if row is None:
                conn.execute(
                    self._insert(Sweep)
                    .values(
                        name=sweep,
                        plan=plan_json,
                        params_convention=params_convention,
                        flops_convention=flops_convention,
                        created_at=utcnow(),
                    )
                    .on_conflict_do_nothing(index_elements=[Sweep.name])
                )
                sid = self._sweep_id(conn, sweep)
            else:
                sid = row.id
                if (row.params_convention, row.flops_convention) != (params_convention, flops_convention):
                    raise PlanError(
                        f"sweep {sweep!r} counts N as {row.params_convention!r} and C as {row.flops_convention!r}; "
                        f"this plan says {params_convention!r} and {flops_convention!r}: use another sweep name"
                    )
                if row.plan is None and plan_json is not None:
                    conn.execute(update(Sweep).where(Sweep.id == sid).values(plan=plan_json))
            existing = set(conn.scalars(select(Run.key).where(Run.sweep_id == sid)))
            new = [k for k in recs if k not in existing]
            if new:
                now = utcnow()
                conn.execute(
                    self._insert(Run).on_conflict_do_nothing(index_elements=[Run.sweep_id, Run.key]),
                    [_run_values(sid, recs[k], now) for k in new],
                )
            return new

        return self._tx(tx)

    def claim(
        self, key: str, host: str, *, sweep: Optional[str] = None, stale_after_s: Optional[float] = None
    ) -> Optional[int]:
        """Mark a run running for ``host``; return its new attempt number, or None if refused.

        Claimable: pending, failed, interrupted, or running with a heartbeat older than
        ``stale_after_s`` (its claimant is dead; a ``stale_recovered`` event records the takeover).
        Refused: completed, or running with a fresh heartbeat. One transaction: ``BEGIN
        IMMEDIATE`` on SQLite, ``SELECT ... FOR UPDATE`` on PostgreSQL, so one of several
        racing claimants wins.
        """
        timeout = self.stale_after_s if stale_after_s is None else float(stale_after_s)

        def tx(conn: Connection) -> Optional[int]:
            rid = self._resolve(conn, key, sweep)
            run = conn.execute(
                select(Run.status, Run.attempts, Run.heartbeat_at, Run.host).where(Run.id == rid).with_for_update()
            ).one()
            now = utcnow()
            if run.status == COMPLETED:
                return None
            if run.status == RUNNING:
                if run.heartbeat_at is not None and run.heartbeat_at >= now - timedelta(seconds=timeout):
                    return None
                self._event(conn, rid, None, names.STALE_RECOVERED, _stale_detail(run, timeout, "claim"), now)
            elif run.status not in CLAIMABLE:
                return None
            attempt = run.attempts + 1
            conn.execute(
                update(Run)
                .where(Run.id == rid)
                .values(
                    status=RUNNING,
                    attempts=attempt,
                    host=host,
                    heartbeat_at=now,
                    started_at=now,
                    finished_at=None,
                    error=None,
                    final_train_loss=None,
                    final_eval_loss=None,
                )
            )
            return attempt

        return self._tx(tx)

    def heartbeat(self, key: str, *, sweep: Optional[str] = None) -> None:
        """Record that the run's claimant is alive (call well within ``stale_after_s``)."""
        self._tx(lambda c: c.execute(update(Run).where(Run.id == self._resolve(c, key, sweep)).values(heartbeat_at=utcnow())))

    def finish(
        self,
        key: str,
        status: str,
        *,
        final_train_loss: Optional[float] = None,
        final_eval_loss: Optional[float] = None,
        error: Optional[str] = None,
        sweep: Optional[str] = None,
    ) -> None:
        """End the current attempt as completed, failed or interrupted, with its final losses."""
        if status not in FINAL:
            raise ValueError(f"finish status must be one of {', '.join(FINAL)}, not {status!r}")
        values: dict[str, Any] = {"status": status, "finished_at": utcnow(), "error": error}
        if final_train_loss is not None:
            values["final_train_loss"] = _float_or_none(final_train_loss)
        if final_eval_loss is not None:
            values["final_eval_loss"] = _float_or_none(final_eval_loss)
        self._tx(lambda c: c.execute(update(Run).where(Run.id == self._resolve(c, key, sweep)).values(**values)))

    def set_status(self, key: str, status: str, *, sweep: Optional[str] = None) -> None:
        """Set a run's status directly (an operator's override; prefer claim/finish)."""
        if status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, not {status!r}")
        self._tx(lambda c: c.execute(update(Run).where(Run.id == self._resolve(c, key, sweep)).values(status=status)))

    def mark_interrupted(
        self, keys: Iterable[str], *, sweep: Optional[str] = None, reason: str = "interrupted by the user"
    ) -> list[str]:
        """Running runs among ``keys`` → interrupted, each with an ``interrupted`` event (Ctrl-C)."""
        keys = list(keys)

        def tx(conn: Connection) -> list[str]:
            now = utcnow()
            done = []
            for key in keys:
                rid = self._resolve(conn, key, sweep, required=False)
                if rid is None:
                    continue
                res = conn.execute(
                    update(Run)
                    .where(Run.id == rid, Run.status == RUNNING)
                    .values(status=INTERRUPTED, finished_at=now)
                )
                if res.rowcount:
                    self._event(conn, rid, None, names.INTERRUPTED, reason, now)
                    done.append(key)
            return done

        return self._tx(tx)

    def recover_stale(self, timeout_s: float, *, sweep: Optional[str] = None) -> list[str]:
        """Running runs whose heartbeat is older than ``timeout_s`` → interrupted; return their keys.

        Each gets a ``stale_recovered`` event. A run left running by a dead orchestrator or
        worker is then claimable again.
        """

        def tx(conn: Connection) -> list[str]:
            now = utcnow()
            cutoff = now - timedelta(seconds=float(timeout_s))
            q = (
                select(Run.id, Run.key, Run.attempts, Run.heartbeat_at, Run.host)
                .where(Run.status == RUNNING, or_(Run.heartbeat_at.is_(None), Run.heartbeat_at < cutoff))
                .order_by(Run.id)
                .with_for_update(skip_locked=True)
            )
            if sweep is not None:
                q = q.where(Run.sweep_id == self._sweep_id(conn, sweep))
            keys = []
            for run in conn.execute(q).all():
                res = conn.execute(
                    update(Run)
                    .where(Run.id == run.id, Run.status == RUNNING)
                    .values(status=INTERRUPTED, finished_at=now)
                )
                if res.rowcount:
                    self._event(conn, run.id, None, names.STALE_RECOVERED, _stale_detail(run, timeout_s, "recover_stale"), now)
                    keys.append(run.key)
            return keys

        return self._tx(tx)

    # -- metrics and events ------------------------------------------------------------------
    def log_metrics(self, key: str, rows: Iterable[Sequence[Any]], *, sweep: Optional[str] = None) -> int:
        """Write rows of ``(step, tokens, flops, name, value)`` in one transaction; return the count.

        Idempotent on (run, step, name): a repeated row (e.g. after a resume) overwrites the old
        one through the dialect's ``INSERT ... ON CONFLICT DO UPDATE``, sent as one executemany
        (SQLite) or one multi-row statement (PostgreSQL). Within a batch the last row for a
        (step, name) wins. NaN values are stored as NULL (read back as NaN).
        """
        latest: dict[tuple[int, str], tuple[int, float, Optional[float]]] = {}
        for step, tokens, flops, name, value in rows:
            v = None if value is None else float(value)
            latest[(int(step), str(name))] = (int(tokens), float(flops), None if v is None or v != v else v)
        if not latest:
            return 0
        rid = self._ids.get((sweep, key))
        if rid is None:
            rid = self._tx(lambda c: self._resolve(c, key, sweep), write=False)
        wanted = {n for _, n in latest}

        def tx(conn: Connection) -> dict[str, int]:
            ids = self._metric_name_ids(conn, wanted)
            if self._upsert_sql is not None:  # SQLite: the compiled upsert, straight to the driver
                conn.exec_driver_sql(
                    self._upsert_sql, [(rid, s, ids[n], t, f, v) for (s, n), (t, f, v) in latest.items()]
                )
            else:  # PostgreSQL: one INSERT ... SELECT FROM unnest(arrays) ... ON CONFLICT DO UPDATE
                (steps, names_), values = zip(*latest.keys()), list(latest.values())
                tokens, flops, vals = zip(*values)
                conn.execute(
                    self._upsert,
                    {
                        "run_id": _pg_array([rid] * len(values)),
                        "step": _pg_array(steps),
                        "name_id": _pg_array([ids[n] for n in names_]),
                        "tokens": _pg_array(tokens),
                        "flops": _pg_array(flops),
                        "value": _pg_array(vals),
                    },
                )
            return ids

        # Cache name ids only once committed: a rolled-back attempt must not leave ids behind.
        self._name_ids.update(self._tx(tx))
        return len(latest)

    def _metric_name_ids(self, conn: Connection, wanted: set[str]) -> dict[str, int]:
        """Ids of ``wanted`` metric names, inserting the new ones (race-safe: ON CONFLICT DO NOTHING)."""
        ids = {n: self._name_ids[n] for n in wanted if n in self._name_ids}
        missing = sorted(wanted - ids.keys())
        if missing:
            conn.execute(
                self._insert(MetricName).on_conflict_do_nothing(index_elements=[MetricName.name]),
                [{"name": n} for n in missing],
            )
            ids.update(
                {n: i for i, n in conn.execute(select(MetricName.id, MetricName.name).where(MetricName.name.in_(missing)))}
            )
        return ids

    def log_event(
        self, key: str, step: Optional[int], kind: str, detail: Any = None, *, sweep: Optional[str] = None
    ) -> None:
        """Record an event (a name from :mod:`scaling.trainer.names`); ``detail`` a str or JSON-able dict."""
        if not kind:
            raise ValueError("an event needs a kind")
        detail = _check_json(detail, "event detail")
        self._tx(lambda c: self._event(c, self._resolve(c, key, sweep), step, kind, detail, utcnow()))

    @staticmethod
    def _event(conn: Connection, run_id: int, step: Optional[int], kind: str, detail: Any, now: datetime) -> None:
        conn.execute(
            insert(Event).values(run_id=run_id, step=None if step is None else int(step), kind=kind, detail=detail, created_at=now)
        )

    # -- fits --------------------------------------------------------------------------------
    def save_fit(self, sweep: str, law: str, method: str, result: dict[str, Any], fingerprint: str) -> int:
        """Store a fitted law (its ``to_dict()``) with the fingerprint of the data it saw; return its id."""
        result = _check_json(result, "fit result")

        def tx(conn: Connection) -> int:
            sid = self._sweep_id(conn, sweep)
            return conn.execute(
                insert(Fit)
                .values(sweep_id=sid, law=law, method=method, result=result, fingerprint=fingerprint, created_at=utcnow())
                .returning(Fit.id)
            ).scalar_one()

        return self._tx(tx)

    def find_fit(self, sweep: str, law: str, method: str, fingerprint: str) -> Optional[dict[str, Any]]:
        """The latest fit of ``law`` by ``method`` on data with ``fingerprint``, for reuse; or None."""

        def tx(conn: Connection) -> Optional[dict[str, Any]]:
            row = conn.execute(
                select(Fit.id, Fit.law, Fit.method, Fit.result, Fit.fingerprint, Fit.created_at)
                .join(Sweep, Sweep.id == Fit.sweep_id)
                .where(Sweep.name == sweep, Fit.law == law, Fit.method == method, Fit.fingerprint == fingerprint)
                .order_by(Fit.id.desc())
                .limit(1)
            ).first()
            return None if row is None else {"id": row.id, "sweep": sweep, **row._asdict()}

        return self._tx(tx, write=False)

    # -- reads the writers need ------------------------------------------------------------------
    def run(self, key: str, *, sweep: Optional[str] = None) -> Optional[dict[str, Any]]:
        """One run's row (read-API names: ``run_key``, ``N``, ``D``, ``C``, ``status`` ...), or None."""

        def tx(conn: Connection) -> Optional[dict[str, Any]]:
            rid = self._resolve(conn, key, sweep, required=False)
            if rid is None:
                return None
            row = conn.execute(_RUNS.where(Run.id == rid)).one()
            return run_row(row, row.sweep_name)

        return self._tx(tx, write=False)

    def runs_of(self, sweep: str, status: Optional[str | Sequence[str]] = None) -> list[dict[str, Any]]:
        """The runs of ``sweep`` (optionally only those with ``status``), in registration order."""

        def tx(conn: Connection) -> list[dict[str, Any]]:
            sid = self._sweep_id(conn, sweep)
            q = _RUNS.where(Run.sweep_id == sid).order_by(Run.id)
            if status is not None:
                q = q.where(Run.status.in_([status] if isinstance(status, str) else list(status)))
            return [run_row(r, sweep) for r in conn.execute(q)]

        return self._tx(tx, write=False)

    def sweep(self, name: str) -> Optional[dict[str, Any]]:
        """A sweep's name, plan as submitted, conventions and creation time; or None."""

        def tx(conn: Connection) -> Optional[dict[str, Any]]:
            row = conn.execute(
                select(Sweep.name, Sweep.plan, Sweep.params_convention, Sweep.flops_convention, Sweep.created_at).where(
                    Sweep.name == name
                )
            ).first()
            return None if row is None else row._asdict()

        return self._tx(tx, write=False)

    def latest_sweep(self) -> Optional[str]:
        """The most recently created sweep's name, or None in an empty database."""
        return self._tx(lambda c: c.scalar(select(Sweep.name).order_by(Sweep.created_at.desc(), Sweep.id.desc()).limit(1)), write=False)


def _run_values(sweep_id: int, rec: dict[str, Any], now: datetime) -> dict[str, Any]:
    return {
        "sweep_id": sweep_id,
        "key": str(rec["key"]),
        "n_params": int(rec["N"]),
        "n_params_total": int(rec["N_total"]),
        "n_layer": int(rec["n_layer"]),
        "d_model": int(rec["d_model"]),
        "n_head": int(rec["n_head"]),
        "vocab_size": int(rec["vocab_size"]),
        "context": int(rec["context"]),
        "tokens": int(rec["D"]),
        "flops": float(rec["C"]),
        "seed": int(rec["seed"]),
        "spec": _check_json(rec["spec"], "record spec"),
        "status": "pending",
        "attempts": 0,
        "created_at": now,
    }


def _pg_array(values: Iterable[Any]) -> str:
    """A PostgreSQL array literal of ints/floats (None → NULL; str(float) round-trips exactly)."""
    return "{" + ",".join("NULL" if v is None else str(v) for v in values) + "}"


def _float_or_none(x: Any) -> Optional[float]:
    v = float(x)
    return v if math.isfinite(v) else None


def _stale_detail(run: Any, timeout_s: float, by: str) -> dict[str, Any]:
    return {
        "host": run.host,
        "attempt": run.attempts,
        "heartbeat_at": run.heartbeat_at.isoformat() if run.heartbeat_at else None,
        "timeout_s": float(timeout_s),
        "by": by,
    }
