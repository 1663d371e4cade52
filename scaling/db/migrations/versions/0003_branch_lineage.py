"""branch lineage: runs.parent_key and runs.trunk_tokens

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 06:00:00

A cooldown branch starts from its trunk's checkpoint: ``parent_key`` names the trunk (a run of
the same sweep) and ``trunk_tokens`` the tokens it inherits from it, so the compute of a sweep
counts the shared trunk steps once. Existing runs are trained from scratch: no parent, 0 tokens.
"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa

revision: str = "0003"
down_revision: Union[str, None] = "0002"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("parent_key", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("trunk_tokens", sa.BigInteger(), server_default="0", nullable=False))
        batch_op.create_index("ix_runs_parent_key", ["parent_key"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ix_runs_parent_key")
        batch_op.drop_column("trunk_tokens")
        batch_op.drop_column("parent_key")
