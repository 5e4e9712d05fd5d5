"""Base tables: projects, items, item_tags, relations, history, operations, tokens.

Revision ID: 0001
Revises: (none)

Written out in full (not derived from :mod:`store.memory.schema`) so that this revision
stays what it was when later revisions change the schema.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_pk = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_json = sa.JSON(none_as_null=True)


def upgrade() -> None:
    """Create the base tables and their ordinary indexes."""
    op.create_table(
        "projects",
        sa.Column("project", sa.String(200), primary_key=True),
        sa.Column("head_seq", sa.BigInteger(), nullable=False),
        sa.Column("head_hash", sa.String(64), nullable=False),
    )
    op.create_table(
        "items",
        sa.Column("pk", _pk, primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(64), nullable=False, unique=True),
        sa.Column("project", sa.String(200), nullable=False),
        sa.Column("type", sa.String(32), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("statement", sa.Text(), nullable=False),
        sa.Column("tags", _json, nullable=False),
        sa.Column("tags_text", sa.Text(), nullable=False),
        sa.Column("details", sa.Text()),
        sa.Column("confidence", sa.Float(), nullable=False),
        sa.Column("importance", sa.Float(), nullable=False),
        sa.Column("evidence", _json, nullable=False),
        sa.Column("related_memory_ids", _json, nullable=False),
        sa.Column("metadata", _json, nullable=False),
        sa.Column("asserted_by", sa.String(32), nullable=False),
        sa.Column("applicability", sa.String(32), nullable=False),
        sa.Column("scope", _json, nullable=False),
        sa.Column("scope_kind", sa.String(64), nullable=False),
        sa.Column("anchor", _json, nullable=False),
        sa.Column("min_lat", sa.Float()),
        sa.Column("min_lng", sa.Float()),
        sa.Column("max_lat", sa.Float()),
        sa.Column("max_lng", sa.Float()),
        sa.Column("valid_from", sa.BigInteger()),
        sa.Column("valid_to", sa.BigInteger()),
        sa.Column("claim", _json),
        sa.Column("verdict", sa.String(32)),
        sa.Column("verdict_facts", _json, nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("session", sa.String(200)),
        sa.Column("embedding", sa.LargeBinary()),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("supersedes_id", sa.String(64)),
        sa.Column("superseded_by", sa.String(64)),
        sa.Column("deleted_reason", sa.Text()),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.Column("content_digest", sa.String(64), nullable=False),
    )
    op.create_index("items_project_created", "items", ["project", "created_at", "id"])
    op.create_index("items_project_type", "items", ["project", "type"])
    op.create_table(
        "item_tags",
        sa.Column("item_pk", _pk, sa.ForeignKey("items.pk"), primary_key=True),
        sa.Column("tag", sa.String(200), primary_key=True),
        sa.Column("project", sa.String(200), nullable=False),
    )
    op.create_index("item_tags_project_tag", "item_tags", ["project", "tag"])
    op.create_table(
        "relations",
        sa.Column("project", sa.String(200), primary_key=True),
        sa.Column("src_id", sa.String(64), primary_key=True),
        sa.Column("dst_id", sa.String(64), primary_key=True),
        sa.Column("kind", sa.String(32), primary_key=True),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
    )
    op.create_index("relations_dst", "relations", ["project", "dst_id"])
    op.create_table(
        "history",
        sa.Column("project", sa.String(200), primary_key=True),
        sa.Column("seq", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("item_id", sa.String(64)),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("at", sa.BigInteger(), nullable=False),
        sa.Column("change", _json, nullable=False),
        sa.Column("request_id", sa.String(200)),
        sa.Column("operation_id", sa.String(200)),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.Column("head_signature", sa.Text()),
    )
    op.create_index("history_item", "history", ["project", "item_id", "seq"])
    op.create_table(
        "operations",
        sa.Column("project", sa.String(200), primary_key=True),
        sa.Column("operation_id", sa.String(200), primary_key=True),
        sa.Column("request_digest", sa.String(128)),
        sa.Column("item_id", sa.String(64)),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("at", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "tokens",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("project", sa.String(200), nullable=False),
        sa.Column("token_hash", sa.String(128), nullable=False, unique=True),
        sa.Column("can", _json, nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("label", sa.Text()),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger()),
        sa.Column("revoked_at", sa.BigInteger()),
        sa.Column("extra", _json, nullable=False),
    )
    op.create_index("ix_tokens_project", "tokens", ["project"])


def downgrade() -> None:
    """Drop every base table."""
    for name in ("tokens", "operations", "history", "relations", "item_tags", "items", "projects"):
        op.drop_table(name)
