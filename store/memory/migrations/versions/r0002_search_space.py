"""Full-text and spatial search: SQLite FTS5 + R*Tree (triggers), PostgreSQL tsvector + GiST.

Revision ID: 0002
Revises: 0001

Existing rows are indexed by the upgrade (FTS5 ``rebuild``, an R*Tree backfill; the
PostgreSQL generated column is computed for every row when it is added).

* SQLite: ``items_fts`` is an external-content FTS5 table over ``items`` (title,
  statement, details, tags_text; porter stemming), ``items_rtree`` an R*Tree over the
  anchor boxes keyed by ``items.pk``; triggers keep both in sync in the writing
  transaction. R*Tree boxes are float32 rounded outward, so queries re-check the exact
  columns.
* PostgreSQL: ``items.search`` is a stored generated ``tsvector`` (english; title A,
  statement and tags B, details C) with a GIN index, and a GiST index over
  ``box(point(min_lng, min_lat), point(max_lng, max_lat))`` (built-in geometric types:
  no PostGIS needed).
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_SQLITE_UP = (
    "CREATE VIRTUAL TABLE items_fts USING fts5(title, statement, details, tags_text, "
    "content='items', content_rowid='pk', tokenize='porter unicode61')",
    "CREATE VIRTUAL TABLE items_rtree USING rtree(pk, min_lat, max_lat, min_lng, max_lng)",
    """CREATE TRIGGER items_ai AFTER INSERT ON items BEGIN
        INSERT INTO items_fts(rowid, title, statement, details, tags_text)
            VALUES (new.pk, new.title, new.statement, new.details, new.tags_text);
        INSERT INTO items_rtree(pk, min_lat, max_lat, min_lng, max_lng)
            SELECT new.pk, new.min_lat, new.max_lat, new.min_lng, new.max_lng
            WHERE new.min_lat IS NOT NULL;
    END""",
    """CREATE TRIGGER items_ad AFTER DELETE ON items BEGIN
        INSERT INTO items_fts(items_fts, rowid, title, statement, details, tags_text)
            VALUES ('delete', old.pk, old.title, old.statement, old.details, old.tags_text);
        DELETE FROM items_rtree WHERE pk = old.pk;
    END""",
    """CREATE TRIGGER items_au AFTER UPDATE OF title, statement, details, tags_text, min_lat,
            min_lng, max_lat, max_lng ON items BEGIN
        INSERT INTO items_fts(items_fts, rowid, title, statement, details, tags_text)
            VALUES ('delete', old.pk, old.title, old.statement, old.details, old.tags_text);
        INSERT INTO items_fts(rowid, title, statement, details, tags_text)
            VALUES (new.pk, new.title, new.statement, new.details, new.tags_text);
        DELETE FROM items_rtree WHERE pk = old.pk;
        INSERT INTO items_rtree(pk, min_lat, max_lat, min_lng, max_lng)
            SELECT new.pk, new.min_lat, new.max_lat, new.min_lng, new.max_lng
            WHERE new.min_lat IS NOT NULL;
    END""",
    "INSERT INTO items_fts(items_fts) VALUES ('rebuild')",
    "INSERT INTO items_rtree(pk, min_lat, max_lat, min_lng, max_lng) "
    "SELECT pk, min_lat, max_lat, min_lng, max_lng FROM items WHERE min_lat IS NOT NULL",
)

_SQLITE_DOWN = (
    "DROP TRIGGER items_au",
    "DROP TRIGGER items_ad",
    "DROP TRIGGER items_ai",
    "DROP TABLE items_rtree",
    "DROP TABLE items_fts",
)

_PG_UP = (
    """ALTER TABLE items ADD COLUMN search tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('english', coalesce(title, '')), 'A')
        || setweight(to_tsvector('english', coalesce(statement, '')), 'B')
        || setweight(to_tsvector('english', coalesce(tags_text, '')), 'B')
        || setweight(to_tsvector('english', coalesce(details, '')), 'C')
    ) STORED""",
    "CREATE INDEX items_search_gin ON items USING gin (search)",
    "CREATE INDEX items_box_gist ON items USING gist "
    "(box(point(min_lng, min_lat), point(max_lng, max_lat)))",
)

_PG_DOWN = (
    "DROP INDEX items_box_gist",
    "DROP INDEX items_search_gin",
    "ALTER TABLE items DROP COLUMN search",
)


def _run(statements: tuple[str, ...]) -> None:
    for sql in statements:
        op.execute(sql)


def upgrade() -> None:
    """Create the backend's full-text and spatial structures and index existing rows."""
    if op.get_bind().dialect.name == "sqlite":
        _run(_SQLITE_UP)
    else:
        _run(_PG_UP)


def downgrade() -> None:
    """Drop them."""
    if op.get_bind().dialect.name == "sqlite":
        _run(_SQLITE_DOWN)
    else:
        _run(_PG_DOWN)
