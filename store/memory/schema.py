"""The memory database's tables (SQLAlchemy Core), shared by both backends.

Every table carries ``project`` and every query filters by it. Times are
integer microseconds since the Unix epoch (UTC): exact, sortable and the same
on both backends. JSON columns hold the structured fields (tags, metadata,
evidence, anchor, claim, scope, history changes); ``none_as_null`` keeps an
absent value SQL ``NULL``.

The backend-specific search structures are not tables here: SQLite's FTS5
table ``items_fts`` and R*Tree table ``items_rtree`` (kept in sync by
triggers), PostgreSQL's generated ``items.search`` tsvector column (GIN) and
the GiST index over the anchor box; migration ``0002`` creates them. The
schema itself is created by the alembic migrations
(:mod:`store.memory.migrations`), never by ``metadata.create_all``.
"""

from __future__ import annotations

import sqlalchemy as sa

__all__ = [
    "ITEM_COLUMNS",
    "history",
    "item_tags",
    "items",
    "metadata",
    "operations",
    "projects",
    "relations",
    "tokens",
]

metadata = sa.MetaData()

_Json = sa.JSON(none_as_null=True)
_Micros = sa.BigInteger()
_Pk = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
"""Integer primary keys: ``INTEGER PRIMARY KEY`` (the rowid) on SQLite, ``BIGINT`` elsewhere."""

projects = sa.Table(
    "projects",
    metadata,
    sa.Column("project", sa.String(200), primary_key=True),
    sa.Column("head_seq", sa.BigInteger(), nullable=False),
    sa.Column("head_hash", sa.String(64), nullable=False),
)
"""One row per project: the head of its history (the row writers lock)."""

items = sa.Table(
    "items",
    metadata,
    sa.Column("pk", _Pk, primary_key=True, autoincrement=True),
    sa.Column("id", sa.String(64), nullable=False, unique=True),
    sa.Column("project", sa.String(200), nullable=False),
    sa.Column("type", sa.String(32), nullable=False),
    sa.Column("title", sa.Text(), nullable=False),
    sa.Column("statement", sa.Text(), nullable=False),
    sa.Column("tags", _Json, nullable=False),
    sa.Column("tags_text", sa.Text(), nullable=False),
    sa.Column("details", sa.Text()),
    sa.Column("confidence", sa.Float(), nullable=False),
    sa.Column("importance", sa.Float(), nullable=False),
    sa.Column("evidence", _Json, nullable=False),
    sa.Column("related_memory_ids", _Json, nullable=False),
    sa.Column("metadata", _Json, nullable=False),
    sa.Column("asserted_by", sa.String(32), nullable=False),
    sa.Column("applicability", sa.String(32), nullable=False),
    sa.Column("scope", _Json, nullable=False),
    sa.Column("scope_kind", sa.String(64), nullable=False),
    sa.Column("anchor", _Json, nullable=False),
    sa.Column("min_lat", sa.Float()),
    sa.Column("min_lng", sa.Float()),
    sa.Column("max_lat", sa.Float()),
    sa.Column("max_lng", sa.Float()),
    sa.Column("valid_from", _Micros),
    sa.Column("valid_to", _Micros),
    sa.Column("claim", _Json),
    sa.Column("verdict", sa.String(32)),
    sa.Column("verdict_facts", _Json, nullable=False),
    sa.Column("actor", sa.String(200), nullable=False),
    sa.Column("session", sa.String(200)),
    sa.Column("embedding", sa.LargeBinary()),
    sa.Column("version", sa.Integer(), nullable=False),
    sa.Column("status", sa.String(32), nullable=False),
    sa.Column("supersedes_id", sa.String(64)),
    sa.Column("superseded_by", sa.String(64)),
    sa.Column("deleted_reason", sa.Text()),
    sa.Column("created_at", _Micros, nullable=False),
    sa.Column("updated_at", _Micros, nullable=False),
    sa.Column("content_digest", sa.String(64), nullable=False),
    sa.Index("items_project_created", "project", "created_at", "id"),
    sa.Index("items_project_type", "project", "type"),
    sa.Index("items_project_valid_from", "project", "valid_from", "valid_to"),  # migration 0003
    sa.Index("items_project_valid_to", "project", "valid_to", "valid_from"),
)
"""Memory items (all :class:`~store.memory.model.MemoryItem` fields plus the anchor box)."""

ITEM_COLUMNS = tuple(c for c in items.c if c.name != "pk")
"""The item columns that reads select (never the backend's search column)."""

item_tags = sa.Table(
    "item_tags",
    metadata,
    sa.Column("item_pk", _Pk, sa.ForeignKey("items.pk"), primary_key=True),
    sa.Column("tag", sa.String(200), primary_key=True),
    sa.Column("project", sa.String(200), nullable=False),
    sa.Index("item_tags_project_tag", "project", "tag"),
)
"""One row per (item, tag): the tag filter's index (derived from ``items.tags``)."""

relations = sa.Table(
    "relations",
    metadata,
    sa.Column("project", sa.String(200), primary_key=True),
    sa.Column("src_id", sa.String(64), primary_key=True),
    sa.Column("dst_id", sa.String(64), primary_key=True),
    sa.Column("kind", sa.String(32), primary_key=True),
    sa.Column("actor", sa.String(200), nullable=False),
    sa.Column("created_at", _Micros, nullable=False),
    sa.Column("seq", sa.BigInteger(), nullable=False),
    sa.Index("relations_dst", "project", "dst_id"),
)
"""Typed edges between items; ``seq`` is the history entry that wrote the edge."""

history = sa.Table(
    "history",
    metadata,
    sa.Column("project", sa.String(200), primary_key=True),
    sa.Column("seq", sa.BigInteger(), primary_key=True, autoincrement=False),
    sa.Column("item_id", sa.String(64)),
    sa.Column("action", sa.String(32), nullable=False),
    sa.Column("actor", sa.String(200), nullable=False),
    sa.Column("at", _Micros, nullable=False),
    sa.Column("change", _Json, nullable=False),
    sa.Column("request_id", sa.String(200)),
    sa.Column("operation_id", sa.String(200)),
    sa.Column("prev_hash", sa.String(64), nullable=False),
    sa.Column("hash", sa.String(64), nullable=False),
    sa.Column("head_signature", sa.Text()),
    sa.Index("history_item", "project", "item_id", "seq"),
)
"""The append-only, hash-chained history of each project."""

operations = sa.Table(
    "operations",
    metadata,
    sa.Column("project", sa.String(200), primary_key=True),
    sa.Column("operation_id", sa.String(200), primary_key=True),
    sa.Column("request_digest", sa.String(128)),
    sa.Column("item_id", sa.String(64)),
    sa.Column("seq", sa.BigInteger(), nullable=False),
    sa.Column("at", _Micros, nullable=False),
)
"""Applied operation ids (unique per project): the idempotency record and its result."""

tokens = sa.Table(
    "tokens",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("project", sa.String(200), nullable=False, index=True),
    sa.Column("token_hash", sa.String(128), nullable=False, unique=True),
    sa.Column("can", _Json, nullable=False),
    sa.Column("actor", sa.String(200), nullable=False),
    sa.Column("label", sa.Text()),
    sa.Column("created_at", _Micros, nullable=False),
    sa.Column("expires_at", _Micros),
    sa.Column("revoked_at", _Micros),
    sa.Column("extra", _Json, nullable=False),
)
"""API tokens (their hashes; never the secrets)."""
