"""run status superseded: runs.status may be 'superseded'

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-07 10:30:00

A run that never completed and whose point a later plan trains under another key (its corpus or
settings changed) is superseded: neither pending nor compute still to spend. The CHECK constraint
on runs.status gains the word; existing rows keep their status. Downgrading turns superseded runs
back into interrupted ones (the nearest status the older schema knows).
"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa

revision: str = "0006"
down_revision: Union[str, None] = "0005"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

OLD_CHECK = "status IN ('pending', 'running', 'completed', 'failed', 'interrupted')"
NEW_CHECK = "status IN ('pending', 'running', 'completed', 'failed', 'interrupted', 'superseded')"


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_runs_status"), type_="check")
        batch_op.create_check_constraint(op.f("ck_runs_status"), sa.text(NEW_CHECK))


def downgrade() -> None:
    op.execute("UPDATE runs SET status = 'interrupted' WHERE status = 'superseded'")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_runs_status"), type_="check")
        batch_op.create_check_constraint(op.f("ck_runs_status"), sa.text(OLD_CHECK))
