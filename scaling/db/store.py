"""`Store`: the write API every process of a sweep uses (orchestrator, trainers, fitting).

Reads live in :mod:`scaling.db.results`; the engine, schema check and transactions in
:mod:`scaling.db.database`.

Each method is one short transaction (so nothing is half-written), retried while SQLite reports
"database is locked". Run keys are unique *within a sweep*: the same spec may appear in two
sweeps. Methods taking a ``key`` accept ``sweep=`` to say which; without it a key that is in one
sweep only (the usual case) is found directly, and a key in several sweeps resolves to the one
that is running, else raises :class:`AmbiguousRunError`.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any, Collection, Iterable, Optional, Sequence

from sqlalchemy import BigInteger, Connection, Float, Integer, Row, Text, bindparam, cast, func, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite

from scaling import vocab
from scaling.db.claimant import claimant_is_dead
from scaling.db.conflicts import refuse_changed_points, replaced_runs
from scaling.db.database import AmbiguousRunError, Database
from scaling.db.jsonvalues import check_json, run_settings
from scaling.db.lifecycle import CLAIMABLE, ENDINGS, sources
from scaling.db.models import Event, Fit, Metric, MetricName, Run, Sweep, utcnow
from scaling.errors import NotFoundError, PlanError, mask_url

HEARTBEAT_TIMEOUT_S = 120.0  # a running run whose heartbeat is older than this has no live claimant

RECORD_FIELDS = ("key", "N", "N_total", "n_layer", "d_model", "n_head", "vocab_size", "context", "D", "C", "seed", "spec")
_UPSERT_ORDER = ("run_id", "step", "name_id", "tokens", "flops", "value")


class Store(Database):
    """Writes to the results database at ``url`` (None: :func:`resolve_url`'s default).

    Opening it creates the schema in an empty database and refuses one at an older schema
    revision (:class:`~scaling.errors.SchemaOutdatedError`). Create one ``Store`` per process;
    pickling a ``Store`` (e.g. into a Ray task) sends only its URL and reconnects on arrival.
    """

    def __init__(self, url: Optional[str] = None, *, stale_after_s: float = HEARTBEAT_TIMEOUT_S) -> None:
        super().__init__(url)
        self.stale_after_s = float(stale_after_s)
        self._ids: dict[tuple[Optional[str], str], int] = {}
        self._name_ids: dict[str, int] = {}
        self._upsert = self._metrics_upsert()
        self._upsert_sql = self._compiled_upsert()

    # -- plumbing ----------------------------------------------------------------------------
    def __reduce__(self) -> tuple:
        return (type(self), (self.url,), {"stale_after_s": self.stale_after_s})

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.stale_after_s = state["stale_after_s"]

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

    def remember_runs(self, sweep: str) -> None:
        """Look up the row ids of every run of ``sweep`` at once, for a process (a scheduler) that will
        write to each of them: one query instead of one per run."""
        ids = self._read(lambda c: c.execute(select(Run.key, Run.id).join(Run.sweep).where(Sweep.name == sweep)).all())
        self._ids.update({(sweep, k): i for k, i in ids})

    def _resolve(self, conn: Connection, key: str, sweep: Optional[str], *, required: bool = True) -> Optional[int]:
        cached = self._ids.get((sweep, key))
        if cached is not None:
            return cached
        q = select(Run.id, Run.status, Sweep.name).join(Run.sweep).where(Run.key == key)
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
        running = [r for r in rows if r.status == vocab.RUNNING]
        if len(running) == 1:
            return running[0].id
        raise AmbiguousRunError(
            f"run key {key} is in sweeps {', '.join(sorted(r.name for r in rows))}: pass sweep= to say which"
        )

    # -- sweeps and runs ---------------------------------------------------------------------
    def register(
        self,
        sweep: str,
        records: Iterable[dict[str, Any]],
        *,
        plan: Optional[dict[str, Any]] = None,
        params_convention: str = "non_embedding",
        flops_convention: str = "6N",
        one_per_point: bool = False,
        replace_plan: bool = False,
    ) -> list[str]:
        """Create ``sweep`` if new and a pending run per record whose key it lacks; return the new keys.

        A record may name ``parent_key`` (the trunk a cooldown branch starts from) and
        ``trunk_tokens`` (the tokens it inherits), so compute is counted once, and
        ``hparam_group`` (the runs of one point of a hyperparameter sweep share it).
        Runs already in the sweep, whatever their status, are left untouched (a completed run
        is never redone). A sweep keeps the conventions it was created with: registering with
        different ones raises :class:`~scaling.errors.PlanError`. With ``one_per_point`` (a plan's
        sweep), a new run on a point the sweep holds under another key raises it too
        (:mod:`scaling.db.conflicts`); ad-hoc runs, such as an lr probe of one model, may share one.
        The plan is stored when the sweep is created and kept after, unless ``replace_plan`` (a law
        transferred from another sweep, refitted on request).
        """
        if not sweep or not str(sweep).strip():
            raise PlanError("a sweep needs a non-empty name")
        recs: dict[str, dict[str, Any]] = {}
        for i, rec in enumerate(records):
            missing = [f for f in RECORD_FIELDS if f not in rec]
            if missing:
                raise ValueError(f"record {i} lacks {', '.join(missing)} (expected RunSpec.record())")
            recs.setdefault(str(rec["key"]), rec)
        plan_json = check_json(plan, "plan") if plan is not None else None

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
                if plan_json is not None and (row.plan is None or replace_plan):
                    conn.execute(update(Sweep).where(Sweep.id == sid).values(plan=plan_json))
            existing = set(conn.scalars(select(Run.key).where(Run.sweep_id == sid)))
            new = [k for k in recs if k not in existing]
            if new:
                now = utcnow()
                if one_per_point:
                    refuse_changed_points(conn, sid, sweep, [recs[k] for k in new])
                conn.execute(
                    self._insert(Run).on_conflict_do_nothing(index_elements=[Run.sweep_id, Run.key]),
                    [_run_values(sid, recs[k], now) for k in new],
                )
            if one_per_point:
                self._supersede(conn, sid, recs.values())
            return new

        return self._write(tx)

    @staticmethod
    def _supersede(conn: Connection, sweep_id: int, records: Iterable[dict[str, Any]]) -> None:
        """Runs a plan's ``records`` replace become superseded (a superseded run it names is claimed as a pending one)."""
        replaced = replaced_runs(conn, sweep_id, records, sources(vocab.SUPERSEDED))
        if replaced:
            conn.execute(update(Run).where(Run.sweep_id == sweep_id, Run.key.in_(replaced),
                                           Run.status.in_(sources(vocab.SUPERSEDED))).values(status=vocab.SUPERSEDED))

    def claim(
        self, key: str, host: str, *, sweep: Optional[str] = None, stale_after_s: Optional[float] = None
    ) -> Optional[int]:
        """Mark a run running for ``host``; return its new attempt number, or None if refused.

        ``host`` is the claimant id, :func:`~scaling.db.claimant_id` (``host:pid``). Claimable:
        pending, failed, interrupted, or running with a dead claimant: its heartbeat is older
        than ``stale_after_s``, or it was a process of this host that no longer exists (a
        ``stale_recovered`` event records the takeover). Refused: completed, or running with a
        live claimant. One transaction: ``BEGIN IMMEDIATE`` on SQLite, ``SELECT ... FOR UPDATE``
        on PostgreSQL, so one of several racing claimants wins.
        """
        return self.claim_many([key], host, sweep=sweep, stale_after_s=stale_after_s)[key]

    def claim_many(
        self, keys: Sequence[str], host: str, *, sweep: Optional[str] = None, stale_after_s: Optional[float] = None,
        claimable: Collection[str] = CLAIMABLE,
    ) -> dict[str, Optional[int]]:
        """:meth:`claim` for each of ``keys`` in one transaction (a scheduler starting several runs
        at once pays for one); each key's attempt number, or None where refused. ``claimable``: the
        statuses a claim takes (a running row is taken only from a dead claimant)."""
        timeout = self.stale_after_s if stale_after_s is None else float(stale_after_s)

        def tx(conn: Connection) -> dict[str, Optional[int]]:
            now = utcnow()
            rids = sorted((self._resolve(conn, key, sweep), key) for key in keys)  # rows locked in one order
            return {key: self._claim_row(conn, rid, host, timeout, now, claimable) for rid, key in rids}

        return self._write(tx)

    def _claim_row(self, conn: Connection, rid: int, host: str, timeout: float, now: datetime,
                   claimable: Collection[str]) -> Optional[int]:
        """Claim run ``rid`` inside the caller's transaction; its new attempt number, or None."""
        run = conn.execute(
            select(Run.status, Run.attempts, Run.heartbeat_at, Run.host).where(Run.id == rid).with_for_update()
        ).one()
        if run.status == vocab.RUNNING:
            fresh = run.heartbeat_at is not None and run.heartbeat_at >= now - timedelta(seconds=timeout)
            gone = claimant_is_dead(run.host)
            if fresh and not gone:
                return None
            why = "its claimant process is gone" if gone else "its heartbeat is stale"
            self._event(conn, rid, None, vocab.STALE_RECOVERED, _stale_detail(run, timeout, "claim", why), now)
        elif run.status not in claimable:
            return None
        attempt = run.attempts + 1
        conn.execute(
            update(Run)
            .where(Run.id == rid)
            .values(
                status=vocab.RUNNING,
                attempts=attempt,
                host=host,
                heartbeat_at=now,
                started_at=now,
                finished_at=None,
                error=None,
                final_train_loss=None,
                final_eval_loss=None,
                stopped_step=None,  # an attempt that stops early records its step again
            )
        )
        return attempt

    def heartbeat(self, key: str, *, sweep: Optional[str] = None) -> None:
        """Record that the run's claimant is alive (call well within ``stale_after_s``)."""
        self.heartbeat_many([key], sweep=sweep)

    def heartbeat_many(self, keys: Iterable[str], *, sweep: Optional[str] = None) -> None:
        """:meth:`heartbeat` for each of ``keys`` in one transaction (a scheduler's runs in flight)."""
        keys = list(keys)
        if not keys:
            return

        def tx(conn: Connection) -> None:
            rids = sorted(self._resolve(conn, key, sweep) for key in keys)
            # Rows locked in id order first, as every multi-run write here does (no deadlock between
            # two drivers on PostgreSQL; an UPDATE alone would lock them in the table's order).
            conn.execute(select(Run.id).where(Run.id.in_(rids)).order_by(Run.id).with_for_update()).all()
            conn.execute(update(Run).where(Run.id.in_(rids)).values(heartbeat_at=utcnow()))

        self._write(tx)

    def finish(
        self,
        key: str,
        status: str,
        *,
        final_train_loss: Optional[float] = None,
        final_eval_loss: Optional[float] = None,
        error: Optional[str] = None,
        sweep: Optional[str] = None,
        from_states: Optional[Collection[str]] = None,
    ) -> bool:
        """End the current attempt as ``status`` (completed, failed or interrupted), with its final
        losses; only where the row's status is one of ``from_states`` (None: any). Whether it was."""
        if status not in ENDINGS:
            raise ValueError(f"finish status must be one of {', '.join(ENDINGS)}, not {status!r}")
        values = _final_values(status, final_train_loss, final_eval_loss, error)

        def tx(conn: Connection) -> bool:
            q = update(Run).where(Run.id == self._resolve(conn, key, sweep))
            if from_states is not None:
                q = q.where(Run.status.in_(list(from_states)))
            return bool(conn.execute(q.values(**values)).rowcount)

        return self._write(tx)

    def complete(
        self,
        key: str,
        *,
        final_train_loss: Optional[float] = None,
        final_eval_loss: Optional[float] = None,
        sweep: Optional[str] = None,
    ) -> Optional[float]:
        """Mark a run completed with its final losses unless it already is (another claimant took it
        over and finished first: its result stands); returns the final eval loss as stored. One
        transaction, so the check and the write cannot be split by another claimant."""
        return self.complete_many({key: (final_train_loss, final_eval_loss)}, sweep=sweep)[key]

    def complete_many(
        self, losses: dict[str, tuple[Optional[float], Optional[float]]], *, sweep: Optional[str] = None,
        from_states: Collection[str] = sources(vocab.COMPLETED),
    ) -> dict[str, Optional[float]]:
        """:meth:`complete` for each key of ``losses`` (its final train and eval loss) in one
        transaction, each run whose status is one of ``from_states``; each run's final eval loss as stored."""

        def tx(conn: Connection) -> dict[str, Optional[float]]:
            stored = {}
            for rid, key in sorted((self._resolve(conn, key, sweep), key) for key in losses):  # one lock order
                final_train_loss, final_eval_loss = losses[key]
                run = conn.execute(
                    select(Run.status, Run.final_eval_loss).where(Run.id == rid).with_for_update()
                ).one()
                if run.status not in from_states:  # completed by another claimant: its result stands
                    stored[key] = run.final_eval_loss
                    continue
                values = _final_values(vocab.COMPLETED, final_train_loss, final_eval_loss, None)
                conn.execute(update(Run).where(Run.id == rid).values(**values))
                stored[key] = values.get("final_eval_loss", run.final_eval_loss)
            return stored

        return self._write(tx)

    def mark_interrupted(
        self, keys: Iterable[str], *, sweep: Optional[str] = None, reason: str = "interrupted by the user"
    ) -> list[str]:
        """Running runs among ``keys`` → interrupted, each with an ``interrupted`` event (Ctrl-C)."""
        keys = list(keys)

        def tx(conn: Connection) -> list[str]:
            now = utcnow()
            done = []
            found = [(self._resolve(conn, key, sweep, required=False), key) for key in keys]
            for rid, key in sorted((rid, key) for rid, key in found if rid is not None):  # one lock order
                res = conn.execute(
                    update(Run)
                    .where(Run.id == rid, Run.status == vocab.RUNNING)
                    .values(status=vocab.INTERRUPTED, finished_at=now)
                )
                if res.rowcount:
                    self._event(conn, rid, None, vocab.INTERRUPTED, reason, now)
                    done.append(key)
            released = set(done)
            return [key for key in keys if key in released]  # in the caller's order

        return self._write(tx)

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
                .where(Run.status == vocab.RUNNING, or_(Run.heartbeat_at.is_(None), Run.heartbeat_at < cutoff))
                .order_by(Run.id)
                .with_for_update(skip_locked=True)
            )
            if sweep is not None:
                q = q.where(Run.sweep_id == self._sweep_id(conn, sweep))
            keys = []
            for run in conn.execute(q).all():
                res = conn.execute(
                    update(Run)
                    .where(Run.id == run.id, Run.status == vocab.RUNNING)
                    .values(status=vocab.INTERRUPTED, finished_at=now)
                )
                if res.rowcount:
                    self._event(conn, run.id, None, vocab.STALE_RECOVERED, _stale_detail(run, timeout_s, "recover_stale", "its heartbeat is stale"), now)
                    keys.append(run.key)
            return keys

        return self._write(tx)

    # -- metrics and events ------------------------------------------------------------------
    def log_metrics(
        self, key: str, rows: Iterable[Sequence[Any]], *, sweep: Optional[str] = None,
        events: Sequence[tuple[Optional[int], str, Any]] = (),
    ) -> int:
        """Write rows of ``(step, tokens, flops, name, value)`` in one transaction; return the count.

        Idempotent on (run, step, name): a repeated row (e.g. after a resume) overwrites the old
        one through the dialect's ``INSERT ... ON CONFLICT DO UPDATE``, sent as one executemany
        (SQLite) or one multi-row statement (PostgreSQL). Within a batch the last row for a
        (step, name) wins. NaN values are stored as NULL (read back as NaN). ``events`` (step,
        kind, detail), as :meth:`log_event` takes them, are written in the same transaction.
        """
        return self.log_runs([(key, rows, events)], sweep=sweep)

    def log_runs(
        self,
        runs: Sequence[tuple[str, Iterable[Sequence[Any]], Sequence[tuple[Optional[int], str, Any]]]],
        *,
        sweep: Optional[str] = None,
    ) -> int:
        """:meth:`log_metrics` for several runs, each (key, rows, events), in one transaction (the
        simulated runs of one task); returns the rows written."""
        entries = []
        for key, rows, events in runs:
            latest: dict[tuple[int, str], tuple[int, float, Optional[float]]] = {}
            for step, tokens, flops, name, value in rows:
                v = None if value is None else float(value)
                latest[(int(step), str(name))] = (int(tokens), float(flops), None if v is None or v != v else v)
            checked = [_checked_event(step, kind, detail) for step, kind, detail in events]
            if latest or checked:
                entries.append((key, latest, checked))
        if not entries:
            return 0
        wanted = {n for _, latest, _ in entries for _, n in latest}
        for name in wanted - self._name_ids.keys():  # a name written before was checked then
            problem = vocab.metric_problem(name)
            if problem:
                raise ValueError(problem)

        def tx(conn: Connection) -> dict[str, int]:
            ids = self._metric_name_ids(conn, wanted) if wanted else {}
            now = utcnow()
            # Runs in id order: the rows' foreign keys lock each run, in the order other writers use.
            for rid, (key, latest, events) in sorted(((self._resolve(conn, e[0], sweep), e) for e in entries),
                                                     key=lambda pair: pair[0]):
                for step, kind, detail in events:
                    self._event(conn, rid, step, kind, detail, now)
                if latest:
                    self._upsert_metrics(conn, rid, latest, ids)
            return ids

        # Cache name ids only once committed: a rolled-back attempt must not leave ids behind.
        self._name_ids.update(self._write(tx))
        return sum(len(latest) for _, latest, _ in entries)

    def _upsert_metrics(self, conn: Connection, rid: int, latest: dict[tuple[int, str], tuple[int, float, Optional[float]]],
                        ids: dict[str, int]) -> None:
        """One run's rows, keyed (step, name), in one statement."""
        if self._upsert_sql is not None:  # SQLite: the compiled upsert, straight to the driver
            conn.exec_driver_sql(self._upsert_sql, [(rid, s, ids[n], t, f, v) for (s, n), (t, f, v) in latest.items()])
            return
        # PostgreSQL: one INSERT ... SELECT FROM unnest(arrays) ... ON CONFLICT DO UPDATE
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
        self, key: str, step: Optional[int], kind: str, detail: str | dict[str, Any] | None = None, *,
        sweep: Optional[str] = None
    ) -> None:
        """Record an event (a kind from :mod:`scaling.vocab`); ``detail`` a str or JSON-able dict."""
        step, kind, detail = _checked_event(step, kind, detail)
        self._write(lambda c: self._event(c, self._resolve(c, key, sweep), step, kind, detail, utcnow()))

    @staticmethod
    def _event(conn: Connection, run_id: int, step: Optional[int], kind: str, detail: object, now: datetime) -> None:
        """One event row; a ``stopped_early`` event also sets the run's ``stopped_step`` (the step it
        stopped at), in the same transaction, so the one is never written without the other."""
        conn.execute(
            insert(Event).values(run_id=run_id, step=None if step is None else int(step), kind=kind, detail=detail, created_at=now)
        )
        if kind == vocab.STOPPED_EARLY and step is not None:
            conn.execute(update(Run).where(Run.id == run_id).values(stopped_step=int(step)))

    # -- fits --------------------------------------------------------------------------------
    def save_fit(self, sweep: str, law: str, method: str, result: dict[str, Any], fingerprint: str) -> int:
        """Store a fitted law (its ``to_dict()``) with the fingerprint of the data it saw; return its id."""
        result = check_json(result, "fit result")

        def tx(conn: Connection) -> int:
            sid = self._sweep_id(conn, sweep)
            return conn.execute(
                insert(Fit)
                .values(sweep_id=sid, law=law, method=method, result=result, fingerprint=fingerprint, created_at=utcnow())
                .returning(Fit.id)
            ).scalar_one()

        return self._write(tx)


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
        "spec": check_json(rec["spec"], "record spec"),
        "parent_key": None if rec.get("parent_key") is None else str(rec["parent_key"]),
        "trunk_tokens": int(rec.get("trunk_tokens") or 0),
        **run_settings(rec["spec"], None if rec.get("hparam_group") is None else str(rec["hparam_group"])),
        "status": vocab.PENDING,
        "attempts": 0,
        "created_at": now,
    }


def _pg_array(values: Iterable[Any]) -> str:
    """A PostgreSQL array literal of ints/floats (None → NULL; str(float) round-trips exactly)."""
    return "{" + ",".join("NULL" if v is None else str(v) for v in values) + "}"


def _final_values(status: str, final_train_loss: Optional[float], final_eval_loss: Optional[float],
                  error: Optional[str]) -> dict[str, Any]:
    """The columns an attempt's end writes: status, time, error, and the losses given (non-finite: NULL)."""
    values: dict[str, Any] = {"status": status, "finished_at": utcnow(), "error": error}
    if final_train_loss is not None:
        values["final_train_loss"] = _float_or_none(final_train_loss)
    if final_eval_loss is not None:
        values["final_eval_loss"] = _float_or_none(final_eval_loss)
    return values


def _checked_event(step: Optional[int], kind: str, detail: object) -> tuple[Optional[int], str, Any]:
    """An event's fields as stored, or ValueError: a kind is required, the detail must be JSON."""
    if not kind:
        raise ValueError("an event needs a kind")
    return step, kind, check_json(detail, "event detail")


def _float_or_none(x: float) -> Optional[float]:
    v = float(x)
    return v if math.isfinite(v) else None


def _stale_detail(run: Row[Any], timeout_s: float, by: str, reason: str) -> dict[str, Any]:
    return {
        "reason": reason,
        "host": run.host,
        "attempt": run.attempts,
        "heartbeat_at": run.heartbeat_at.isoformat() if run.heartbeat_at else None,
        "timeout_s": float(timeout_s),
        "by": by,
    }
