"""The intent router (mapping, envelope, ignored fields) and the intent / verify CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from api.dispatch import PRIMITIVES, Primitive, describe_error, run_intent
from api.errors import ApiError, InvalidArgument
from api.intent import INTENT_TYPES
from api.receipts import Signer, sign_answer
from cli.main import main
from store import address
from tests.api.adapter_helpers import bracket, clearing_cell

CELL = address.encode(23.36, 85.33)


class _AnyIn(BaseModel):
    model_config = ConfigDict(extra="allow")


class _StrictIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cell: str
    band: str
    window: list[int]


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow")


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """Replace the primitives by recorders (real ones restored afterwards)."""
    seen: list[tuple[str, dict[str, Any]]] = []

    def recorder(name: str) -> Any:
        def fn(ctx: Any, args: BaseModel) -> BaseModel:
            seen.append((name, args.model_dump()))
            return _Out.model_validate({"primitive": name})

        return fn

    for name in (
        "where_is",
        "what_is_here",
        "is_like",
        "find_similar",
        "confirm",
        "ask",
        "area_over_time",
    ):
        monkeypatch.setitem(
            PRIMITIVES, name, Primitive(name, _AnyIn, _Out, recorder(name), name, "")
        )
    monkeypatch.setitem(
        PRIMITIVES,
        "did_change",
        Primitive("did_change", _StrictIn, _Out, recorder("did_change"), "", ""),
    )
    return seen


@pytest.mark.parametrize("payload", [{}, {"cell": CELL, "k": 3}, {"type": None, "a": "x"}])
def test_missing_type_returns_the_envelope(payload: dict[str, Any]) -> None:
    env = run_intent(None, payload)
    assert env["status"] == "needs_intent_type"
    assert env["valid_types"] == list(INTENT_TYPES)
    assert set(env["intents"]) == set(INTENT_TYPES)
    assert env["intents"]["find_like"] == {
        "needs": ["key"],
        "optional": ["k", "filter"],
        "aliases": {"cell": "key", "cell64": "key"},
        "primitive": "find_similar",
        "available": "find_similar" in PRIMITIVES,
        "answers": env["intents"]["find_like"]["answers"],
    }
    assert env["intents"]["ask"]["optional"] == ["place", "cell", "lat", "lng"]
    assert env["ignored_fields"] == sorted(
        k for k, v in payload.items() if k != "type" and v is not None
    )
    assert env["plan"] == []
    assert env["result"] is None


@pytest.mark.parametrize("kind", ["teleport", "DID_CHANGE", 7, ["did_change"]])
def test_unknown_type_returns_the_envelope(kind: Any) -> None:
    env = run_intent(None, {"type": kind, "cell": CELL})
    assert env["status"] == "needs_intent_type"
    assert env["received_type"] == (kind if isinstance(kind, str | int) else None)
    assert "unknown intent type" in env["message"]


def test_did_change_maps_fields_and_lists_ignored(calls: list[tuple[str, dict[str, Any]]]) -> None:
    answer = run_intent(
        None,
        {
            "type": "did_change",
            "cell": CELL,
            "band": "indices.ndvi",
            "window": [1, 2],
            "k": 4,
            "description": "x",
            "bogus": True,
            "a": None,
        },
    )
    args = {"cell": CELL, "band": "indices.ndvi", "window": [1, 2]}
    assert calls == [("did_change", args)]
    assert answer["status"] == "answered"
    assert answer["type"] == "did_change"
    assert answer["plan"] == [{"primitive": "did_change", "args": args}]
    assert answer["result"] == {"primitive": "did_change"}
    assert answer["ignored_fields"] == ["bogus", "description", "k"]


def test_find_like_runs_find_similar_with_key_aliases(
    calls: list[tuple[str, dict[str, Any]]],
) -> None:
    flt = {"band": "indices.ndvi", "op": "gt", "value": 0.5}
    answer = run_intent(
        None, {"type": "find_like", "key": CELL, "k": 3, "filter": flt, "band": "s1.vv"}
    )
    assert calls[-1] == ("find_similar", {"key": CELL, "k": 3, "filter": flt})
    assert answer["plan"][0]["primitive"] == "find_similar"
    assert answer["ignored_fields"] == ["band"]
    answer = run_intent(None, {"type": "find_like", "cell": CELL})
    assert calls[-1] == ("find_similar", {"key": CELL})
    assert answer["ignored_fields"] == []
    answer = run_intent(None, {"type": "find_like", "key": CELL, "cell64": "other"})
    assert calls[-1] == ("find_similar", {"key": CELL})
    assert answer["ignored_fields"] == ["cell64"]


def test_other_rows_map_their_fields(calls: list[tuple[str, dict[str, Any]]]) -> None:
    bbox = {"min_lat": 23.35, "min_lng": 85.32, "max_lat": 23.36, "max_lng": 85.33}
    run_intent(
        None,
        {
            "type": "area_over_time",
            "bbox": bbox,
            "start_date": "2024-01-01",
            "end_date": "2024-12-31",
            "index": "ndwi",
            "max_scenes": 6,
            "cell": CELL,
        },
    )
    assert calls[-1] == (
        "area_over_time",
        {
            "bbox": bbox,
            "start_date": "2024-01-01",
            "end_date": "2024-12-31",
            "index": "ndwi",
            "max_scenes": 6,
        },
    )
    run_intent(None, {"type": "is_like", "a": CELL, "b": CELL, "window": [1, 2]})
    assert calls[-1] == ("is_like", {"a": CELL, "b": CELL})
    claim = {"band": "indices.ndvi", "op": "lt", "value": 0.3}
    run_intent(None, {"type": "confirm", "claim": claim, "cell": CELL})
    assert calls[-1] == ("confirm", {"claim": claim, "cell": CELL})
    run_intent(None, {"type": "where_is", "description": "Kanke Lake", "place": "ignored"})
    assert calls[-1] == ("where_is", {"description": "Kanke Lake"})
    run_intent(None, {"type": "what_is_here", "place": "Kanke"})
    assert calls[-1] == ("what_is_here", {"place": "Kanke"})
    run_intent(None, {"type": "ask", "description": "did it change?", "lat": 23.36, "lng": 85.33})
    assert calls[-1] == ("ask", {"description": "did it change?", "lat": 23.36, "lng": 85.33})


@pytest.mark.parametrize(
    ("payload", "missing"),
    [
        ({"type": "did_change", "cell": CELL}, ["band", "window"]),
        (
            {"type": "area_over_time", "start_date": "2024-01-01", "end_date": "2024-02-01"},
            ["geometry | bbox | areas"],
        ),
        ({"type": "what_is_here", "k": 3}, ["cell | place | description"]),
        ({"type": "find_like", "k": 3}, ["key"]),
        ({"type": "ask", "description": "q", "lat": 1.0}, ["lng"]),
    ],
)
def test_missing_fields_are_invalid_argument(
    calls: list[tuple[str, dict[str, Any]]], payload: dict[str, Any], missing: list[str]
) -> None:
    with pytest.raises(InvalidArgument) as info:
        run_intent(None, payload)
    assert info.value.code == "missing_fields"
    assert info.value.details["missing"] == missing
    assert calls == []


def test_unserved_primitive_is_not_available(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(PRIMITIVES, "where_is", raising=False)
    with pytest.raises(ApiError) as info:
        run_intent(None, {"type": "where_is", "description": "Ranchi"})
    assert info.value.code == "not_available"
    assert info.value.status == 501
    assert info.value.details["available_primitives"] == sorted(PRIMITIVES)


def test_primitive_validation_errors_map_to_422(calls: list[tuple[str, dict[str, Any]]]) -> None:
    with pytest.raises(ValidationError) as info:
        run_intent(None, {"type": "did_change", "cell": CELL, "band": "b", "window": "soon"})
    status, body = describe_error(info.value)  # type: ignore[misc]
    assert status == 422
    assert body["error"]["code"] == "invalid_argument"
    assert body["error"]["details"]["errors"][0]["loc"] == ["window"]


def test_payload_must_be_an_object() -> None:
    with pytest.raises(InvalidArgument):
        run_intent(None, ["did_change"])  # type: ignore[arg-type]


# --------------------------------------------------------------------------- CLI: verify


def _saved_answer(tmp_path: Path) -> tuple[Path, Signer]:
    signer = Signer.generate()
    doc = sign_answer(
        signer, "did_change", {"cell": CELL}, {"cell": CELL, "delta": -0.5}, [CELL], [], "s1"
    )
    path = tmp_path / "answer.json"
    path.write_text(json.dumps(doc, indent=2))
    return path, signer


def test_verify_passes_then_fails_after_tampering(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, signer = _saved_answer(tmp_path)
    assert main(["verify", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ok")
    assert out.count("\n") == 1
    assert main(["verify", str(path), "--key", signer.public_key.hex()]) == 0
    assert "trusted key" in capsys.readouterr().out
    assert main(["verify", str(path), "--key", Signer.generate().public_key.hex()]) == 1
    capsys.readouterr()
    path.write_text(path.read_text().replace("-0.5", "-0.6"))
    assert main(["verify", str(path)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAILED")
    assert "answer digest" in out


def test_verify_reads_an_intent_answer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = _saved_answer(tmp_path)
    wrapped = {
        "status": "answered",
        "type": "did_change",
        "plan": [],
        "result": json.loads(path.read_text()),
    }
    path.write_text(json.dumps(wrapped))
    assert main(["verify", str(path)]) == 0


@pytest.mark.parametrize(
    ("content", "extra"),
    [("{not json", []), ('{"a": 1}', ["--key", "abcd"]), (None, [])],
)
def test_verify_bad_input_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, extra: list[str]
) -> None:
    path = tmp_path / "x.json"
    if content is not None:
        path.write_text(content)
    assert main(["verify", str(path), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("earthmem: error")
    assert err.count("\n") == 1


def test_verify_without_receipt_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"a": 1}')
    assert main(["verify", str(path)]) == 1
    assert capsys.readouterr().out == "FAILED: no receipt\n"


# --------------------------------------------------------------------------- CLI: intent


def test_intent_cli_envelope_and_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["intent", '{"k": 3}', "--data", str(tmp_path)]) == 0
    env = json.loads(capsys.readouterr().out)
    assert env["status"] == "needs_intent_type"
    assert env["ignored_fields"] == ["k"]
    for argv in (
        ["intent", "{nope", "--data", str(tmp_path)],
        ["intent", "[1]", "--data", str(tmp_path)],
        ["intent", '{"type": "did_change"}', "--data", str(tmp_path)],
        ["intent", "{}", "--data", str(tmp_path / "missing")],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("earthmem: error ["), err
        assert err.count("\n") == 1, err


def test_data_dir_defaults_to_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("EARTHMEM_DATA", str(tmp_path / "nowhere"))
    assert main(["intent", "{}"]) == 2
    assert "nowhere" in capsys.readouterr().err


# --------------------------------------------------------------------------- real primitives (tiny sample)


@pytest.fixture(scope="module")
def store(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue("tiny_store")


def test_intent_cli_did_change_at_the_cleared_patch_then_verify(
    store: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cell = clearing_cell(store.manifest)
    assert (
        main(
            ["intent", json.dumps({"type": "trajectory", "cell": cell}), "--data", str(store.data)]
        )
        == 0
    )
    assert (
        json.loads(capsys.readouterr().out)["status"] == "needs_intent_type"
    )  # not an intent type

    from api.context import ServiceContext

    traj = PRIMITIVES["trajectory"]
    series = traj.fn(ServiceContext(store.data), traj.input_model(cell=cell, band="indices.ndvi"))
    window = bracket(series.model_dump()["valid_tslots"], store.event("forest_clearing")["start"])
    payload = {
        "type": "did_change",
        "cell": cell,
        "band": "indices.ndvi",
        "window": window,
        "k": 10,
        "place": "Pithoria",
    }
    assert main(["intent", json.dumps(payload), "--data", str(store.data)]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["plan"] == [
        {
            "primitive": "did_change",
            "args": {"cell": cell, "band": "indices.ndvi", "window": window},
        }
    ]
    assert answer["ignored_fields"] == ["k", "place"]
    assert answer["result"]["significant"] is True
    assert answer["result"]["delta"] < -0.3

    saved = tmp_path / "answer.json"
    saved.write_text(json.dumps(answer["result"]))
    assert main(["verify", str(saved)]) == 0
    capsys.readouterr()
    saved.write_text(json.dumps({**answer["result"], "delta": answer["result"]["delta"] + 0.1}))
    assert main(["verify", str(saved)]) == 1


def test_find_like_intent_runs_find_similar_on_the_store(store: Any) -> None:
    from api.context import ServiceContext

    cell = clearing_cell(store.manifest)
    answer = run_intent(
        ServiceContext(store.data), {"type": "find_like", "cell": cell, "k": 5, "window": [1, 2]}
    )
    assert answer["plan"][0]["primitive"] == "find_similar"
    assert answer["ignored_fields"] == ["window"]
    assert answer["result"]["returned_k"] == 5
