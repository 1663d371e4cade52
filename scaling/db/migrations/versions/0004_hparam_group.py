"""hyperparameter groups: runs.hparam_group

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03 09:45:00

A grid block with ``hparams`` trains each of its points once per combination of learning rate,
batch and beta2; those runs share a label (the point's shape and tokens) so that a notebook or a
fit can take them together. Existing runs belong to no such sweep: NULL.
"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa

revision: str = "0004"
down_revision: Union[str, None] = "0003"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("hparam_group", sa.String(length=200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("hparam_group")
