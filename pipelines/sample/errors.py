"""Typed errors of the sample-area generator."""

from __future__ import annotations

__all__ = ["InvalidSampleSize", "SampleError", "SampleExists"]


class SampleError(Exception):
    """Root of every error raised by ``pipelines.sample``."""

    code: str = "sample_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidSampleSize(SampleError, ValueError):
    """The requested sample size is not ``tiny`` or ``demo``."""

    code = "invalid_sample_size"


class SampleExists(SampleError, FileExistsError):
    """The output directory already holds a sample and overwrite was not asked for."""

    code = "sample_exists"
