"""Shared steps of the scene families' week stacking (plain functions, no Dagster).

A family's ``stack_week`` reads one week of items onto a lattice window: it
starts from the week's empty arrays (:func:`empty_week`), walks the week's
days with their items (:func:`days_of_week`) and records an item it cannot
read as a skip (:func:`unreadable`) instead of failing the week.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import numpy.typing as npt

from pipelines.lattice import LatticeWindow
from pipelines.sources.models import SceneItem, Skip
from store.tslot import day_slot

__all__ = ["days_of_week", "empty_week", "unreadable"]


def empty_week(
    window: LatticeWindow, keys: Iterable[str]
) -> tuple[dict[str, npt.NDArray[np.float32]], npt.NDArray[np.uint8]]:
    """The arrays of a week with no observation yet.

    Args:
        window: The partition's lattice window.
        keys: The stack's value keys.

    Returns:
        ``(values, flags)``: key -> ``(7, h, w)`` float32 NaN, and ``(7, h, w)`` uint8 zeros.
    """
    h, w = window.shape
    values = {k: np.full((7, h, w), np.nan, dtype=np.float32) for k in keys}
    return values, np.zeros((7, h, w), dtype=np.uint8)


def days_of_week(
    items: Sequence[SceneItem], t0: int, skipped: list[Skip]
) -> Iterator[tuple[int, list[SceneItem]]]:
    """The week's days with items, in day order, each day's items in id order.

    Items whose day slot falls outside ``t0 .. t0 + 6`` are appended to
    ``skipped`` when the walk reaches their day, so skips stay in day order
    with those the caller appends while reading.

    Args:
        items: The week's items (any order).
        t0: First day slot of the week.
        skipped: Receives the out-of-week items.

    Yields:
        ``(day slot, items)``.
    """
    by_day: dict[int, list[SceneItem]] = defaultdict(list)
    for it in items:
        by_day[day_slot(it.datetime)].append(it)
    for slot in sorted(by_day):
        if not t0 <= slot < t0 + 7:
            skipped.extend(
                Skip(i.id, f"day slot {slot} outside week {t0}..{t0 + 6}") for i in by_day[slot]
            )
            continue
        yield slot, sorted(by_day[slot], key=lambda i: i.id)


def unreadable(item: SceneItem, exc: Exception) -> Skip:
    """The skip of an item whose rasters could not be read (a corrupt file is a skip, never a crash)."""
    return Skip(item.id, f"unreadable: {type(exc).__name__}: {exc}"[:300], code="corrupt")
