"""``earthmem memory reembed``: items written before an embedder was configured get one;
a second run embeds nothing; without an embedder it is a one-line error (status 2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from api.context import ServiceContext
from api.dispatch import call_primitive
from api.memory.auth import issue_token
from api.receipts import Signer
from cli.main import main
from store.memory import open_store


def _write_without_embedder(data: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.delenv("EARTHMEM_EMBEDDER", raising=False)
    ctx = ServiceContext(
        data, signer=Signer.generate(), memory_url=f"sqlite:///{data / 'memory.sqlite'}"
    )
    token = issue_token(ctx.memory(), "ranchi", ("read", "write"), actor="agent:test")[0]
    ids = []
    for title in ("Paddy fields flooded", "Wildfire near the village", "Cropland parched"):
        body = {
            "type": "observation",
            "title": title,
            "statement": f"{title} now",
            "tags": ["field"],
            "where": {"lat": 23.35, "lng": 85.33},
        }
        answer: Any = call_primitive(ctx, "memory_create", body, token=token)
        ids.append(str(answer["result"]["item"]["id"]))
    ctx.memory().close()
    return ids


def test_reembed_fills_in_missing_embeddings_once(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    recall_model_dir: Path,
) -> None:
    ids = _write_without_embedder(tmp_path, monkeypatch)
    url = f"sqlite:///{tmp_path / 'memory.sqlite'}"
    store = open_store(url)
    head = store.head("ranchi")
    assert all(i.embedding is None for i in store.get_many("ranchi", ids))
    monkeypatch.setenv("EARTHMEM_EMBEDDER", str(recall_model_dir))
    argv = ["memory", "reembed", "--memory-url", url, "--batch", "2"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["embedded"] == 3
    assert report["failed"] == 0
    assert report["projects"]["ranchi"] == {"embedded": 3, "failed": 0}
    items = store.get_many("ranchi", ids)
    assert all(i.embedding is not None and len(i.embedding) == 48 for i in items)
    assert all(i.version == 1 for i in items)
    assert store.head("ranchi") == head  # not a write of the items
    assert main(argv) == 0  # idempotent
    assert json.loads(capsys.readouterr().out)["embedded"] == 0
    store.close()


def test_reembed_without_an_embedder_is_a_typed_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("EARTHMEM_EMBEDDER", raising=False)
    url = f"sqlite:///{tmp_path / 'memory.sqlite'}"
    assert main(["memory", "reembed", "--memory-url", url]) == 2
    err = capsys.readouterr().err
    assert "EARTHMEM_EMBEDDER" in err
    assert len(err.strip().splitlines()) == 1
