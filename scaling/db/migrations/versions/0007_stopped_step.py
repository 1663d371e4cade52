"""runs stopped early: runs.stopped_step

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-07 17:15:00

A run of an adaptive sweep with ``early_stop`` may stop once its final loss is predicted within a
tolerance: it is then completed, its ``final_eval_loss`` is the predicted one, and
``stopped_step`` holds the step it stopped at (NULL for a run trained to its last step). Existing
rows were all trained in full and keep NULL.
"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa

revision: str = "0007"
down_revision: Union[str, None] = "0006"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("stopped_step", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("stopped_step")
