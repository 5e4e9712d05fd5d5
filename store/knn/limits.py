"""What a k-NN scan accepts: the largest ``k`` and the modes (no numba: the API validates
arguments with these before any table or kernel is loaded)."""

from __future__ import annotations

from typing import Literal

__all__ = ["K_MAX", "MODES", "Mode"]

K_MAX = 1000
"""Largest ``k`` a scan accepts."""

Mode = Literal["cosine", "hamming", "hamming_then_rerank"]
MODES: tuple[str, ...] = ("cosine", "hamming", "hamming_then_rerank")
