"""run settings as columns: runs.lr, runs.batch_tokens, runs.beta2, runs.unique_tokens

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-05 08:00:00

The fits read a run's learning rate, batch, beta2, unique tokens and hyperparameter group from
typed columns, not from its spec's JSON. Existing rows get them from their stored spec
(``optimizer.lr``, ``optimizer.beta2``, ``batch_tokens``, ``data.unique_tokens``; a group from
``tags.hparam_group`` where the row has none); a value the spec lacks stays NULL.
"""
import json
import math
from typing import Any, Optional, Sequence, Union

from alembic import op
import sqlalchemy as sa

revision: str = "0005"
down_revision: Union[str, None] = "0004"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

#: Rows read and updated per statement, so a database of many runs is filled in bounded memory.
CHUNK = 1000

RUNS = sa.table(
    "runs",
    sa.column("id", sa.Integer),
    sa.column("spec", sa.JSON),
    sa.column("hparam_group", sa.String),
    sa.column("lr", sa.Float),
    sa.column("batch_tokens", sa.BigInteger),
    sa.column("beta2", sa.Float),
    sa.column("unique_tokens", sa.BigInteger),
)


def _number(value: object) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _count(value: object) -> Optional[int]:
    x = _number(value)
    return int(x) if x is not None and x > 0 and x.is_integer() else None


def _settings(spec: object, group: Optional[str]) -> dict[str, Any]:
    """The row's columns from its spec (the rule registration applies, as of this revision)."""
    if isinstance(spec, str):  # a spec some driver hands back as text
        try:
            spec = json.loads(spec)
        except ValueError:
            spec = None
    s = spec if isinstance(spec, dict) else {}
    optimizer = s.get("optimizer") if isinstance(s.get("optimizer"), dict) else {}
    data = s.get("data") if isinstance(s.get("data"), dict) else {}
    tags = s.get("tags") if isinstance(s.get("tags"), dict) else {}
    tagged = tags.get("hparam_group")
    return {
        "lr": _number(optimizer.get("lr")),
        "batch_tokens": _count(s.get("batch_tokens")),
        "beta2": _number(optimizer.get("beta2")),
        "unique_tokens": _count(data.get("unique_tokens")),
        "hparam_group": group if group else (tagged if isinstance(tagged, str) and tagged else None),
    }


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("lr", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("batch_tokens", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("beta2", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("unique_tokens", sa.BigInteger(), nullable=True))
    conn = op.get_bind()
    fill = (
        sa.update(RUNS)
        .where(RUNS.c.id == sa.bindparam("row_id"))
        .values(lr=sa.bindparam("lr"), batch_tokens=sa.bindparam("batch_tokens"), beta2=sa.bindparam("beta2"),
                unique_tokens=sa.bindparam("unique_tokens"), hparam_group=sa.bindparam("hparam_group"))
    )
    last = 0
    while True:
        rows = conn.execute(
            sa.select(RUNS.c.id, RUNS.c.spec, RUNS.c.hparam_group).where(RUNS.c.id > last).order_by(RUNS.c.id).limit(CHUNK)
        ).all()
        if not rows:
            break
        conn.execute(fill, [{"row_id": r.id, **_settings(r.spec, r.hparam_group)} for r in rows])
        last = rows[-1].id


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("unique_tokens")
        batch_op.drop_column("beta2")
        batch_op.drop_column("batch_tokens")
        batch_op.drop_column("lr")
