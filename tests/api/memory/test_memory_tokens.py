"""Write primitives may take their token from the process's memo: revocation still counts at once.

The memo saves the token read of each write; the write's own transaction reads the
token again, so a token revoked (by another process, here a second store on the same
database, as ``earthmem token revoke`` would) stores nothing from the next write on.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from api.context import ServiceContext
from api.dispatch import call_primitive, describe_error
from api.errors import ApiError
from api.memory.auth import issue_token
from api.receipts import Signer
from store.memory import open_store


def _note(k: int) -> dict[str, Any]:
    return {
        "type": "observation",
        "title": f"fields under water #{k}",
        "statement": "the paddy fields beside the river were under water",
        "tags": ["flood"],
        "where": {"lat": 24.0 + k * 1e-3, "lng": 89.0},
    }


@pytest.fixture
def ctx(tmp_path: Path) -> ServiceContext:
    data = tmp_path / "data"
    data.mkdir()
    return ServiceContext(
        data, signer=Signer.generate(), memory_url=f"sqlite:///{tmp_path / 'memory.sqlite'}"
    )


def _refused(ctx: ServiceContext, name: str, args: dict[str, Any], token: str) -> tuple[int, str]:
    with pytest.raises(ApiError) as info:
        call_primitive(ctx, name, args, token=token)
    described = describe_error(info.value)
    assert described is not None
    return described[0], described[1]["error"]["code"]


def _revoke_elsewhere(ctx: ServiceContext, token_id: str) -> None:
    other = open_store(ctx.memory().url)  # another connection pool: another process's view
    try:
        assert other.revoke_token(token_id, dt.datetime.now(dt.UTC))
    finally:
        other.close()


def test_a_revoked_token_stores_nothing_from_the_next_write_on(ctx: ServiceContext) -> None:
    token, record = issue_token(ctx.memory(), "ranchi", ("read", "write"))
    first = call_primitive(ctx, "memory_create", _note(1), token=token)["result"]["item"]
    call_primitive(ctx, "memory_create", _note(2), token=token)  # the token is remembered now
    head = ctx.memory().head("ranchi")

    _revoke_elsewhere(ctx, record.id)
    assert _refused(ctx, "memory_create", _note(3), token) == (401, "token_revoked")
    assert _refused(ctx, "memory_create", _note(4), token) == (401, "token_revoked")
    assert (
        _refused(
            ctx,
            "memory_relate",
            {"src_id": first["id"], "dst_id": first["id"], "kind": "related"},
            token,
        )[0]
        == 401
    )
    assert ctx.memory().head("ranchi") == head  # nothing stored

    # a write primitive that reads before it writes reads the token first
    token2, record2 = issue_token(ctx.memory(), "ranchi", ("read", "write"))
    call_primitive(ctx, "memory_create", _note(5), token=token2)
    _revoke_elsewhere(ctx, record2.id)
    gone = {**_note(7), "supersedes_id": "mem_nothere"}
    assert _refused(ctx, "memory_create", gone, token2) == (401, "token_revoked")  # not a 404
    update = {**_note(6), "supersedes_id": first["id"]}
    assert _refused(ctx, "memory_create", update, token2) == (401, "token_revoked")
    assert ctx.memory().head("ranchi").seq == head.seq + 1  # token2's first write only


def test_a_remembered_token_still_writes_only_its_own_project(ctx: ServiceContext) -> None:
    token, _ = issue_token(ctx.memory(), "ranchi", ("read", "write"))
    reader, _ = issue_token(ctx.memory(), "ranchi", ("read",))
    call_primitive(ctx, "memory_create", _note(1), token=token)
    call_primitive(ctx, "memory_create", _note(2), token=token)  # remembered
    assert _refused(ctx, "memory_create", _note(3), reader) == (403, "insufficient_permission")
    assert _refused(ctx, "memory_create", {**_note(4), "project": "elsewhere"}, token) == (
        403,
        "project_mismatch",
    )
    assert ctx.memory().head("elsewhere").seq == 0
