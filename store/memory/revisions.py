"""The memory database's schema revisions: alembic, applied and read on an open connection."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from store.memory.migrations import SCRIPT_LOCATION, VERSION_TABLE

__all__ = ["current", "head", "upgrade"]


def current(conn: sa.Connection) -> str | None:
    """The revision applied on ``conn``'s database (None: an empty database)."""
    return MigrationContext.configure(
        conn, opts={"version_table": VERSION_TABLE}
    ).get_current_revision()


def upgrade(conn: sa.Connection, target: str = "head") -> str:
    """Upgrade the schema on ``conn`` to ``target``; return the revision then applied."""
    cfg = Config()
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    cfg.attributes["connection"] = conn
    command.upgrade(cfg, target)
    return str(current(conn))


def head() -> str:
    """The newest revision this code knows."""
    return str(ScriptDirectory(SCRIPT_LOCATION).get_current_head())
