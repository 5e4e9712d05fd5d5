"""PostgreSQL's full-text GIN index without a pending list (``fastupdate = off``).

Revision ID: 0004
Revises: 0003

With GIN's default ``fastupdate = on``, new rows' entries go to an unsorted pending
list that every search scans in full until a vacuum (or a full list, up to
``gin_pending_list_limit``, merged by the insert that fills it) moves them into the
index. A store just loaded or busy with writes then answers ``search_text`` (and so
recall's fts lane) slowly until autovacuum comes by, and some writes pay for the
merge. Recall is the latency-sensitive path, so each write updates the index
directly: slower bulk loads (COPY), steady searches. SQLite: nothing to do (FTS5).
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Turn the pending list off and flush what it holds into the index."""
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("ALTER INDEX items_search_gin SET (fastupdate = off)")
    op.execute("SELECT gin_clean_pending_list('items_search_gin')")


def downgrade() -> None:
    """Back to PostgreSQL's default."""
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("ALTER INDEX items_search_gin RESET (fastupdate)")
