"""Pydantic input and output models of the query primitives, one module per query family.

Inputs are deliberately lenient in *type* (the service functions check meaning
and raise typed :mod:`api.errors` with stable codes: ``invalid_cell``,
``invalid_window``, ...); the JSON schema still documents the expected shapes.

* :mod:`api.models.common`: ``Receipt``, ``Fact``, ``Claim`` and ``Signed`` (body + receipt);
* :mod:`api.models.cell`: did_change, trajectory, confirm;
* :mod:`api.models.area`: area_over_time;
* :mod:`api.models.similar`: find_similar, is_like;
* :mod:`api.models.places`: where_is, what_is_here, ask.

Model and field names appear in the OpenAPI and MCP schemas: keep them stable.
"""

from __future__ import annotations

from api.models.area import (
    AnomalyOut,
    AreaIn,
    AreaOverTimeAnswer,
    AreaOverTimeBody,
    AreaOverTimeIn,
    AreaSeriesOut,
    ExcludedScene,
    SceneStats,
    TrendOut,
)
from api.models.cell import (
    ChangeEnd,
    ConfirmAnswer,
    ConfirmBody,
    ConfirmIn,
    DidChangeAnswer,
    DidChangeBody,
    DidChangeIn,
    Significance,
    TrajectoryAnswer,
    TrajectoryBody,
    TrajectoryIn,
    TrajectoryPoint,
)
from api.models.common import (
    Claim,
    Fact,
    Receipt,
    Signed,
)
from api.models.places import (
    AlternativeOut,
    AskAnswer,
    AskBody,
    AskIn,
    AskStep,
    AvailabilityOut,
    BoundsOut,
    ChangeCheckOut,
    ChangeOut,
    ConfidenceOut,
    LandCoverOut,
    LatestOut,
    LocationOut,
    PlaceOut,
    SentenceOut,
    StepSide,
    SubAnswer,
    TopicOut,
    VintageLabel,
    WhatIsHereAnswer,
    WhatIsHereBody,
    WhatIsHereIn,
    WhereIsAnswer,
    WhereIsBody,
    WhereIsIn,
)
from api.models.similar import (
    FilterStats,
    FindSimilarAnswer,
    FindSimilarBody,
    FindSimilarIn,
    IsLikeAnswer,
    IsLikeBody,
    IsLikeIn,
    Neighbour,
    VintageSimilarity,
)

__all__ = [
    "AlternativeOut",
    "AnomalyOut",
    "AreaIn",
    "AreaOverTimeAnswer",
    "AreaOverTimeBody",
    "AreaOverTimeIn",
    "AreaSeriesOut",
    "AskAnswer",
    "AskBody",
    "AskIn",
    "AskStep",
    "AvailabilityOut",
    "BoundsOut",
    "ChangeCheckOut",
    "ChangeEnd",
    "ChangeOut",
    "Claim",
    "ConfidenceOut",
    "ConfirmAnswer",
    "ConfirmBody",
    "ConfirmIn",
    "DidChangeAnswer",
    "DidChangeBody",
    "DidChangeIn",
    "ExcludedScene",
    "Fact",
    "FilterStats",
    "FindSimilarAnswer",
    "FindSimilarBody",
    "FindSimilarIn",
    "IsLikeAnswer",
    "IsLikeBody",
    "IsLikeIn",
    "LandCoverOut",
    "LatestOut",
    "LocationOut",
    "Neighbour",
    "PlaceOut",
    "Receipt",
    "SceneStats",
    "SentenceOut",
    "Signed",
    "Significance",
    "StepSide",
    "SubAnswer",
    "TopicOut",
    "TrajectoryAnswer",
    "TrajectoryBody",
    "TrajectoryIn",
    "TrajectoryPoint",
    "TrendOut",
    "VintageLabel",
    "VintageSimilarity",
    "WhatIsHereAnswer",
    "WhatIsHereBody",
    "WhatIsHereIn",
    "WhereIsAnswer",
    "WhereIsBody",
    "WhereIsIn",
]
