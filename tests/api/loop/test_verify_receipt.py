"""verify_receipt: the server's check equals `earthmem verify`; tampering is valid false, not an error."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.context import ServiceContext
from api.dispatch import call_primitive, run
from api.errors import ApiError
from api.receipts import Signer
from api.rest import create_app
from cli.main import main


@pytest.fixture
def vctx(tmp_path: Path) -> ServiceContext:
    return ServiceContext(tmp_path, signer=Signer.generate())


@pytest.fixture
def saved(vctx: ServiceContext) -> dict[str, Any]:
    return json.loads(json.dumps(call_primitive(vctx, "locate", {"lat": 23.36, "lng": 85.33})))


def _cli(tmp_path: Path, doc: Any, *extra: str) -> int:
    path = tmp_path / "answer.json"
    path.write_text(json.dumps(doc))
    return main(["verify", str(path), *extra])


def test_a_saved_answer_verifies_as_the_cli_says(
    vctx: ServiceContext, saved: dict[str, Any], tmp_path: Path
) -> None:
    ans = run(vctx, "verify_receipt", {"answer": saved})
    assert ans.valid
    assert ans.reason == "ok"
    assert ans.signed_by_this_server
    assert ans.primitive == "locate"
    assert ans.checked_snapshot_id == "lattice:cell64"
    assert _cli(tmp_path, saved) == 0
    # an intent answer carries the signed answer under "result"
    wrapped = {"status": "answered", "result": saved}
    assert run(vctx, "verify_receipt", {"answer": wrapped}).valid
    # a trusted key: provenance too
    key = vctx.signer.public_key.hex()
    assert run(vctx, "verify_receipt", {"answer": saved, "public_key": key}).key_trusted
    other = Signer.generate().public_key.hex()
    bad = run(vctx, "verify_receipt", {"answer": saved, "public_key": other})
    assert not bad.valid
    assert "trusted" in bad.reason
    assert _cli(tmp_path, saved, "--key", other) == 1


def test_tampered_answers_verify_false(
    vctx: ServiceContext, saved: dict[str, Any], tmp_path: Path
) -> None:
    for path, value in (
        (("lat",), 1.0),
        (("receipt", "snapshot_id"), "other"),
        (("receipt", "signature"), "0" * 128),
        (("receipt", "version"), 2),
    ):
        doc = copy.deepcopy(saved)
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        ans = run(vctx, "verify_receipt", {"answer": doc})
        assert not ans.valid, path
        assert ans.reason != "ok"
        assert not ans.signed_by_this_server
        assert _cli(tmp_path, doc) == 1


def test_malformed_input_is_typed(vctx: ServiceContext, saved: dict[str, Any]) -> None:
    def code(args: dict[str, Any]) -> str:
        with pytest.raises(ApiError) as info:
            run(vctx, "verify_receipt", args)
        return info.value.code

    assert code({"answer": {"lat": 1}}) == "invalid_answer"
    assert code({"answer": {"receipt": "x"}}) == "invalid_answer"
    assert code({"answer": [1, 2]}) == "invalid_argument"
    assert code({}) == "invalid_argument"
    assert code({"answer": saved, "public_key": "zz"}) == "invalid_key"


def test_over_rest(tmp_path: Path, saved: dict[str, Any]) -> None:
    client = TestClient(create_app(tmp_path), raise_server_exceptions=False)
    ok = client.post("/v1/verify_receipt", json={"answer": saved})
    assert ok.status_code == 200, ok.text
    assert ok.json()["valid"] is True
    assert ok.json()["signed_by_this_server"] is False  # another key than this server's
    doc = copy.deepcopy(saved)
    doc["lng"] = 0.0
    tampered = client.post("/v1/verify_receipt", json={"answer": doc})
    assert tampered.status_code == 200
    assert tampered.json()["valid"] is False
    bad = client.post("/v1/verify_receipt", json={"answer": {}})
    assert bad.status_code == 422
    assert bad.json()["error"]["code"] == "invalid_answer"
