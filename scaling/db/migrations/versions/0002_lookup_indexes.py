"""lookup indexes for events and fits

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 11:00:00

Events are read per run, and a fit is reused when (sweep, law, method, data fingerprint) match.
"""
from typing import Sequence, Union

from alembic import op

revision: str = "0002"
down_revision: Union[str, None] = "0001"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.create_index("ix_events_run_id", ["run_id"], unique=False)
    with op.batch_alter_table("fits", schema=None) as batch_op:
        batch_op.create_index("ix_fits_lookup", ["sweep_id", "law", "method", "fingerprint"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("fits", schema=None) as batch_op:
        batch_op.drop_index("ix_fits_lookup")
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.drop_index("ix_events_run_id")
