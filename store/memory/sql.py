"""The memory store over SQLAlchemy Core: one implementation, two thin backends.

:class:`SqlMemoryStore` holds everything the databases share; the backends
(:mod:`store.memory.sqlite`, :mod:`store.memory.postgres`) override only the
hooks where they differ: how a write transaction starts and locks the
project's head (:meth:`SqlMemoryStore.write_tx`, :meth:`~SqlMemoryStore.lock_head`),
the "insert unless present" statement, the spatial pre-filter
(:meth:`~SqlMemoryStore.bbox_condition`) and the full-text ranking
(:meth:`~SqlMemoryStore.text_match`, :meth:`~SqlMemoryStore.word_counts`).

A write: a job of the group commit (:mod:`store.memory.group`), run in a
transaction that has locked the project's ``projects`` row (its history head),
inside its own savepoint: it replays or rejects a known ``operation_id``, checks
versions and transitions, writes the item/relation rows and appends the history
entries (hash-chained, each head signed by ``sign_head``) and records the
operation; the batch moves the heads and commits, then answers. Concurrent
writes of this process share that transaction; other processes meet at the
database's lock. A concurrent duplicate that slips past the lookup hits the
unique ``(project, operation_id)`` key; its savepoint is rolled back and the
stored result is answered. The statements a write always issues are prepared
once (:mod:`store.memory.prepared`); SQLAlchemy Core builds the rest. The transaction
bodies and the lifecycle rules are in :mod:`store.memory.writes`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from store.errors import (
    DuplicateToken,
    InvalidMemoryQuery,
    InvalidTransition,
    MemoryBackendUnavailable,
)
from store.memory import archive, embeddings, reads, revisions, textsearch, timeline, tokens, writes
from store.memory.codec import (
    decode_cursor,
    entry_from_row,
    filter_key,
    item_from_row,
    relation_from_row,
    to_us,
    token_from_row,
)
from store.memory.digest import content_of, digest_of_content
from store.memory.group import GroupCommit
from store.memory.interface import (
    GENESIS_HASH,
    MemoryStore,
    SignHead,
    WriteMeta,
)
from store.memory.model import (
    ACTIONS,
    RELATION_KINDS,
    BriefPage,
    HistoryEntry,
    ItemBrief,
    ItemFilter,
    ItemVectors,
    MemoryItem,
    NewItem,
    Page,
    ProjectHead,
    Relation,
    Token,
    WriteResult,
)
from store.memory.prepared import Prepared
from store.memory.reads import brief_from_row
from store.memory.readsql import ReadStatements
from store.memory.schema import ITEM_COLUMNS, history, items, projects
from store.memory.schema import relations as relations_t
from store.memory.schema import tokens as tokens_t
from store.memory.timeline import StateAsOf
from store.memory.writer import BatchConnection

__all__ = ["SqlMemoryStore"]

_MAX_SEARCH_WORDS = 64
_ITEM_NAMES = tuple(c.name for c in ITEM_COLUMNS)


class _DryRun(Exception):
    """Raised inside an import transaction to roll it back (a dry run)."""

    def __init__(self, counts: dict[str, int]) -> None:
        super().__init__("dry run")
        self.counts = counts


class SqlMemoryStore(MemoryStore):
    """:class:`MemoryStore` over a SQLAlchemy engine (subclassed per backend)."""

    row_locks = False
    """Lock the project's head row with ``SELECT ... FOR UPDATE`` (servers; SQLite serialises writers)."""
    keep_batch_connection = False
    """Run the group commit's batches on one kept connection (:mod:`store.memory.writer`)."""

    def __init__(self, engine: sa.Engine, url: str) -> None:
        self.engine = engine
        """The SQLAlchemy engine (tests and tools may read it; writes go through the methods)."""
        self.url = url
        """The URL the store was opened with."""
        dbapi = engine.dialect.loaded_dbapi
        self._operational = (sa.exc.OperationalError, dbapi.OperationalError)
        self._prepared = Prepared(engine.dialect, self.insert_ignore(projects), self.row_locks)
        self.read_statements = ReadStatements(engine.dialect)
        """The hot reads' compiled shapes (:mod:`store.memory.readsql`)."""
        self._pin = reads.ReadPin()
        keep = self.keep_batch_connection
        self._batch_conn = BatchConnection(engine, self.write_tx, self._prepared, keep=keep)
        integrity = (sa.exc.IntegrityError, dbapi.IntegrityError)
        self.group = GroupCommit(self._batch_conn.transaction, integrity)
        """This process's group commit of the store's writes (see :mod:`store.memory.group`)."""

    # ------------------------------------------------------------------ backend hooks

    @contextlib.contextmanager
    def write_tx(self, conn: sa.Connection | None = None) -> Iterator[sa.Connection]:
        """A write transaction (committed on success, rolled back on error) on ``conn`` (the
        group commit's kept connection) or on a connection of the pool."""
        if conn is not None:
            with conn.begin():
                yield conn
            return
        with self.engine.begin() as pooled:
            yield pooled

    @contextlib.contextmanager
    def read_tx(self) -> Iterator[sa.Connection]:
        """A connection in a read transaction (one consistent snapshot where the backend has
        one): this thread's :meth:`reading` transaction when one is open."""
        pinned = self._pin.conn
        if pinned is not None:
            yield pinned
            return
        with self.engine.connect() as conn, conn.begin():
            yield conn

    snapshot_options: Mapping[str, Any] = {}
    """Connection options of a :meth:`reading` transaction (PostgreSQL: repeatable read)."""

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """One read transaction for this thread's reads in the block (see the interface)."""
        if self._pin.conn is not None:  # nested: the outer block's snapshot
            yield
            return
        with self._unavailable(), self.engine.connect() as conn:
            conn.execution_options(**self.snapshot_options)
            with conn.begin(), self._pin.hold(conn):
                yield

    def insert_ignore(self, table: sa.Table) -> sa.Executable:
        """``INSERT ... ON CONFLICT DO NOTHING`` for this dialect (values given at execution)."""
        raise NotImplementedError

    def bbox_condition(self) -> sa.ColumnElement[bool]:
        """The backend's indexed pre-filter for items whose box intersects the filter's box
        (parameters ``bbox_s``, ``bbox_w``, ``bbox_n``, ``bbox_e``)."""
        raise NotImplementedError

    def text_match(
        self,
        conn: sa.Connection,
        words: Sequence[str],
        where: tuple[reads.FilterShape, dict[str, Any]],
        *,
        all_words: bool,
        cap: int,
    ) -> list[tuple[str, float]]:
        """``[(item id, score)]`` of at most ``cap`` items matching a filter (its shape and
        parameters, :func:`store.memory.reads.filter_sql`) and all (or any) of ``words``,
        scored by the database's ranking (higher is better), unordered."""
        raise NotImplementedError

    def word_counts(
        self, conn: sa.Connection, project: str, words: Sequence[str], cap: int
    ) -> list[int]:
        """How many items hold each word, counted up to ``cap + 1`` (one statement)."""
        raise NotImplementedError

    def migration_lock(self, conn: sa.Connection) -> None:
        """Serialise concurrent migrations (inside the migration transaction)."""

    def lock_head(self, conn: sa.Connection, project: str) -> tuple[int, str]:
        """Create the project's head row if absent, lock it, return ``(seq, hash)``."""
        conn.execute(
            self.insert_ignore(projects),
            {"project": project, "head_seq": 0, "head_hash": GENESIS_HASH},
        )
        q = sa.select(projects.c.head_seq, projects.c.head_hash).where(
            projects.c.project == project
        )
        if self.row_locks:
            q = q.with_for_update()
        seq, head_hash = conn.execute(q).one()
        return int(seq), str(head_hash)

    # ------------------------------------------------------------------ lifecycle

    def migrate(self, target: str = "head") -> str:
        """Upgrade the schema to ``target`` (default the newest revision); return the revision.

        Concurrent callers are serialised; a second one finds nothing left to do.
        """
        with self._unavailable(), self.write_tx() as conn:
            self.migration_lock(conn)
            return revisions.upgrade(conn, target)

    def revision(self) -> str | None:
        """The schema revision applied (None: an empty database)."""
        with self._unavailable(), self.engine.connect() as conn:
            return revisions.current(conn)

    @staticmethod
    def head_revision() -> str:
        """The newest revision this code knows."""
        return revisions.head()

    def close(self) -> None:
        """Release connections."""
        self._batch_conn.close()
        self.engine.dispose()

    @contextlib.contextmanager
    def _unavailable(self) -> Iterator[None]:
        try:
            yield
        except self._operational as exc:
            raise MemoryBackendUnavailable(
                f"memory database {self.engine.url.render_as_string(hide_password=True)} "
                f"unavailable: {getattr(exc, 'orig', None) or exc}"
            ) from exc

    # ------------------------------------------------------------------ the write skeleton

    def _write(
        self,
        project: str,
        meta: WriteMeta,
        sign_head: SignHead | None,
        body: writes.WriteBody,
    ) -> WriteResult:
        to_us(meta.at)  # an aware time, or a typed error before anything starts

        with self._unavailable():
            job, recover = writes.write_job(project, meta, sign_head, body)
            return self.group.submit(project, job, recover)

    def create(
        self,
        project: str,
        item: NewItem,
        meta: WriteMeta,
        *,
        supersedes: tuple[str, int] | None = None,
        sign_head: SignHead | None = None,
    ) -> WriteResult:
        """Store a new item (see :meth:`MemoryStore.create`).

        History: a superseding write appends ``supersede`` (the old item) and then
        ``create`` (the new one, the new head) in the same transaction.
        """
        content = content_of(item)
        digest_hex = digest_of_content(content)  # typed errors for unhashable content, first

        body = writes.create_body(project, item, meta, supersedes, digest_hex, content)
        return self._write(project, meta, sign_head, body)

    def change(
        self,
        project: str,
        item_id: str,
        expected_version: int | None,
        changes: Mapping[str, Any],
        action: str,
        meta: WriteMeta,
        *,
        sign_head: SignHead | None = None,
    ) -> WriteResult:
        """Change fields of an item in place (see :meth:`MemoryStore.change`; :data:`store.memory.writes.TRANSITIONS`)."""
        unknown = sorted(set(changes) - writes.CHANGEABLE)
        if unknown:
            raise InvalidTransition(
                f"cannot change {unknown} in place (changeable: {sorted(writes.CHANGEABLE)})"
            )
        if action not in ACTIONS or action in ("create", "supersede", "relate"):
            raise InvalidTransition(f"{action!r} is not an in-place change action")

        body = writes.change_body(project, item_id, expected_version, changes, action, meta)
        return self._write(project, meta, sign_head, body)

    def relate(
        self,
        project: str,
        src_id: str,
        dst_id: str,
        kind: str,
        meta: WriteMeta,
        *,
        sign_head: SignHead | None = None,
    ) -> WriteResult:
        """Add a typed relation (see :meth:`MemoryStore.relate`).

        An existing ``(src, dst, kind)`` edge answers ``replayed=True`` with the entry
        that wrote it. ``supersedes`` edges are written only by ``create(supersedes=...)``.

        Raises:
            InvalidTransition: an unknown or ``supersedes`` kind, an edge from an item to
                itself, or from a deleted item.
        """
        if kind not in RELATION_KINDS or kind == "supersedes":
            raise InvalidTransition(f"relation kind {kind!r} cannot be written by relate")
        if src_id == dst_id:
            raise InvalidTransition("an item cannot relate to itself")

        body = writes.relate_body(project, src_id, dst_id, kind, meta)
        return self._write(project, meta, sign_head, body)

    # ------------------------------------------------------------------ reads

    def get(self, project: str, item_id: str) -> MemoryItem | None:
        """The item (any status), or None."""
        with self._unavailable(), self.read_tx() as conn:
            row = writes.item_row_of(conn, project, item_id)
        return item_from_row(row._mapping) if row is not None else None

    def get_many(self, project: str, item_ids: Sequence[str]) -> list[MemoryItem]:
        """The project's items among ``item_ids``, in the given order (missing left out)."""
        if not item_ids:
            return []
        with self._unavailable(), self.read_tx() as conn:
            rows = reads.rows_by_id(self.read_statements, conn, ITEM_COLUMNS, project, item_ids)
        return [
            item_from_row(dict(zip(_ITEM_NAMES, rows[i], strict=True)))
            for i in dict.fromkeys(item_ids)
            if i in rows
        ]

    def get_briefs(self, project: str, item_ids: Sequence[str]) -> list[ItemBrief]:
        """The briefs of the project's items among ``item_ids``, in the given order."""
        if not item_ids:
            return []
        with self._unavailable(), self.read_tx() as conn:
            rows = reads.rows_by_id(
                self.read_statements, conn, reads.BRIEF_COLUMNS, project, item_ids
            )
        return [brief_from_row(rows[i]) for i in dict.fromkeys(item_ids) if i in rows]

    def project_condition(self, shape: reads.FilterShape) -> sa.ColumnElement[bool]:
        """The condition keeping the project's items (parameter ``project``; a backend may
        phrase it so that its planner picks a better index for the rest of the filter)."""
        return items.c.project == sa.bindparam("project")

    def conditions(self, shape: reads.FilterShape) -> list[sa.ColumnElement[bool]]:
        """The WHERE conditions of a filter's shape (:func:`store.memory.reads.conditions`),
        over the parameters :func:`store.memory.reads.filter_sql` gives."""
        return reads.conditions(self.project_condition(shape), self.bbox_condition, shape)

    def list_items(
        self, project: str, where: ItemFilter, *, limit: int, cursor: str | None = None
    ) -> Page:
        """Items matching ``where``, newest first (``created_at``, then id), paged.

        ``valid_at``: an item whose valid time has no end (``valid_to`` None) is valid
        from ``valid_from`` on; one with no valid time at all is kept.

        Raises:
            InvalidCursor: a cursor this store did not issue for this project and filter.
            InvalidMemoryQuery: ``limit`` below 1, or an empty bbox.
        """
        rows, nxt = self._page(ITEM_COLUMNS, project, where, limit, cursor)
        return Page(
            items=tuple(item_from_row(dict(zip(_ITEM_NAMES, r, strict=True))) for r in rows),
            next_cursor=nxt,
        )

    def list_briefs(
        self, project: str, where: ItemFilter, *, limit: int, cursor: str | None = None
    ) -> BriefPage:
        """:meth:`list_items` as briefs (the same order and cursors)."""
        rows, nxt = self._page(reads.BRIEF_COLUMNS, project, where, limit, cursor)
        return BriefPage(items=tuple(brief_from_row(r) for r in rows), next_cursor=nxt)

    def _page(
        self,
        columns: Sequence[Any],
        project: str,
        where: ItemFilter,
        limit: int,
        cursor: str | None,
    ) -> tuple[list[Any], str | None]:
        if limit < 1:
            raise InvalidMemoryQuery(f"limit must be at least 1, got {limit}")
        flt = reads.filter_sql(project, where)
        if cursor is not None:
            decode_cursor(cursor, filter_key(project, where))  # a typed error before the read
        with self._unavailable(), self.read_tx() as conn:
            return reads.page_rows(
                self.read_statements,
                conn,
                columns,
                flt,
                self.conditions,
                limit=limit,
                cursor=cursor,
                key=lambda: filter_key(project, where),
            )

    def relations(self, project: str, item_id: str) -> list[Relation]:
        """Every relation from or to an item (oldest first)."""
        r = relations_t.c
        q = (
            sa.select(relations_t)
            .where(r.project == project, sa.or_(r.src_id == item_id, r.dst_id == item_id))
            .order_by(r.seq, r.src_id, r.dst_id, r.kind)
        )
        with self._unavailable(), self.read_tx() as conn:
            return [relation_from_row(x._mapping) for x in conn.execute(q)]

    def history(
        self,
        project: str,
        *,
        item_id: str | None = None,
        after_seq: int = 0,
        limit: int = 1000,
    ) -> list[HistoryEntry]:
        """History entries in seq order (of one item, or of the whole project)."""
        h = history.c
        conds = [h.project == project, h.seq > after_seq]
        if item_id is not None:
            conds.append(h.item_id == item_id)
        q = sa.select(history).where(*conds).order_by(h.seq).limit(max(0, limit))
        with self._unavailable(), self.read_tx() as conn:
            return [entry_from_row(x._mapping) for x in conn.execute(q)]

    def head(self, project: str) -> ProjectHead:
        """The project's history head (seq 0 and the genesis hash when empty)."""
        p = projects.c
        with self._unavailable(), self.read_tx() as conn:
            rows = self.read_statements.rows(
                conn,
                ("head",),
                lambda: sa.select(p.head_seq, p.head_hash).where(
                    p.project == sa.bindparam("project")
                ),
                {"project": project},
            )
        if not rows:
            return ProjectHead(project, 0, GENESIS_HASH)
        return ProjectHead(project, int(rows[0][0]), str(rows[0][1]))

    def search_text(
        self, project: str, query: str, *, limit: int, where: ItemFilter | None = None
    ) -> list[tuple[str, float]]:
        """Full-text ranking (FTS5 bm25 / ts_rank), best first: items holding every word of
        the query, then any of them, in bounded passes (:mod:`store.memory.textsearch`).

        The query is split into words (letters, digits, underscore); operators and
        punctuation are not syntax here, so any text is a valid query. ``where`` None:
        the default :class:`ItemFilter` (superseded and deleted items hidden).
        """
        if limit < 1:
            raise InvalidMemoryQuery(f"limit must be at least 1, got {limit}")
        words = list(dict.fromkeys(w.lower() for w in re.findall(r"\w+", query)))
        if not words:
            return []
        flt = reads.filter_sql(project, where if where is not None else ItemFilter())
        with self._unavailable(), self.read_tx() as conn:
            words = words[:_MAX_SEARCH_WORDS]
            return textsearch.search(self, conn, project, words, flt, limit)

    def states_as_of(
        self, project: str, item_ids: Sequence[str], as_of: dt.datetime
    ) -> dict[str, StateAsOf]:
        """Item states as of a transaction time (see :func:`store.memory.timeline.states_as_of`)."""
        with self._unavailable(), self.read_tx() as conn:
            return timeline.states_as_of(self.read_statements, conn, project, item_ids, as_of)

    def relations_of(
        self,
        project: str,
        item_ids: Sequence[str],
        kinds: Sequence[str],
        *,
        written_before: dt.datetime | None = None,
    ) -> list[Relation]:
        """Relations of many items at once (see :func:`store.memory.timeline.relations_of`)."""
        if not item_ids or not kinds:
            return []
        with self._unavailable(), self.read_tx() as conn:
            return timeline.relations_of(conn, project, item_ids, kinds, written_before)

    def nearest_valid(
        self, project: str, at: dt.datetime, *, limit: int, where: ItemFilter | None = None
    ) -> list[tuple[str, int]]:
        """Items nearest ``at`` in valid time (see :func:`store.memory.timeline.nearest_valid`)."""
        if limit < 1:
            raise InvalidMemoryQuery(f"limit must be at least 1, got {limit}")
        flt = reads.filter_sql(project, where if where is not None else ItemFilter())
        with self._unavailable(), self.read_tx() as conn:
            return timeline.nearest_valid(
                self.read_statements, conn, flt, self.conditions, at, limit
            )

    def unembedded(self, project: str, *, after: str | None, limit: int) -> list[MemoryItem]:
        """Items with no embedding, in id order (:func:`store.memory.embeddings.unembedded`)."""
        with self._unavailable(), self.read_tx() as conn:
            return embeddings.unembedded(conn, project, after, limit)

    def set_embeddings(self, project: str, vectors: Mapping[str, Sequence[float]]) -> int:
        """Embeddings of items that have none (:func:`store.memory.embeddings.set_embeddings`)."""
        with self._unavailable(), self.write_tx() as conn:
            return embeddings.set_embeddings(conn, project, vectors) if vectors else 0

    def item_vectors(self, project: str, where: ItemFilter) -> ItemVectors:
        """Ids, anchor centres and embeddings of the items matching ``where`` (one query)."""
        shape, params = reads.filter_sql(project, where)
        with self._unavailable(), self.read_tx() as conn:
            return embeddings.item_vectors(conn, self.conditions(shape), params)

    def projects(self) -> list[str]:
        """Every project with at least one history entry or token (sorted)."""
        q = sa.union(
            sa.select(projects.c.project).where(projects.c.head_seq > 0),
            sa.select(tokens_t.c.project),
        )
        with self._unavailable(), self.read_tx() as conn:
            return sorted(str(p) for (p,) in conn.execute(q))

    # ------------------------------------------------------------------ tokens

    def add_token(self, token: Token, token_hash: str) -> None:
        """Store a token by its hash.

        Raises:
            DuplicateToken: its id or hash is already stored.
        """
        try:
            with self._unavailable(), self.write_tx() as conn:
                tokens.add(conn, token, token_hash)
        except sa.exc.IntegrityError as exc:
            raise DuplicateToken(f"token {token.id!r} (or its hash) is already stored") from exc

    def token_by_hash(self, token_hash: str) -> Token | None:
        """The token with this hash (revoked and expired included), or None."""
        stmt = self._prepared.token  # every authenticated call: prepared, one statement
        with self._unavailable(), self.engine.connect() as conn:
            cur = conn.connection.cursor()
            try:
                cur.execute(stmt.sql, stmt.params({"token_hash": token_hash}))
                row = cur.fetchone()
            finally:
                cur.close()
        return token_from_row(self._prepared.token_row(row)) if row is not None else None

    def list_tokens(self, project: str | None = None) -> list[Token]:
        """Tokens (of one project, or all), oldest first."""
        with self._unavailable(), self.read_tx() as conn:
            return tokens.listed(conn, project)

    def revoke_token(self, token_id: str, at: dt.datetime) -> bool:
        """Revoke a token (the first revocation time is kept); False when there is none."""
        with self._unavailable(), self.write_tx() as conn:
            return tokens.revoke(conn, token_id, at)

    # ------------------------------------------------------------------ archive

    def export_project(self, project: str) -> Iterator[dict[str, Any]]:
        """Every row of a project as plain records (see :mod:`store.memory.archive`)."""
        with self._unavailable(), self.read_tx() as conn:
            records = list(archive.export_rows(conn, project, self.revision_of(conn)))
        yield from records

    @staticmethod
    def revision_of(conn: sa.Connection) -> str | None:
        """The schema revision, read on an open connection."""
        return revisions.current(conn)

    def import_records(
        self, records: Sequence[Mapping[str, Any]], *, dry_run: bool = False
    ) -> dict[str, int]:
        """Load exported records in one transaction (see :func:`store.memory.archive.import_rows`)."""
        try:
            with self._unavailable(), self.write_tx() as conn:
                counts = archive.import_rows(conn, records, lock_head=self.lock_head)
                if dry_run:
                    raise _DryRun(counts)  # roll the whole load back
        except _DryRun as done:
            return done.counts
        return counts
