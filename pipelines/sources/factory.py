"""Choose a source from configuration: ``open_source(config)``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from pipelines.sources.api import PRESETS, StacApiSource
from pipelines.sources.base import SceneSource
from pipelines.sources.signing import planetary_computer_modifier
from pipelines.sources.static import StaticCatalogSource
from pipelines.sources.tessera import TesseraRegistrySource

__all__ = ["SourceConfig", "SourceKind", "open_source"]

SourceKind = Literal["static", "stac_api", "tessera_registry"]
"""The three adapter families."""


@dataclass(frozen=True, slots=True)
class SourceConfig:
    """Where scenes come from; the only thing that changes between offline and live runs."""

    kind: SourceKind
    """Adapter family."""
    path: str | None = None
    """``static``: path to ``catalog.json``; ``tessera_registry``: root directory or base URL."""
    url: str | None = None
    """``stac_api``: landing page URL (overrides the preset's URL)."""
    preset: str | None = None
    """``stac_api``: ``earth-search``, ``planetary-computer`` or ``cdse`` (URL + collection names)."""
    sign: Literal["auto", "none", "planetary-computer"] = "auto"
    """URL signing: ``auto`` signs for the ``planetary-computer`` preset only."""
    token_endpoint: str | None = None
    """Planetary Computer SAS token endpoint override (tests: a fake one on loopback)."""
    timeout_s: float = 20.0
    """Per-request timeout in seconds."""
    max_items: int = 10_000
    """Explicit bound on items per search (``stac_api``)."""
    max_retries: int = 3
    """Connection retries per request (``stac_api``); 0 fails fast."""

    def __post_init__(self) -> None:
        if self.kind not in ("static", "stac_api", "tessera_registry"):
            raise ValueError(f"unknown source kind {self.kind!r}")
        if self.kind in ("static", "tessera_registry") and not self.path:
            raise ValueError(f"source kind {self.kind!r} needs a path")
        if self.kind == "stac_api":
            if not self.url and not self.preset:
                raise ValueError("source kind 'stac_api' needs a url or a preset")
            if self.preset is not None and self.preset not in PRESETS:
                raise ValueError(f"unknown preset {self.preset!r}; known: {sorted(PRESETS)}")
        if self.timeout_s <= 0 or self.max_items < 1 or self.max_retries < 0:
            raise ValueError("timeout_s, max_items must be positive and max_retries >= 0")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> SourceConfig:
        """Build from a dict (e.g. Dagster resource config); unknown keys are refused."""
        known = {f.name for f in fields(cls)}
        extra = set(data) - known
        if extra:
            raise ValueError(f"unknown source config key(s): {sorted(extra)}")
        return cls(**dict(data))


def open_source(
    config: SourceConfig | Mapping[str, Any],
    *,
    modifier: Callable[[Any], None] | None = None,
) -> SceneSource:
    """Build the configured :class:`~pipelines.sources.base.SceneSource`.

    Args:
        config: A :class:`SourceConfig` or an equivalent mapping.
        modifier: Injected pystac-client modifier (overrides ``sign``).

    Returns:
        The source; nothing is opened until the first search.

    Raises:
        ValueError: Invalid configuration.
    """
    cfg = config if isinstance(config, SourceConfig) else SourceConfig.from_mapping(config)
    if cfg.kind == "static":
        return StaticCatalogSource(str(cfg.path))
    if cfg.kind == "tessera_registry":
        return TesseraRegistrySource(str(cfg.path), timeout_s=cfg.timeout_s)
    url = cfg.url or PRESETS[str(cfg.preset)]
    if modifier is None:
        wants_pc = cfg.sign == "planetary-computer" or (
            cfg.sign == "auto" and cfg.preset == "planetary-computer"
        )
        if wants_pc:
            modifier = planetary_computer_modifier(cfg.token_endpoint)
    return StacApiSource(
        url,
        provider=cfg.preset,
        modifier=modifier,
        timeout_s=cfg.timeout_s,
        max_items=cfg.max_items,
        max_retries=cfg.max_retries,
    )
