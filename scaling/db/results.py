"""`connect(url)` → :class:`Results`: the read API for notebooks, fitting, reports and the scheduler.

Tables come back as pandas DataFrames with plain column names; one run or one fit as a dict.
Metrics are fetched through the driver's own cursor (a plain SELECT, no ORM objects), which
reads a million rows in about a second.
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Sequence, TypeVar

import numpy as np
from sqlalchemy import Row, Select, func, select

from scaling.db.database import AmbiguousRunError, Database
from scaling.db.engine import retrying
from scaling.db.conflicts import refuse_changed_points
from scaling.db.models import Event, Fit, Metric, MetricName, Run, Sweep
from scaling.errors import NotFoundError, mask_url
from scaling.vocab import RUNNING, STATUSES

if TYPE_CHECKING:  # pandas is imported where a table is built: one run's row (a trainer's) needs none
    import pandas as pd

T = TypeVar("T")

RUN_COLUMNS = [
    "run_key", "sweep", "N", "N_total", "D", "C", "n_layer", "d_model", "n_head", "vocab_size", "context",
    "seed", "status", "attempts", "final_loss", "final_train_loss", "error", "host", "heartbeat_at",
    "started_at", "finished_at", "created_at", "spec", "parent_key", "trunk_tokens", "hparam_group",
    "lr", "batch_tokens", "beta2", "unique_tokens", "stopped_step",
]  # fmt: skip
METRIC_COLUMNS = ["run_key", "step", "tokens", "flops", "name", "value"]
EVENT_COLUMNS = ["run_key", "sweep", "step", "kind", "detail", "created_at"]
FIT_COLUMNS = ["id", "sweep", "law", "method", "result", "fingerprint", "created_at"]
SWEEP_COLUMNS = ["sweep", "created_at", "params_convention", "flops_convention", "runs", *STATUSES, "plan"]


def connect(url: Optional[str] = None) -> "Results":
    """Open the results database at ``url`` (None: ``$SCALING_DB``, then ./scaling.db) for reading.

    A SQLite file that does not exist raises :class:`~scaling.errors.DatabaseError` rather than
    creating an empty database where the user expected results.
    """
    return Results(url)


class Results(Database):
    """Read-only views of a results database (a SQLite file must exist already)."""

    def __init__(self, url: Optional[str] = None) -> None:
        super().__init__(url, must_exist=True)

    # -- plumbing ----------------------------------------------------------------------------
    def _execute(self, stmt: Select, consume: Callable[[Any], T]) -> T:
        """Run ``stmt`` on the driver's own cursor and hand the cursor to ``consume``.

        A plain SELECT on the DBAPI cursor: no ORM objects and no SQLAlchemy Row per result row.
        """
        compiled = stmt.compile(dialect=self.engine.dialect, compile_kwargs={"render_postcompile": True})
        sql = str(compiled)
        params: Any = compiled.params  # a property that builds the whole dict: read it once, not per parameter
        if compiled.positional:
            params = tuple(params[name] for name in compiled.positiontup or ())

        self._after_fork()

        def attempt() -> T:
            with self.engine.connect() as conn:
                cur = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
                try:
                    cur.execute(sql, params)
                    return consume(cur)
                finally:
                    cur.close()
                    conn.rollback()

        return retrying(attempt, self.url, "read")

    def _all(self, stmt: Select) -> list[Any]:
        """SQLAlchemy rows of ``stmt`` (attribute access; JSON columns decoded), one read transaction."""
        return self._read(lambda conn: list(conn.execute(stmt).all()))

    def _rows(self, stmt: Select) -> list[tuple]:
        return self._execute(stmt, lambda cur: cur.fetchall())

    def _id_of_sweep(self, name: str) -> int:
        return self._read(lambda conn: self._sweep_id(conn, name))

    def check_points(self, sweep: str, records: Iterable[dict[str, Any]]) -> None:
        """Raise PlanError if registering ``records`` (``RunSpec.record()``) in ``sweep`` would retrain a
        point it holds under another key, as a plan's sweep refuses (:mod:`scaling.db.conflicts`)."""
        recs = list(records)
        self._read(lambda conn: refuse_changed_points(conn, self._sweep_id(conn, sweep), sweep, recs))

    # -- sweeps ------------------------------------------------------------------------------
    def sweep_name(self, sweep: Optional[str] = None) -> str:
        """``sweep`` if the database holds it, else (None) the latest sweep; NotFoundError if neither."""
        if sweep is None:
            latest = self.latest_sweep()
            if latest is None:
                raise NotFoundError(f"no sweeps in {mask_url(self.url)}: run `scaling sweep PLAN.yaml` first, or pass --db")
            return latest
        self._id_of_sweep(sweep)
        return sweep

    def latest_sweep(self) -> Optional[str]:
        """The most recently created sweep's name, or None in an empty database."""
        rows = self._rows(select(Sweep.name).order_by(Sweep.created_at.desc(), Sweep.id.desc()).limit(1))
        return rows[0][0] if rows else None

    def sweep_info(self, name: str) -> dict[str, Any]:
        """A sweep's plan as submitted, its conventions and creation time."""
        rows = self._all(
            select(Sweep.name, Sweep.plan, Sweep.params_convention, Sweep.flops_convention, Sweep.created_at).where(
                Sweep.name == name
            )
        )
        row = rows[0] if rows else None
        if row is None:
            raise NotFoundError(f"sweep {name!r} not found in {mask_url(self.url)}")
        return row._asdict()

    def sweeps(self) -> pd.DataFrame:
        """One row per sweep: name, created_at, conventions, run counts by status, plan."""
        import pandas as pd

        counts = (
            select(Run.sweep_id, Run.status, func.count().label("n")).group_by(Run.sweep_id, Run.status).subquery()
        )
        q = select(Sweep.id, Sweep.name, Sweep.created_at, Sweep.params_convention, Sweep.flops_convention, Sweep.plan).order_by(
            Sweep.created_at, Sweep.id
        )
        sweeps = self._all(q)
        tallies = self._all(select(counts))
        by_sweep: dict[int, dict[str, int]] = {}
        for sid, status, n in tallies:
            by_sweep.setdefault(sid, {})[status] = n
        out = []
        for s in sweeps:
            c = by_sweep.get(s.id, {})
            out.append(
                {
                    "sweep": s.name,
                    "created_at": s.created_at,
                    "params_convention": s.params_convention,
                    "flops_convention": s.flops_convention,
                    "runs": sum(c.values()),
                    **{st: c.get(st, 0) for st in STATUSES},
                    "plan": s.plan,
                }
            )
        return pd.DataFrame(out, columns=SWEEP_COLUMNS)

    # -- runs --------------------------------------------------------------------------------
    def runs(self, sweep: Optional[str] = None, status: Optional[str | Sequence[str]] = None, *,
             spec: bool = True) -> pd.DataFrame:
        """One row per run (all sweeps unless ``sweep``); ``final_loss`` is the final eval loss.

        ``spec=False`` leaves the ``spec`` column empty (None): decoding every run's spec is most
        of the time a large sweep takes to read, and a summary does not need it.
        """
        import pandas as pd

        q = (_RUNS if spec else _RUNS_WITHOUT_SPEC).order_by(Run.sweep_id, Run.id)
        if sweep is not None:
            q = q.where(Run.sweep_id == self._id_of_sweep(sweep))
        if status is not None:
            q = q.where(Run.status.in_([status] if isinstance(status, str) else list(status)))
        rows = self._all(q)
        return pd.DataFrame([_run_row(r) for r in rows], columns=RUN_COLUMNS)

    def run(self, key: str, *, sweep: Optional[str] = None) -> Optional[dict[str, Any]]:
        """One run as a dict with the columns of :meth:`runs`, or None when it is not there.

        Without ``sweep`` the key must be in one sweep only (the usual case), or be running in
        one of them; otherwise :class:`~scaling.db.AmbiguousRunError`.
        """
        q = _RUNS.where(Run.key == key)
        if sweep is not None:
            q = q.where(Sweep.name == sweep)
        rows = self._all(q)
        if len(rows) > 1:
            rows = [r for r in rows if r.status == RUNNING]
            if len(rows) != 1:
                raise AmbiguousRunError(f"run key {key} is in several sweeps: pass sweep= to say which")
        return _run_row(rows[0]) if rows else None

    # -- metrics -----------------------------------------------------------------------------
    def metrics(
        self,
        run_keys: Optional[Iterable[str]] = None,
        names: Optional[Iterable[str]] = None,
        wide: bool = False,
        sweep: Optional[str] = None,
    ) -> pd.DataFrame:
        """Metric rows ``run_key, step, tokens, flops, name, value``, by run then step.

        ``wide=True`` pivots to one column per metric name, indexed by (run_key, step, tokens,
        flops). ``sweep`` restricts to one sweep (a key may be in several).
        """
        import pandas as pd

        q = select(Metric.run_id, Metric.step, Metric.tokens, Metric.flops, Metric.name_id, Metric.value).order_by(
            Metric.run_id, Metric.step, Metric.name_id
        )
        q, runs_q, names_q = self._filter_metrics(q, sweep, run_keys, names)
        # Rows stream from the cursor straight into one numpy record array (None becomes NaN):
        # no list of a million tuples, no per-row Python work of ours.
        gc_was_enabled = gc.isenabled()
        gc.disable()  # the cursor's short-lived row tuples would trigger useless cyclic-GC passes
        try:
            arr = self._execute(q, lambda cur: np.fromiter(cur, dtype=_METRIC_RECORD))
        finally:
            if gc_was_enabled:
                gc.enable()
        # Read the id maps *after* the rows: runs and names are never deleted, so every id the
        # rows hold is in them even if a writer added a run or metric name meanwhile.
        run_map = dict(self._rows(runs_q))
        name_map = dict(self._rows(names_q))
        df = pd.DataFrame(
            {
                "run_key": _lookup(arr["run_id"], run_map),
                "step": np.ascontiguousarray(arr["step"]),
                "tokens": np.ascontiguousarray(arr["tokens"]),
                "flops": np.ascontiguousarray(arr["flops"]),
                "name": _lookup(arr["name_id"], name_map),
                "value": np.ascontiguousarray(arr["value"]),
            },
            copy=False,  # the arrays are fresh: no need for pandas to consolidate copies
        )
        if not wide:
            return df
        df = df.drop_duplicates(["run_key", "step", "name"], keep="last")
        out = df.set_index(["run_key", "step", "tokens", "flops", "name"])["value"].unstack("name")
        out.columns.name = None
        return out

    def _filter_metrics(
        self, q: Select[Any], sweep: Optional[str], run_keys: Optional[Iterable[str]], names: Optional[Iterable[str]]
    ) -> tuple[Any, Any, Any]:
        """Restrict a metrics query to a sweep, runs and names; also return the id → key/name maps' queries."""
        runs_q = select(Run.id, Run.key).order_by(Run.id)
        if sweep is not None:
            runs_q = runs_q.where(Run.sweep_id == self._id_of_sweep(sweep))
        if run_keys is not None:
            runs_q = runs_q.where(Run.key.in_(list(run_keys)))
        if sweep is not None or run_keys is not None:
            q = q.where(Metric.run_id.in_(runs_q.with_only_columns(Run.id).scalar_subquery()))
        names_q = select(MetricName.id, MetricName.name).order_by(MetricName.id)
        if names is not None:
            names_q = names_q.where(MetricName.name.in_(list(names)))
            q = q.where(Metric.name_id.in_(names_q.with_only_columns(MetricName.id).scalar_subquery()))
        return q, runs_q, names_q

    def metric_summary(
        self, sweep: Optional[str] = None, run_keys: Optional[Iterable[str]] = None, names: Optional[Iterable[str]] = None
    ) -> pd.DataFrame:
        """Per run and metric name: ``run_key, name, count, mean, min, max`` (one GROUP BY in the database).

        For summaries (throughput, MFU per run) without reading every step's row.
        """
        import pandas as pd

        q = select(
            Metric.run_id, Metric.name_id, func.count(Metric.value), func.avg(Metric.value),
            func.min(Metric.value), func.max(Metric.value),
        ).group_by(Metric.run_id, Metric.name_id)  # fmt: skip
        q, runs_q, names_q = self._filter_metrics(q, sweep, run_keys, names)
        run_map = dict(self._rows(runs_q))
        name_map = dict(self._rows(names_q))
        rows = [(run_map[r], name_map[n], c, m, lo, hi) for r, n, c, m, lo, hi in self._rows(q) if r in run_map and n in name_map]
        df = pd.DataFrame(rows, columns=["run_key", "name", "count", "mean", "min", "max"])
        return df.astype({"count": "int64", "mean": "float64", "min": "float64", "max": "float64"})

    def last_metrics(
        self, sweep: Optional[str] = None, run_keys: Optional[Iterable[str]] = None, names: Optional[Iterable[str]] = None
    ) -> pd.DataFrame:
        """Per run and metric name, the row of its highest step: ``run_key, name, step, value``.

        One row per (run, name) comes back however long the runs are (a live progress display).
        """
        import pandas as pd

        last = select(Metric.run_id, Metric.name_id, func.max(Metric.step).label("step")).group_by(
            Metric.run_id, Metric.name_id
        )
        last, runs_q, names_q = self._filter_metrics(last, sweep, run_keys, names)
        sub = last.subquery()
        q = select(Metric.run_id, Metric.name_id, Metric.step, Metric.value).join(
            sub, (Metric.run_id == sub.c.run_id) & (Metric.name_id == sub.c.name_id) & (Metric.step == sub.c.step)
        )
        rows = self._rows(q)
        run_map = dict(self._rows(runs_q))
        name_map = dict(self._rows(names_q))
        out = [(run_map[r], name_map[n], st, v) for r, n, st, v in rows if r in run_map and n in name_map]
        df = pd.DataFrame(out, columns=["run_key", "name", "step", "value"])
        return df.astype({"step": "int64", "value": "float64"})

    # -- events and fits ---------------------------------------------------------------------
    def events(
        self, sweep: Optional[str] = None, run_keys: Optional[Iterable[str]] = None, kinds: Optional[Iterable[str]] = None
    ) -> pd.DataFrame:
        """Events ``run_key, sweep, step, kind, detail, created_at`` in the order they happened."""
        import pandas as pd

        q = (
            select(Run.key, Sweep.name, Event.step, Event.kind, Event.detail, Event.created_at)
            .join(Event.run)
            .join(Run.sweep)
            .order_by(Event.id)
        )
        if sweep is not None:
            q = q.where(Run.sweep_id == self._id_of_sweep(sweep))
        if run_keys is not None:
            q = q.where(Run.key.in_(list(run_keys)))
        if kinds is not None:
            q = q.where(Event.kind.in_(list(kinds)))
        rows = self._all(q)
        df = pd.DataFrame([tuple(r) for r in rows], columns=EVENT_COLUMNS)
        df["step"] = df["step"].astype("Int64")
        return df

    def fits(self, sweep: Optional[str] = None, law: Optional[str] = None, method: Optional[str] = None) -> pd.DataFrame:
        """Stored fits ``id, sweep, law, method, result (dict), fingerprint, created_at``, oldest first."""
        import pandas as pd

        q = (
            select(Fit.id, Sweep.name, Fit.law, Fit.method, Fit.result, Fit.fingerprint, Fit.created_at)
            .join(Fit.sweep)
            .order_by(Fit.id)
        )
        if sweep is not None:
            q = q.where(Fit.sweep_id == self._id_of_sweep(sweep))
        if law is not None:
            q = q.where(Fit.law == law)
        if method is not None:
            q = q.where(Fit.method == method)
        rows = self._all(q)
        return pd.DataFrame([tuple(r) for r in rows], columns=FIT_COLUMNS)

    def find_fit(self, sweep: str, law: str, method: str, fingerprint: str) -> Optional[dict[str, Any]]:
        """The latest fit of ``law`` by ``method`` on data with ``fingerprint`` (for reuse), as a dict
        with the columns of :meth:`fits`; or None."""
        rows = self._all(
            select(Fit.id, Sweep.name.label("sweep"), Fit.law, Fit.method, Fit.result, Fit.fingerprint, Fit.created_at)
            .join(Fit.sweep)
            .where(Sweep.name == sweep, Fit.law == law, Fit.method == method, Fit.fingerprint == fingerprint)
            .order_by(Fit.id.desc())
            .limit(1)
        )
        return rows[0]._asdict() if rows else None


# Every column of runs plus the sweep's name (Core rows: attribute access by column name).
_RUNS = select(Run.__table__, Sweep.name.label("sweep_name")).join(Run.sweep)
_RUNS_WITHOUT_SPEC = select(*(c for c in Run.__table__.c if c.name != "spec"), Sweep.name.label("sweep_name")).join(Run.sweep)


def _run_row(run: Row[Any]) -> dict[str, Any]:
    """One row of :data:`_RUNS` with the read API's plain names (``N``, ``D``, ``C``, ``final_loss`` ...)."""
    return {
        "run_key": run.key,
        "sweep": run.sweep_name,
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
        "spec": getattr(run, "spec", None),
        "parent_key": run.parent_key,
        "trunk_tokens": int(run.trunk_tokens or 0),
        "hparam_group": run.hparam_group,
        "lr": run.lr,
        "batch_tokens": run.batch_tokens,
        "beta2": run.beta2,
        "unique_tokens": run.unique_tokens,
        "stopped_step": run.stopped_step,  # stopped early: final_loss is the predicted one
    }


_METRIC_RECORD = np.dtype(
    [("run_id", "i8"), ("step", "i8"), ("tokens", "i8"), ("flops", "f8"), ("name_id", "i8"), ("value", "f8")]
)


def _lookup(ids: np.ndarray, mapping: dict[int, str]) -> pd.Series:
    """Map integer ids to their strings (pandas' ``str`` dtype), vectorized.

    Through an Arrow dictionary array when pyarrow is there (pandas' own string storage): the
    strings are copied in C, ten times faster than building a million-element object array.
    """
    import pandas as pd

    keys = np.fromiter(mapping.keys(), dtype=np.int64, count=len(mapping))
    position = np.full(int(keys.max(initial=0)) + 1, -1, dtype=np.int32)
    position[keys] = np.arange(len(keys), dtype=np.int32)
    codes = position[ids]
    labels = list(mapping.values())
    try:
        import pyarrow as pa

        strings = pa.DictionaryArray.from_arrays(pa.array(codes), pa.array(labels, type=pa.string())).cast(pa.large_string())
        return pd.Series(pd.array(strings, dtype="str"))
    except (ImportError, TypeError, ValueError, NotImplementedError):
        return pd.Series(np.asarray(labels + [None], dtype=object)[codes], dtype="str")
