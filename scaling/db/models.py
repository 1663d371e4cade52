"""The results database's tables, as a typed SQLAlchemy 2.0 ORM.

Column names are lower-case so plain SQL needs no quoting; the read API renames them to the
project's plain names (``N``, ``N_total``, ``D``, ``C``, ``final_loss`` ...). Times are naive UTC.
The metrics table is the big one (one row per run, step and metric name): its primary key *is*
the uniqueness rule (run, step, name), names are small integers into ``metric_names``, and on
SQLite it is a ``WITHOUT ROWID`` table so a row lives in one B-tree: ingestion and scans stay fast.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Optional

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from scaling.vocab import PENDING, STATUSES

# Stable constraint names, so migrations can refer to them on every dialect.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# The CHECK constraint on runs.status, spelled from the one list of statuses. Its text must stay
# what migration 0001 created (a test compares the two), or the schema would need a migration.
STATUS_CHECK = "status IN (" + ", ".join(f"'{s}'" for s in STATUSES) + ")"


def utcnow() -> datetime:
    """Naive UTC now: the one clock every timestamp column uses (same text format on SQLite)."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {dict[str, Any]: JSON, Any: JSON}


class Sweep(Base):
    """A named set of runs from one plan, with the conventions its N and C are counted in."""

    __tablename__ = "sweeps"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    plan: Mapped[Optional[Any]] = mapped_column(JSON, nullable=True)  # as submitted: text or mapping
    params_convention: Mapped[str] = mapped_column(String(32))
    flops_convention: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class Run(Base):
    """One training run of a sweep. ``key`` (the spec's hash) is unique within its sweep."""

    __tablename__ = "runs"
    __table_args__ = (
        UniqueConstraint("sweep_id", "key"),
        CheckConstraint(STATUS_CHECK, name="status"),
        Index("ix_runs_key", "key"),
        Index("ix_runs_status", "status"),
        Index("ix_runs_parent_key", "parent_key"),  # added in revision 0003
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    sweep_id: Mapped[int] = mapped_column(ForeignKey("sweeps.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(64))
    n_params: Mapped[int] = mapped_column(BigInteger)  # N in the sweep's parameter convention
    n_params_total: Mapped[int] = mapped_column(BigInteger)
    n_layer: Mapped[int] = mapped_column(Integer)
    d_model: Mapped[int] = mapped_column(Integer)
    n_head: Mapped[int] = mapped_column(Integer)
    vocab_size: Mapped[int] = mapped_column(Integer)
    context: Mapped[int] = mapped_column(Integer)
    tokens: Mapped[int] = mapped_column(BigInteger)  # D
    flops: Mapped[float] = mapped_column(Float)  # C (may exceed 2**63, hence a float)
    seed: Mapped[int] = mapped_column(Integer)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), default=PENDING)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    host: Mapped[Optional[str]] = mapped_column(String(255), nullable=True)
    heartbeat_at: Mapped[Optional[datetime]] = mapped_column(DateTime, nullable=True)
    started_at: Mapped[Optional[datetime]] = mapped_column(DateTime, nullable=True)
    finished_at: Mapped[Optional[datetime]] = mapped_column(DateTime, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    final_train_loss: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    final_eval_loss: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    error: Mapped[Optional[str]] = mapped_column(Text, nullable=True)
    # A cooldown branch's trunk (a run of the same sweep) and the tokens it inherits from it, so
    # compute spent counts the shared trunk once; None and 0 for a run trained from scratch.
    parent_key: Mapped[Optional[str]] = mapped_column(String(64), nullable=True)  # revision 0003
    trunk_tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")  # revision 0003
    # The runs of one point of a hyperparameter sweep (one per lr, batch and beta2 combination) share
    # this label (the point's shape and tokens); None for a run of no such sweep. Revision 0004.
    hparam_group: Mapped[Optional[str]] = mapped_column(String(200), nullable=True)
    # The run's training settings the fits read, as typed columns written at registration from its
    # spec (revision 0005): AdamW's peak lr and beta2, the global batch in tokens, and the corpus's
    # unique tokens U (tokens in the training split); None where the spec does not give one.
    lr: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    batch_tokens: Mapped[Optional[int]] = mapped_column(BigInteger, nullable=True)
    beta2: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    unique_tokens: Mapped[Optional[int]] = mapped_column(BigInteger, nullable=True)
    # A run that stopped early (an adaptive sweep's early_stop): the step it stopped at; its
    # final_eval_loss is then the loss predicted at its last step. None: trained to the end. Revision 0007.
    stopped_step: Mapped[Optional[int]] = mapped_column(BigInteger, nullable=True)

    sweep: Mapped[Sweep] = relationship()


class MetricName(Base):
    """The metric names in use (``train/loss`` ...), so a metric row stores a small integer.

    Reading a million rows then creates no per-row string objects, which halves read time.
    """

    __tablename__ = "metric_names"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)


class Metric(Base):
    """One scalar of one run at one step; (run, step, name) is the primary key."""

    __tablename__ = "metrics"
    __table_args__ = {"sqlite_with_rowid": False}

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    name_id: Mapped[int] = mapped_column(ForeignKey("metric_names.id"), primary_key=True)
    tokens: Mapped[int] = mapped_column(BigInteger)
    flops: Mapped[float] = mapped_column(Float)
    value: Mapped[Optional[float]] = mapped_column(Float, nullable=True)  # NaN reads back as NULL on SQLite


class Event(Base):
    """Something that happened to a run: loss_spike, rollback, retry, resume, stale_recovered ..."""

    __tablename__ = "events"
    __table_args__ = (Index("ix_events_run_id", "run_id"),)  # added in revision 0002

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    step: Mapped[Optional[int]] = mapped_column(Integer, nullable=True)
    kind: Mapped[str] = mapped_column(String(64))
    detail: Mapped[Optional[Any]] = mapped_column(JSON, nullable=True)  # a string or a mapping
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)

    run: Mapped[Run] = relationship()


class Fit(Base):
    """A fitted law for a sweep, stored in the law's ``to_dict()`` form with its data fingerprint."""

    __tablename__ = "fits"
    # Fits are reused when (sweep, law, method, data fingerprint) match; added in revision 0002.
    __table_args__ = (Index("ix_fits_lookup", "sweep_id", "law", "method", "fingerprint"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    sweep_id: Mapped[int] = mapped_column(ForeignKey("sweeps.id", ondelete="CASCADE"))
    law: Mapped[str] = mapped_column(String(64))
    method: Mapped[str] = mapped_column(String(64))
    result: Mapped[dict[str, Any]] = mapped_column(JSON)
    fingerprint: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)

    sweep: Mapped[Sweep] = relationship()
