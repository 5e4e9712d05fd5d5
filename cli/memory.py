"""``earthmem token ...`` and ``earthmem memory ...``: tokens, memory primitives, audit, archive.

* ``earthmem token create --project P --can read,write [--expires 90d] [--actor A]`` prints
  the token once (only its hash is stored); ``token list``, ``token revoke ID``,
  ``token rotate ID`` (a new token with the same project, permissions and actor; the old
  one revoked).
* ``earthmem memory <verb> '<json>'`` runs ``memory_<verb>`` (create, get, list, update,
  relate, history, delete, verify, neighbors, relations) with the token from ``--token`` or ``EARTHMEM_TOKEN``;
  the answer is printed as JSON (bad input: status 2 and one line).
* ``earthmem memory reembed [--project P] [--batch N]`` computes embeddings for items
  written before an embedder was configured (``$EARTHMEM_EMBEDDER``), in batches; items
  that have one are left as they are, so a second run embeds nothing; prints the counts.
* ``earthmem memory audit [--project P]`` checks every project's hash chain against its
  signed heads (status 1 when a chain does not verify).
* ``earthmem memory export --project P --out FILE`` / ``import FILE [--dry-run]`` move a
  project between databases (e.g. SQLite to PostgreSQL: ``--to postgresql://...``); the
  archive is JSON lines, one ``{"table", "row"}`` record per line, after a header line
  ``{"earthmem_memory_archive": 1, "project": ...}``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from pathlib import Path
from typing import Any

from api.errors import InvalidArgument
from cli.commands import default_data_dir, existing_data_dir, print_answer, read_stdin
from cli.exits import unwritable

__all__ = ["ARCHIVE_VERSION", "TOKEN_ENV", "register"]

TOKEN_ENV = "EARTHMEM_TOKEN"
"""Environment variable holding the caller's bearer token."""

ARCHIVE_VERSION = 1
"""Layout version of ``earthmem memory export`` archives."""

VERBS = (
    "create",
    "get",
    "list",
    "update",
    "relate",
    "history",
    "delete",
    "verify",
    "neighbors",
    "relations",
)
"""``earthmem memory <verb>`` runs primitive ``memory_<verb>``."""


def _data(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data", default=None, help="data directory (default: $EARTHMEM_DATA or ./data)"
    )
    parser.add_argument(
        "--memory-url",
        default=None,
        help="memory database (default: $EARTHMEM_MEMORY_URL or sqlite under the data dir)",
    )


def register(sub: Any) -> None:
    """Add ``token`` and ``memory`` to the ``earthmem`` parser."""
    token = sub.add_parser("token", help="bearer tokens for the memory primitives")
    tsub = token.add_subparsers(dest="token_command", required=True, parser_class=token.__class__)
    create = tsub.add_parser("create", help="create a token (printed once)")
    create.add_argument("--project", required=True)
    create.add_argument("--can", default="read,write", help="read or read,write (default)")
    create.add_argument("--expires", default="90d", help="e.g. 90d, 12h or never (default 90d)")
    create.add_argument("--actor", default=None, help="who writes with it (default token:<id>)")
    create.add_argument("--label", default=None)
    _data(create)
    create.set_defaults(handler=_token_create)
    lst = tsub.add_parser("list", help="list tokens (never their secrets)")
    lst.add_argument("--project", default=None)
    _data(lst)
    lst.set_defaults(handler=_token_list)
    revoke = tsub.add_parser("revoke", help="revoke a token by id")
    revoke.add_argument("id")
    _data(revoke)
    revoke.set_defaults(handler=_token_revoke)
    rotate = tsub.add_parser("rotate", help="a new token like ID; ID revoked")
    rotate.add_argument("id")
    rotate.add_argument("--expires", default="90d")
    _data(rotate)
    rotate.set_defaults(handler=_token_rotate)

    memory = sub.add_parser("memory", help="typed, place-anchored memories")
    msub = memory.add_subparsers(
        dest="memory_command", required=True, parser_class=memory.__class__
    )
    for verb in VERBS:
        p = msub.add_parser(verb, help=f"run memory_{verb} with a JSON argument object")
        p.add_argument("args", help="arguments as a JSON object ('-' reads stdin)")
        p.add_argument("--token", default=None, help=f"bearer token (default: ${TOKEN_ENV})")
        _data(p)
        p.set_defaults(handler=_memory_call, verb=verb)
    reembed = msub.add_parser(
        "reembed", help="embed items written before an embedder was configured (idempotent)"
    )
    reembed.add_argument("--project", default=None, help="one project (default: every one)")
    reembed.add_argument("--batch", type=int, default=64, help="texts per embedder call")
    _data(reembed)
    reembed.set_defaults(handler=_reembed)
    audit = msub.add_parser("audit", help="verify every project's history chain and signed heads")
    audit.add_argument("--project", default=None)
    _data(audit)
    audit.set_defaults(handler=_audit)
    export = msub.add_parser("export", help="write a project's memories as an archive")
    export.add_argument("--project", required=True)
    export.add_argument("--out", required=True, help="archive file (JSON lines); '-' stdout")
    _data(export)
    export.set_defaults(handler=_export)
    imp = msub.add_parser("import", help="load an archive (into --to or the data dir's database)")
    imp.add_argument("file")
    imp.add_argument("--to", default=None, help="target database URL (default: as --memory-url)")
    imp.add_argument("--dry-run", action="store_true", help="check and count only")
    _data(imp)
    imp.set_defaults(handler=_import)


def _data_dir(args: argparse.Namespace) -> str:
    return args.data or default_data_dir()


def context_dir(args: argparse.Namespace) -> Path:
    """The data directory a memory command's service context (or audit) opens. It must exist
    unless neither the memory database nor the signing key is the directory's own (a
    ``--memory-url`` or ``$EARTHMEM_MEMORY_URL``, and ``$EARTHMEM_SIGNING_KEY_FILE``): a typo
    would otherwise get a new, empty database, or a new key whose signed heads no audit
    of the real directory knows."""
    from store.keys import KEY_FILE_ENV
    from store.memory import MEMORY_URL_ENV

    url = args.memory_url or os.environ.get(MEMORY_URL_ENV)
    if url and os.environ.get(KEY_FILE_ENV, "").strip():
        return Path(_data_dir(args))
    return existing_data_dir(
        args.data, "pass --data (the directory holding the memory database and the signing key)"
    )


def _store(args: argparse.Namespace, url: str | None = None) -> Any:
    # Deferred: opening the store loads SQLAlchemy, alembic and a driver (start-up time).
    from store.memory import MEMORY_URL_ENV, default_url, open_store

    target = url or args.memory_url or os.environ.get(MEMORY_URL_ENV)
    if not target:  # the data directory's own database: the directory must exist
        hint = "pass --data, or a database URL of its own (--memory-url; --to for import)"
        target = default_url(existing_data_dir(args.data, hint))
    store = open_store(target)
    return store


def _token_create(args: argparse.Namespace) -> int:
    from api.memory.auth import issue_token, parse_expiry

    can = tuple(c.strip() for c in args.can.split(",") if c.strip())
    expires_at = parse_expiry(args.expires)  # bad input refused before the store is opened
    text, record = issue_token(
        _store(args), args.project, can, actor=args.actor, label=args.label, expires_at=expires_at
    )
    print(text)
    expires = record.expires_at.isoformat() if record.expires_at else "never"
    print(
        f"token {record.id}: project {record.project}, can {','.join(record.can)}, "
        f"actor {record.actor}, expires {expires} (shown once; only its hash is stored)",
        file=sys.stderr,
    )
    return 0


def _token_list(args: argparse.Namespace) -> int:
    for t in _store(args).list_tokens(args.project):
        print(
            json.dumps(
                {
                    "id": t.id,
                    "project": t.project,
                    "can": list(t.can),
                    "actor": t.actor,
                    "label": t.label,
                    "created_at": t.created_at.isoformat(),
                    "expires_at": t.expires_at.isoformat() if t.expires_at else None,
                    "revoked_at": t.revoked_at.isoformat() if t.revoked_at else None,
                }
            )
        )
    return 0


def _token_revoke(args: argparse.Namespace) -> int:
    if not _store(args).revoke_token(args.id, dt.datetime.now(dt.UTC)):
        raise InvalidArgument(f"no token {args.id!r}", code="token_not_found")
    print(f"revoked {args.id}")
    return 0


def _token_rotate(args: argparse.Namespace) -> int:
    from api.memory.auth import issue_token, parse_expiry

    store = _store(args)
    old = next((t for t in store.list_tokens() if t.id == args.id), None)
    if old is None:
        raise InvalidArgument(f"no token {args.id!r}", code="token_not_found")
    text, record = issue_token(
        store, old.project, old.can, actor=old.actor, label=old.label,
        expires_at=parse_expiry(args.expires),
    )  # fmt: skip
    store.revoke_token(old.id, dt.datetime.now(dt.UTC))
    print(text)
    print(f"token {record.id} replaces {old.id} (revoked)", file=sys.stderr)
    return 0


def _read_json(text: str, what: str) -> Any:
    raw = read_stdin() if text == "-" else text
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"{what} is not valid JSON: {exc}", code="invalid_json") from None


def _memory_call(args: argparse.Namespace) -> int:
    # Deferred: the dispatch loads pydantic and every query module (start-up time).
    from api.context import ServiceContext
    from api.dispatch import call_primitive

    payload = _read_json(args.args, "the arguments")
    if not isinstance(payload, dict):
        raise InvalidArgument("the arguments must be a JSON object")
    ctx = ServiceContext(context_dir(args), memory_url=args.memory_url)
    token = args.token or os.environ.get(TOKEN_ENV)
    return print_answer(lambda: call_primitive(ctx, f"memory_{args.verb}", payload, token=token))


def _reembed(args: argparse.Namespace) -> int:
    """Embed every item that has no embedding; JSON counts per project on stdout."""
    from api.recall.embedder import (
        EMBEDDER_ENV,
        EmbedDeadline,
        EmbedderFailed,
        item_text,
        load_embedder,
    )

    setting = os.environ.get(EMBEDDER_ENV)
    if not setting:
        raise InvalidArgument(f"no embedder configured: set ${EMBEDDER_ENV} to a model directory")
    if not 1 <= args.batch <= 4096:
        raise InvalidArgument(f"--batch must be 1..4096, got {args.batch}")
    embedder = load_embedder(setting)
    store = _store(args)
    out: dict[str, Any] = {"embedder": embedder.name, "projects": {}}
    for project in [args.project] if args.project else store.projects():
        counts = {"embedded": 0, "failed": 0}
        after: str | None = None
        while batch := store.unembedded(project, after=after, limit=args.batch):
            after = batch[-1].id
            texts = [item_text(i.title, i.statement, i.details, i.tags) for i in batch]
            try:
                vecs = embedder.embed(texts)
            except (EmbedderFailed, EmbedDeadline) as exc:
                counts["failed"] += len(batch)
                print(
                    f"reembed: {project}: {len(batch)} items not embedded: {exc}", file=sys.stderr
                )
                continue
            vectors = {i.id: tuple(float(x) for x in v) for i, v in zip(batch, vecs, strict=True)}
            counts["embedded"] += store.set_embeddings(project, vectors)
        out["projects"][project] = counts
    out["embedded"] = sum(c["embedded"] for c in out["projects"].values())
    out["failed"] = sum(c["failed"] for c in out["projects"].values())
    print(json.dumps(out, indent=2))
    return 1 if out["failed"] else 0


def _audit(args: argparse.Namespace) -> int:
    from api.memory.audit import audit_project
    from api.receipts import Signer

    store = _store(args)
    signer = Signer.load_or_create(context_dir(args))
    keys = {signer.key_id: signer.public_key}
    projects = [args.project] if args.project else store.projects()
    ok = True
    for project in projects:
        report = audit_project(store, project, keys)
        ok = ok and report.ok
        verdict = "ok" if report.ok else "FAILED"
        print(f"{project}: {verdict} ({report.entries} entries, head {report.head})")
        for problem in report.problems[:20]:
            print(f"  {problem}")
        for warning in report.warnings:
            print(f"  warning: {warning}")
    return 0 if ok else 1


def _export(args: argparse.Namespace) -> int:
    store = _store(args)
    lines = [json.dumps({"earthmem_memory_archive": ARCHIVE_VERSION, "project": args.project})]
    lines += [json.dumps(rec, default=str) for rec in store.export_project(args.project)]
    text = "\n".join(lines) + "\n"
    if args.out == "-":
        sys.stdout.write(text)
    else:
        try:
            Path(args.out).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise unwritable(args.out, exc) from exc
        print(f"wrote {len(lines) - 1} records of {args.project} to {args.out}", file=sys.stderr)
    return 0


def _import(args: argparse.Namespace) -> int:
    try:
        raw = Path(args.file).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InvalidArgument(f"cannot read {args.file}: {exc}", code="unreadable_file") from None
    except UnicodeDecodeError:
        raise InvalidArgument(
            f"{args.file} is not UTF-8 text (a compressed archive? decompress it first)",
            code="invalid_archive",
        ) from None
    if not raw:
        raise InvalidArgument(f"{args.file} is empty", code="invalid_archive")
    header = _read_json(raw[0], "the archive header")
    if not isinstance(header, dict) or header.get("earthmem_memory_archive") != ARCHIVE_VERSION:
        raise InvalidArgument(
            f"{args.file} is not an earthmem memory archive (version {ARCHIVE_VERSION})",
            code="invalid_archive",
        )
    records = [_read_json(line, "an archive record") for line in raw[1:] if line.strip()]
    counts = _store(args, args.to).import_records(records, dry_run=args.dry_run)
    print(json.dumps({"dry_run": args.dry_run, "project": header.get("project"), **counts}))
    return 0
