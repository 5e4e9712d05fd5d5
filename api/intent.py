"""The intent router: one object ``{"type": ..., <fields>}`` mapped onto a primitive.

An agent states *what it wants* in one object; the router picks the primitive,
maps the fields, and (in :func:`api.dispatch.run_intent`) runs it in the same
call, returning the answer together with the plan it ran. A missing or unknown
``type`` is not an error: the answer is a ``needs_intent_type`` envelope that
lists the valid types and each type's fields. Fields that belong to another
intent (or to none) are ignored and named in ``ignored_fields``.

This module is the table and the mapping only (no dispatch, no primitives):
:func:`plan_intent` turns a payload into an :class:`IntentPlan` or an envelope.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from api.errors import ApiError, InvalidArgument
from api.models.common import CELL_SCHEMA, KEY_SCHEMA, BBox, TSlot

__all__ = [
    "INTENTS",
    "INTENT_TYPES",
    "IntentAnswer",
    "IntentPlan",
    "IntentRequest",
    "IntentSpec",
    "PlanStep",
    "intent_table",
    "plan_intent",
]


@dataclass(frozen=True)
class IntentSpec:
    """One row of the intent table."""

    name: str
    """The intent ``type``."""
    primitive: str
    """The primitive the plan runs."""
    needs: tuple[str, ...]
    """Fields that must all be present."""
    one_of: tuple[str, ...] = ()
    """Fields of which at least one must be present (empty: no such group)."""
    optional: tuple[str, ...] = ()
    """Fields read when present."""
    aliases: Mapping[str, str] = field(default_factory=dict)
    """Accepted alternative names: alias -> field (used when the field is absent)."""
    answers: str = ""
    """What the answer holds."""

    @property
    def fields(self) -> tuple[str, ...]:
        """Every field this intent reads (without aliases)."""
        return (*self.needs, *(f for f in self.one_of if f not in self.needs), *self.optional)

    def describe(self, served: Collection[str]) -> dict[str, Any]:
        """The row as sent in the ``needs_intent_type`` envelope (``served``: primitive names)."""
        row: dict[str, Any] = {
            "needs": list(self.needs),
            "optional": list(self.optional),
            "primitive": self.primitive,
            "available": self.primitive in served,
            "answers": self.answers,
        }
        if self.one_of:
            row["one_of"] = list(self.one_of)
        if self.aliases:
            row["aliases"] = dict(self.aliases)
        return row


INTENTS: dict[str, IntentSpec] = {
    spec.name: spec
    for spec in (
        IntentSpec(
            "where_is",
            "where_is",
            needs=("description",),
            answers="cell64 of a named place, its bounds, confidence and alternatives",
        ),
        IntentSpec(
            "what_is_here",
            "what_is_here",
            needs=(),
            one_of=("cell", "place", "description"),
            answers="what the store holds at a location: latest values, recent changes, land cover",
        ),
        IntentSpec(
            "is_like",
            "is_like",
            needs=("a", "b"),
            answers="cosine similarity of the two cells' embeddings",
        ),
        IntentSpec(
            "did_change",
            "did_change",
            needs=("cell", "band", "window"),
            answers="values at both tslots, the delta, and whether it is significant",
        ),
        IntentSpec(
            "find_like",
            "find_similar",
            needs=("key",),
            optional=("k", "filter"),
            aliases={"cell": "key", "cell64": "key"},
            answers="nearest cells by embedding (full parameter set: earthmem_find_similar)",
        ),
        IntentSpec(
            "confirm",
            "confirm",
            needs=("claim", "cell"),
            answers="verdict true/false/unknown and the facts it rests on",
        ),
        IntentSpec(
            "ask",
            "ask",
            needs=("description",),
            optional=("place", "cell", "lat", "lng"),
            answers="a free-text question about a place, answered by the intents it routes to",
        ),
        IntentSpec(
            "area_over_time",
            "area_over_time",
            needs=("start_date", "end_date"),
            one_of=("geometry", "bbox", "areas"),
            optional=("index", "max_scenes"),
            answers="an index over an area for each overpass, with spread, anomaly, trend and chart",
        ),
        IntentSpec(
            "recall",
            "recall",
            needs=("query",),
            optional=("near", "at", "asOf", "kinds", "limit", "compact"),
            answers="ranked memory items matching the query, place and time, with verdicts and "
            "a weak_match flag (needs a read token; full parameter set: earthmem_recall)",
        ),
        IntentSpec(
            "read_cell",
            "read_cell",
            needs=("cell",),
            optional=("bands", "tslot", "date", "as_of"),
            answers="'what is the NDVI here': bands' values at one cell (latest clear, or on a "
            "day), each with its fact id, date, clear flag and sources (many cells: "
            "earthmem_read_cells)",
        ),
        IntentSpec(
            "read_area",
            "read_area",
            needs=("band",),
            one_of=("geometry", "bbox"),
            optional=("date", "tslot", "max_cells", "as_of"),
            answers="one band over an area on one overpass day (date or tslot): the cells' "
            "values and their statistics",
        ),
        IntentSpec(
            "locate",
            "locate",
            needs=("lat", "lng"),
            answers="the cell64 at a coordinate, its bounds and its eight neighbours",
        ),
        IntentSpec(
            "coverage",
            "coverage",
            needs=(),
            one_of=("cell", "bbox", "geometry"),
            optional=("band", "start_date", "end_date", "map", "as_of"),
            answers="'what data is there': the bands holding data, their dates and clear "
            "counts per month (an area: a map of observation counts)",
        ),
        IntentSpec(
            "compare_same_doy",
            "compare_same_doy",
            needs=("band", "date"),
            one_of=("cell", "geometry", "bbox"),
            optional=("years", "as_of"),
            answers="'is this normal for the season': the value at a date against the same "
            "+-15 days of the other years (baseline median, range, robust z)",
        ),
        IntentSpec(
            "fact",
            "fact",
            needs=("fact_id",),
            answers="the fact a fact id names (cell, band, tslot, value, sources) and whether "
            "the current snapshot still holds it",
        ),
        IntentSpec(
            "verify_receipt",
            "verify_receipt",
            needs=("answer",),
            optional=("public_key",),
            answers="whether a saved answer's signed receipt checks (a tampered one: false)",
        ),
    )
}
"""The intent table (``type`` -> row)."""

INTENT_TYPES: tuple[str, ...] = tuple(INTENTS)
"""The valid intent types, in table order."""


class IntentRequest(BaseModel):
    """``earthmem_intent`` arguments: a tagged union on ``type``.

    Fields of other intents are ignored (and listed in ``ignored_fields``).
    This model documents the fields (OpenAPI, MCP input schema); the router
    reads the raw object, so a field of another intent never fails validation.
    """

    model_config = ConfigDict(extra="allow", strict=True)

    type: str | None = Field(
        None,
        description="Which intent: " + ", ".join(INTENT_TYPES) + ". Missing or unknown: "
        "the answer is a needs_intent_type envelope listing each type's fields.",
        json_schema_extra={"examples": list(INTENT_TYPES)},
    )
    description: str | None = Field(
        None,
        description="where_is: the place to resolve. ask: the question, verbatim. "
        "what_is_here: free text used as the place when `place` is absent.",
    )
    place: str | None = Field(None, description="what_is_here, ask: a place name to geocode.")
    cell: str | None = Field(
        None,
        description="cell64. Required by did_change, confirm and read_cell; one way to place "
        "coverage and compare_same_doy; optional for what_is_here and ask; find_like accepts "
        "it as an alias of `key`.",
        json_schema_extra=CELL_SCHEMA,
    )
    lat: float | None = Field(None, description="ask, locate: latitude, paired with `lng`.")
    lng: float | None = Field(None, description="ask, locate: longitude, paired with `lat`.")
    a: str | None = Field(
        None, description="is_like: cell64 of the first place.", json_schema_extra=CELL_SCHEMA
    )
    b: str | None = Field(
        None, description="is_like: cell64 of the second place.", json_schema_extra=CELL_SCHEMA
    )
    band: str | None = Field(
        None,
        description="did_change, read_area, compare_same_doy, coverage: the band, e.g. "
        '"indices.ndvi" (or "ndvi").',
    )
    bands: list[str] | None = Field(
        None, description='read_cell: bands to read, e.g. ["ndvi", "vh"] (default: all).'
    )
    date: str | None = Field(
        None, description="read_cell, read_area, compare_same_doy: the day, YYYY-MM-DD."
    )
    tslot: TSlot | None = Field(None, description="read_cell, read_area: the day slot (or date).")
    max_cells: int | None = Field(None, description="read_area: most cell values listed.")
    map: bool | None = Field(None, description="coverage: an area's observation-count PNG.")
    years: list[int] | None = Field(None, description="compare_same_doy: the years compared.")
    as_of: str | None = Field(
        None,
        description="read_cell, read_area, coverage, compare_same_doy: an RFC 3339 time or a "
        "snapshot id to answer from.",
    )
    fact_id: str | None = Field(None, description="fact: a fact id from any answer (f2:...).")
    answer: dict[str, Any] | None = Field(
        None, description="verify_receipt: a saved answer, receipt included."
    )
    public_key: str | None = Field(
        None, description="verify_receipt: the ed25519 public key (hex) to trust."
    )
    window: list[TSlot] | None = Field(
        None,
        description="did_change: [start, end] tslots (day slots since 1970-01-01 for "
        "S2/S1/indices); list valid ones with the trajectory primitive.",
    )
    key: str | None = Field(
        None,
        description="find_like: a cell64, or 'inline:[x, ...]' (a literal vector).",
        json_schema_extra=KEY_SCHEMA,
    )
    k: int | None = Field(None, description="find_like: how many neighbours (1..1000).")
    filter: dict[str, Any] | None = Field(
        None, description="find_like: a claim the returned cells must satisfy."
    )
    claim: dict[str, Any] | None = Field(
        None,
        description="confirm: {band, op, value, tslot? | window?, agg?}, e.g. "
        '{"band": "indices.ndvi", "op": "gt", "value": 0.4}.',
    )
    geometry: dict[str, Any] | None = Field(
        None,
        description="area_over_time, read_area, coverage, compare_same_doy: a GeoJSON Polygon "
        "or MultiPolygon.",
    )
    bbox: BBox = Field(
        None,
        description="area_over_time, read_area, coverage, compare_same_doy: {min_lat, min_lng, "
        "max_lat, max_lng} or a 4-list.",
    )
    areas: list[dict[str, Any]] | None = Field(
        None, description="area_over_time: up to 6 {id, geometry | bbox}, one chart line each."
    )
    start_date: str | None = Field(None, description="area_over_time, coverage: YYYY-MM-DD.")
    end_date: str | None = Field(None, description="area_over_time, coverage: YYYY-MM-DD.")
    index: str | None = Field(
        None, description="area_over_time: ndvi, ndwi, ndmi, lswi, evi, vv, vh or vh_vv."
    )
    max_scenes: int | None = Field(None, description="area_over_time: 3..24 (default 16).")
    query: str | None = Field(None, description="recall: the question or keywords.")
    near: dict[str, Any] | None = Field(
        None, description="recall: {place | cell | lat+lng, radius_m}."
    )
    at: str | None = Field(None, description="recall: valid-time anchor (RFC 3339 or a date).")
    asOf: str | None = Field(
        None, description="recall: transaction-time anchor ('what did we know on X?')."
    )
    kinds: list[str] | None = Field(None, description="recall: memory types to keep.")
    limit: int | None = Field(None, description="recall: hits to return (1..100).")
    compact: bool | None = Field(None, description="recall: reduced hits.")


class PlanStep(BaseModel):
    """One primitive call the router ran."""

    primitive: str = Field(description="The primitive's name.")
    args: dict[str, Any] = Field(description="The arguments it was called with.")


class IntentRow(BaseModel):
    """One row of the intent table, as listed in a ``needs_intent_type`` envelope."""

    needs: list[str] = Field(description="Fields that must all be present.")
    one_of: list[str] | None = Field(None, description="At least one of these is required.")
    optional: list[str] = Field(description="Fields read when present.")
    aliases: dict[str, str] | None = Field(None, description="Accepted alternative names.")
    primitive: str = Field(description="The primitive the plan runs.")
    available: bool = Field(description="Whether that primitive is served here.")
    answers: str = Field(description="What the answer holds.")


class FieldError(BaseModel):
    """One field sent with the wrong type."""

    loc: list[str | int] = Field(description="Where: the field, then any index or key in it.")
    msg: str = Field(description="What is wrong.")
    type: str = Field(description="pydantic's error type, e.g. int_type, string_type.")


class IntentAnswer(BaseModel):
    """The router's answer: the plan it ran and the primitive's answer, or an envelope."""

    status: Literal["answered", "needs_intent_type"] = Field(
        description="answered: `result` holds the primitive's answer. needs_intent_type: "
        "`type` was missing or unknown; see `intents`."
    )
    type: str | None = Field(description="The intent that ran (None in an envelope).")
    plan: list[PlanStep] = Field(description="The primitive calls that ran, in order.")
    result: dict[str, Any] | None = Field(
        description="The last primitive's answer, with its signed receipt."
    )
    ignored_fields: list[str] = Field(description="Fields sent but not read by this intent.")
    message: str | None = Field(None, description="Why an envelope was returned.")
    received_type: Any = Field(None, description="The unknown `type` that was sent, if any.")
    valid_types: list[str] | None = Field(None, description="The valid intent types.")
    intents: dict[str, IntentRow] | None = Field(
        None, description="Each intent's fields (needs, one_of, optional)."
    )
    type_errors: list[FieldError] | None = Field(
        None,
        description="needs_intent_type: fields sent with the wrong type for every intent "
        "that reads them (fix these too before sending the intent again).",
    )


def intent_table(served: Collection[str]) -> dict[str, dict[str, Any]]:
    """Each intent's row: needs, one_of, optional, aliases, primitive, availability."""
    return {name: spec.describe(served) for name, spec in INTENTS.items()}


@dataclass(frozen=True)
class IntentPlan:
    """What an intent runs: one primitive call."""

    spec: IntentSpec
    """The intent's row."""
    args: dict[str, Any]
    """The primitive's arguments, mapped from the intent's fields."""
    ignored: list[str]
    """Fields sent but not read by this intent."""

    def answer(self, result: dict[str, Any]) -> dict[str, Any]:
        """The router's ``answered`` body around the primitive's answer."""
        return {
            "status": "answered",
            "type": self.spec.name,
            "plan": [{"primitive": self.spec.primitive, "args": self.args}],
            "result": result,
            "ignored_fields": self.ignored,
        }


def _present(payload: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in payload.items() if v is not None}


def plan_intent(payload: Any, served: Collection[str]) -> IntentPlan | dict[str, Any]:
    """Map an intent onto its primitive call, or answer the ``needs_intent_type`` envelope.

    Args:
        payload: ``{"type": ..., <fields>}`` (JSON-shaped). ``None`` values
            count as absent.
        served: Names of the primitives this server serves.

    Returns:
        The plan, or for a missing/unknown type the envelope (status
        ``needs_intent_type``, ``valid_types``, ``intents``).

    Raises:
        InvalidArgument: ``payload`` is not an object, or required fields are
            missing (``missing_fields``, ``details.missing``).
        ApiError: code ``not_available`` (501) when the intent's primitive is
            not served here.
    """
    if not isinstance(payload, Mapping):
        raise InvalidArgument(
            f"an intent is a JSON object with a `type`, got {type(payload).__name__}"
        )
    present = _present(payload)
    kind = present.pop("type", None)
    spec = INTENTS.get(kind) if isinstance(kind, str) else None
    if spec is None:
        return _needs_intent_type(kind, present, served)

    args: dict[str, Any] = {}
    used: set[str] = set()
    for name in spec.fields:
        if name in present:
            args[name] = present[name]
            used.add(name)
    for alias, target in spec.aliases.items():
        if target not in args and alias in present:
            args[target] = present[alias]
            used.add(alias)
    ignored = sorted(k for k in present if k not in used)

    missing = [n for n in spec.needs if n not in args]
    if spec.one_of and not any(n in args for n in spec.one_of):
        missing.append(" | ".join(spec.one_of))
    if missing:
        raise InvalidArgument(
            f"intent {spec.name!r} needs {', '.join(missing)}",
            code="missing_fields",
            details={"type": spec.name, "missing": missing, **spec.describe(served)},
        )
    if spec.name == "ask" and ("lat" in args) != ("lng" in args):
        raise InvalidArgument(
            "intent 'ask' takes lat and lng together",
            code="missing_fields",
            details={"type": "ask", "missing": ["lng" if "lat" in args else "lat"]},
        )
    if spec.primitive not in served:
        names = sorted(served)
        raise ApiError(
            "not_available",
            f"intent {spec.name!r} needs the {spec.primitive!r} primitive, which this server "
            f"does not serve yet; available primitives: {', '.join(names) or 'none'}",
            501,
            {
                "type": spec.name,
                "primitive": spec.primitive,
                "available_primitives": names,
                "available_intents": [n for n, s in INTENTS.items() if s.primitive in served],
            },
        )
    return IntentPlan(spec, args, ignored)


def _plain(value: Any) -> Any:
    """Keep a value only if it is small plain JSON (the envelope echoes caller data)."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return value if len(value) <= 200 else value[:200] + "..."
    return None


def _needs_intent_type(
    kind: Any, present: Mapping[str, Any], served: Collection[str]
) -> dict[str, Any]:
    if kind is None:
        message = "the intent has no `type`; choose one of the valid types and send its fields"
    else:
        message = f"unknown intent type {kind!r}; choose one of the valid types"
    return {
        "status": "needs_intent_type",
        "type": None,
        "plan": [],
        "result": None,
        "ignored_fields": sorted(present),
        "message": message,
        "received_type": _plain(kind),
        "valid_types": list(INTENT_TYPES),
        "intents": intent_table(served),
        "type_errors": _type_errors({"type": kind, **present}),
    }


def _type_errors(payload: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The fields of ``payload`` whose type no intent accepts (checked against IntentRequest)."""
    try:
        IntentRequest.model_validate(dict(payload))
    except ValidationError as exc:
        return [
            {
                "loc": [p if isinstance(p, int) else str(p) for p in err["loc"]],
                "msg": str(err["msg"]),
                "type": str(err["type"]),
            }
            for err in exc.errors(include_url=False)[:50]
        ]
    return []
