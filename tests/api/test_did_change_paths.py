"""did_change's per-request shortcuts give what the general paths give (session 14).

* the fast route writes the bytes ``JSONResponse`` would send (:func:`api.jsonbody.dump_json`);
* a band's and its flag's slot alignment is remembered per snapshot and block pair, and a new
  snapshot (new column arrays) is aligned afresh;
* the neighbours' deltas of a cell inside its block are read as one patch, the same lists
  as the one-at-a-time loop (which block-edge cells keep);
* receipts: the signature through the binding, the request id without a ``UUID`` object.
"""

from __future__ import annotations

import json
import re
import shutil
import uuid
from typing import Any

import numpy as np
import pytest
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from api.context import ServiceContext
from api.dispatch import run
from api.jsonbody import dump_json, dump_plain_json
from api.queries._common import parse_cell_arg
from api.queries.cell import SlotAlignment, _align, read_cell, slot_alignment
from api.queries.change import _neighbour_deltas_loop, neighbour_deltas_of
from api.receipts import Signer, _request_id, verify_answer
from api.rest import create_app
from store import address
from store.memo import BoundedMemo


@pytest.mark.parametrize(
    "value",
    [
        {"a": 1, "b": [1.5, -0.0, 1e-7, 1e16, 123456789.125], "c": None, "d": True},
        {"text": "Zürich – 東京 \u2028", "nested": {"x": [{"y": "z"}]}},
        [],
        "plain",
    ],
)
def test_dump_json_is_what_jsonresponse_renders(value: Any) -> None:
    assert dump_json(value) == JSONResponse(value).body


def test_dump_json_refuses_nan_as_jsonresponse_does() -> None:
    with pytest.raises(ValueError, match="JSON compliant"):
        JSONResponse({"x": float("nan")})
    with pytest.raises(ValueError, match="JSON compliant"):
        dump_json({"x": float("nan")})


def test_fast_route_sends_jsonresponse_head_and_body(tiny_store: Any, clearing_cell: str) -> None:
    with TestClient(create_app(tiny_store.data, mount_mcp=False)) as client:
        traj = client.post("/v1/trajectory", json={"cell": clearing_cell, "band": "ndvi"}).json()
        clear = [p["tslot"] for p in traj["points"] if p["clear"]]
        body = {"cell": clearing_cell, "band": "ndvi", "window": [clear[0], clear[-1]]}
        resp = client.post("/v1/did_change", content=json.dumps(body).encode())
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "application/json"
    assert int(resp.headers["content-length"]) == len(resp.content)
    doc = resp.json()
    assert resp.content == JSONResponse(doc).body
    assert verify_answer(doc).ok


# --------------------------------------------------------------------------- slot alignment


def _slots(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.unique(rng.integers(0, 60, n)).astype(np.int64)


def test_slot_alignment_places_values_as_align_does() -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        a_t, b_t = _slots(rng, int(rng.integers(0, 12))), _slots(rng, int(rng.integers(0, 12)))
        if rng.random() < 0.3:
            b_t = a_t.copy()
        a_v = rng.normal(size=a_t.size)
        b_v = rng.integers(0, 4, b_t.size).astype(np.int64)
        got = SlotAlignment(a_t, b_t)
        assert (got.a_at is None) == got.same  # no index arrays kept for equal slots
        t, values, flag = got.place(a_v, b_v)
        rt, rv, rf = _align(a_t, a_v, b_t, b_v)
        assert np.array_equal(t, rt)
        assert np.array_equal(values, rv, equal_nan=True)
        assert np.array_equal(flag, rf)


def test_slot_alignment_memo_is_keyed_and_checks_its_arrays() -> None:
    memo = BoundedMemo(8)
    a_t = np.array([1, 3, 5], np.int64)
    b_t = np.array([1, 2, 5], np.int64)
    first = slot_alignment(memo, ("snap1", "indices.ndvi", 0, 0), a_t, b_t)
    assert slot_alignment(memo, ("snap1", "indices.ndvi", 0, 0), a_t, b_t) is first
    # another snapshot: its own entry
    other = slot_alignment(memo, ("snap2", "indices.ndvi", 0, 0), a_t, b_t)
    assert other is not first
    assert len(memo) == 2
    # the same key with new arrays (a column read again, other slots): aligned afresh
    a2 = np.array([1, 3, 5, 7], np.int64)
    again = slot_alignment(memo, ("snap1", "indices.ndvi", 0, 0), a2, b_t)
    assert again is not first
    assert np.array_equal(again.t, [1, 2, 3, 5, 7])
    assert slot_alignment(memo, ("snap1", "indices.ndvi", 0, 0), a2, b_t) is again


def test_a_new_snapshot_is_aligned_afresh(
    tiny_store: Any, tmp_path: Any, clearing_cell: str
) -> None:
    """A value written at a slot the band did not have: the live context (its alignment memo
    filled at the old snapshot) reads the new snapshot as a fresh context does."""
    from store.cube import CubeWriter

    data = tmp_path / "data"
    shutil.copytree(tiny_store.data, data, symlinks=True)
    live = ServiceContext(data, signer=Signer.generate(), tip_check_seconds=0.0)
    g = address.decode(clearing_cell)
    before_reader = live.reader()
    before = read_cell(live, before_reader, "indices.ndvi", g.lat_q, g.lng_q)
    assert len(live.alignments) >= 1
    col = live.column(before_reader, "indices.ndvi", g.lat_q, g.lng_q)
    t_new = next(t for t in range(int(col.tslots[0]) + 1, 100_000) if t not in set(col.tslots))
    CubeWriter(data).write_region(
        "indices.ndvi",
        [t_new],
        g.lat_q,
        g.lng_q,
        np.full((1, 1, 1), 0.123, np.float32),
        partition_key="test",
    )
    reader = live.reader()
    assert reader.snapshot_id != before_reader.snapshot_id
    after = read_cell(live, reader, "indices.ndvi", g.lat_q, g.lng_q)
    fresh_ctx = ServiceContext(data, signer=Signer.generate())
    fresh = read_cell(fresh_ctx, fresh_ctx.reader(), "indices.ndvi", g.lat_q, g.lng_q)
    assert t_new in after.tslots.tolist()
    assert t_new not in before.tslots.tolist()
    for name in ("tslots", "values", "flag", "clear", "observed"):
        assert np.array_equal(getattr(after, name), getattr(fresh, name), equal_nan=True), name


# --------------------------------------------------------------------------- neighbours


def test_neighbour_deltas_patch_equals_the_loop(tiny_store: Any, clearing_cell: str) -> None:
    ctx = ServiceContext(tiny_store.data, signer=Signer.generate())
    traj = run(ctx, "trajectory", {"cell": clearing_cell, "band": "ndvi"})
    slots = [p.tslot for p in traj.points if p.value is not None]
    t0, t1 = slots[0], slots[-1]
    reader = ctx.reader()
    g = address.decode(clearing_cell)
    col = ctx.column(reader, "indices.ndvi", g.lat_q, g.lng_q)
    side_y, side_x = col.values.shape[1], col.values.shape[2]
    # the cells around the block's first row and column (edges) and some inside it
    ys = [col.lat_q0 - 1, col.lat_q0, col.lat_q0 + 1, col.lat_q0 + side_y // 2, g.lat_q]
    xs = [col.lng_q0 - 1, col.lng_q0, col.lng_q0 + 1, col.lng_q0 + side_x // 2, g.lng_q]
    seen_deltas = 0
    for la in ys:
        for ln in xs:
            cell = parse_cell_arg(address.format_cell(address.q_to_raw(la, ln)))
            got = neighbour_deltas_of(ctx, reader, "indices.ndvi", cell, t0, t1)
            want = _neighbour_deltas_loop(ctx, reader, "indices.ndvi", cell, t0, t1)
            assert got == want
            assert [np.float64(d).tobytes() for d in got[0]] == [
                np.float64(d).tobytes() for d in want[0]
            ]
            seen_deltas += len(got[0])
    assert seen_deltas > 0


# --------------------------------------------------------------------------- receipts


def test_signature_through_the_binding_is_pynacls() -> None:
    signer = Signer.generate()
    for message in (b"", b"\x00" * 32, bytes(range(200))):
        assert signer.sign(message) == signer.signing_key.sign(message).signature


def test_request_ids_are_uuid4_hex() -> None:
    ids = {_request_id() for _ in range(2000)}
    assert len(ids) == 2000
    for rid in list(ids)[:200]:
        u = uuid.UUID(hex=rid)
        assert rid == u.hex
        assert len(rid) == 32
        assert u.version == 4
        assert u.variant == uuid.RFC_4122


# --------------------------------------------------------------------------- plain JSON


_json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.floats(min_value=-1e-3, max_value=1e-3, allow_nan=False)
    | st.text(max_size=12)
    | st.sampled_from(["1e-7", "0.00001", "NaN", "f2:3e4a:x", "\u2028", '\x1f\\"'])
)
_json_doc = st.recursive(
    _json_leaf,
    lambda kids: (
        st.lists(kids, max_size=5) | st.dictionaries(st.text(max_size=6), kids, max_size=5)
    ),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(_json_doc)
def test_dump_plain_json_is_dump_json(doc: Any) -> None:
    assert dump_plain_json(doc) == dump_json(doc)


@pytest.mark.parametrize("x", [1e-7, 1e-5, 2.5e-5, 9.99e-5, 1e-4, 1e16, -3e-9, 5e-324, -0.0])
def test_dump_plain_json_floats_near_the_notation_switches(x: float) -> None:
    assert dump_plain_json({"v": [x]}) == dump_json({"v": [x]})


def test_dump_plain_json_refuses_what_dump_json_refuses() -> None:
    for bad in ({"x": float("nan")}, {"x": float("inf")}):
        with pytest.raises(ValueError, match="JSON compliant"):
            dump_plain_json(bad)
    with pytest.raises(UnicodeEncodeError):
        dump_plain_json({"x": "\ud800"})


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=24) | st.text(alphabet="0123456789e-.x", max_size=16).map(str.encode))
def test_small_exponent_test_is_the_regex(out: bytes) -> None:
    from api.jsonbody import _DIFFERS, _small_exponent

    exponent = re.compile(_DIFFERS.pattern.split(b"|")[0])  # the regex's small-float branch
    assert _small_exponent(out) == (exponent.search(out) is not None)
