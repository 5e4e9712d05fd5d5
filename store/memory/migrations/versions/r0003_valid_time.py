"""Valid-time indexes: ``nearest_valid`` reads bounded index range scans, not every item.

Revision ID: 0003
Revises: 0002

Two btree indexes, the same on SQLite and PostgreSQL: ``(project, valid_from, valid_to)``
and ``(project, valid_to, valid_from)`` (each holds the other end, so a walk checks
whether an item covers the instant from the index alone). :func:`store.memory.timeline.nearest_valid` walks them outward
from the instant asked about (items starting after it, ascending; items ending before it,
descending; items covering it, from the latest start and from the earliest end), each walk
with a ``LIMIT``. Existing rows are indexed by the upgrade.
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the valid-time indexes."""
    op.create_index("items_project_valid_from", "items", ["project", "valid_from", "valid_to"])
    op.create_index("items_project_valid_to", "items", ["project", "valid_to", "valid_from"])


def downgrade() -> None:
    """Drop them."""
    op.drop_index("items_project_valid_to", table_name="items")
    op.drop_index("items_project_valid_from", table_name="items")
