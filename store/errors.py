"""Typed errors of the store layer.

One root (:class:`StoreError`); each error also inherits the builtin it
resembles, so callers that only know ``ValueError`` still catch it. Every
error carries a stable machine ``code`` that the API maps to HTTP / MCP.
"""

from __future__ import annotations

__all__ = [
    "AddressError",
    "CommitConflict",
    "CubeNotFound",
    "InvalidBlock",
    "InvalidCell",
    "InvalidDate",
    "InvalidInventory",
    "InvalidLatitude",
    "InvalidLongitude",
    "InvalidTempo",
    "InvalidWrite",
    "RegionOutOfBounds",
    "RegionTooLarge",
    "SnapshotExpired",
    "SnapshotNotFound",
    "StorageTimeout",
    "StoreError",
    "TransactionClosed",
    "UnknownBand",
    "UnsupportedStorage",
]


class StoreError(Exception):
    """Root of every error raised by ``store``."""

    code: str = "store_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class AddressError(StoreError, ValueError):
    """A value could not be turned into (or out of) an address."""

    code = "invalid_address"


class InvalidLatitude(AddressError):
    """Latitude outside [-90, 90] or not finite."""

    code = "invalid_latitude"


class InvalidLongitude(AddressError):
    """Longitude outside [-180, 180] or not finite."""

    code = "invalid_longitude"


class InvalidCell(AddressError):
    """Malformed cell64 text or integer (lanes, tokens, header bits)."""

    code = "invalid_cell"


class InvalidBlock(AddressError):
    """Malformed block id or level."""

    code = "invalid_block"


class InvalidDate(AddressError):
    """A date, datetime or ISO string that cannot become a tslot."""

    code = "invalid_date"


class InvalidTempo(AddressError):
    """Unknown tslot tempo (valid: ``day``, ``year``)."""

    code = "invalid_tempo"


# --- cube and inventory (store/cube/, store/snapshots.py, store/inventory.py) ---


class UnknownBand(StoreError, KeyError):
    """A band name that the cube layout does not define."""

    code = "unknown_band"

    def __str__(self) -> str:
        return self.message


class RegionOutOfBounds(StoreError, ValueError):
    """A read or write region (cells or tslots) outside the lattice, or empty/reversed."""

    code = "region_out_of_bounds"


class RegionTooLarge(StoreError, ValueError):
    """A read region above the reader's element cap (bounded memory)."""

    code = "region_too_large"


class InvalidWrite(StoreError, ValueError):
    """Values whose shape or dtype do not fit the band and region written."""

    code = "invalid_write"


class CubeNotFound(StoreError, FileNotFoundError):
    """No cube repository at the given location."""

    code = "cube_not_found"


class SnapshotNotFound(StoreError, KeyError):
    """An unknown snapshot id, or no snapshot at or before an ``as_of`` time."""

    code = "snapshot_not_found"

    def __str__(self) -> str:
        return self.message


class SnapshotExpired(SnapshotNotFound):
    """An ``as_of`` time before the retained history (older snapshots were expired)."""

    code = "snapshot_expired"

    def __init__(self, message: str, oldest_kept: str, oldest_kept_at: str) -> None:
        super().__init__(message)
        self.oldest_kept = oldest_kept
        """Id of the oldest snapshot kept on the branch."""
        self.oldest_kept_at = oldest_kept_at
        """Its commit time (RFC 3339)."""


class UnsupportedStorage(StoreError, ValueError):
    """A storage URL scheme the cube cannot open (use a path or ``s3://``), or a storage setting
    of the environment it cannot use (``EARTHMEM_STORAGE_TIMEOUT_SECONDS``,
    ``EARTHMEM_GC_GRACE_HOURS``)."""

    code = "unsupported_storage"


class StorageUnavailable(StoreError, OSError):
    """The cube's storage could not be reached or refused a read or write (object storage down,
    a missing bucket, denied credentials, a timeout); nothing was committed."""

    code = "storage_unavailable"


class StorageTimeout(StorageUnavailable):
    """The object store did not answer a read, a write or a commit within the storage deadline
    (``EARTHMEM_STORAGE_TIMEOUT_SECONDS``, :mod:`store.deadline`). Its message says what the
    caller may assume: nothing read, nothing committed, or — for a commit that had been sent —
    that it may still land (whole: commits are atomic); rerun to converge."""

    code = "storage_timeout"


class TransactionClosed(StoreError, RuntimeError):
    """A write through a cube transaction that has already committed or aborted."""

    code = "transaction_closed"


class CommitConflict(StoreError, RuntimeError):
    """A commit whose chunks were changed by a concurrent commit (rebase failed)."""

    code = "commit_conflict"


class InvalidInventory(StoreError, ValueError):
    """Scene-inventory rows or queries with invalid values."""

    code = "invalid_inventory"


# --------------------------------------------------------------------------- k-NN vector tables


class VectorTableError(StoreError, OSError):
    """A k-NN vector table is missing, malformed, or would be overwritten silently."""

    code = "vector_table_error"


class InvalidVectorQuery(StoreError, ValueError):
    """A k-NN query is invalid: wrong dimension, zero vector, k out of range, bad mode or mask."""

    code = "invalid_vector_query"


__all__ += ["InvalidVectorQuery", "VectorTableError"]


# --------------------------------------------------------------------------- claims


class InvalidClaim(StoreError, ValueError):
    """A claim ``{band, op, value, tslot | window, agg}`` with a bad op, value, agg or tslot."""

    code = "invalid_claim"


class InvalidWindow(StoreError, ValueError):
    """A tslot window that is not two increasing non-negative integers."""

    code = "invalid_window"


__all__ += ["InvalidClaim", "InvalidWindow"]


# --------------------------------------------------------------------------- canonical form and fact ids (store/facts.py)


class CanonicalFormError(StoreError, ValueError):
    """A value that has no canonical form: an unsupported type or a non-string mapping key."""

    code = "invalid_value"


class NonFiniteNumber(CanonicalFormError):
    """NaN or infinity in a value to hash (an absent value must be ``None``)."""

    code = "invalid_number"


class InvalidFact(CanonicalFormError):
    """Fact-id arguments of the wrong type (cell, band, derivation, tslot or source ids)."""

    code = "invalid_fact"


__all__ += ["CanonicalFormError", "InvalidFact", "NonFiniteNumber"]


# --------------------------------------------------------------------------- the memory store (store/memory/)


class MemoryStoreError(StoreError):
    """Root of the memory store's errors."""

    code = "memory_error"


class MemoryNotFound(MemoryStoreError, LookupError):
    """No item (of the caller's project) with that id: absent, never "forbidden"."""

    code = "memory_not_found"


class VersionConflict(MemoryStoreError, RuntimeError):
    """An update named a version the item is no longer at (someone changed it first)."""

    code = "version_conflict"


class OperationConflict(MemoryStoreError, RuntimeError):
    """An ``operation_id`` already applied with different content (nothing stored)."""

    code = "operation_conflict"


class InvalidTransition(MemoryStoreError, ValueError):
    """A lifecycle change the item's status does not allow (e.g. updating a deleted item)."""

    code = "invalid_transition"


class InvalidCursor(MemoryStoreError, ValueError):
    """A page cursor this store did not issue."""

    code = "invalid_cursor"


class ImportConflict(MemoryStoreError, ValueError):
    """An imported record collides with a different row already stored."""

    code = "import_conflict"


class MemoryBackendUnavailable(MemoryStoreError, OSError):
    """The memory database cannot be opened or reached."""

    code = "memory_backend_unavailable"


class InvalidMemoryUrl(MemoryStoreError, ValueError):
    """A memory database URL no backend takes: an unknown scheme, SQLite's ``:memory:``, an
    unknown ``synchronous`` mode (the input's mistake, not a database that does not answer)."""

    code = "invalid_memory_url"


class InvalidMemoryQuery(MemoryStoreError, ValueError):
    """A listing or search the store cannot run: a limit below 1, an empty or reversed bbox."""

    code = "invalid_memory_query"


class InvalidArchive(MemoryStoreError, ValueError):
    """Exported records that are malformed: unknown table, missing or extra fields, a
    history chain or content digest that does not verify."""

    code = "invalid_archive"


class DuplicateToken(MemoryStoreError, ValueError):
    """A token whose id or hash is already stored."""

    code = "duplicate_token"


class TokenRefused(MemoryStoreError, PermissionError):
    """A write's bearer token, checked inside the write's transaction, is unknown, of another
    project, revoked, expired or read-only: nothing is stored. ``code`` is the API's
    (``token_invalid``, ``token_revoked``, ``token_expired``, ``insufficient_permission``)."""

    code = "token_invalid"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


__all__ += [
    "DuplicateToken",
    "ImportConflict",
    "InvalidArchive",
    "InvalidCursor",
    "InvalidMemoryQuery",
    "InvalidMemoryUrl",
    "InvalidTransition",
    "MemoryBackendUnavailable",
    "MemoryNotFound",
    "MemoryStoreError",
    "OperationConflict",
    "TokenRefused",
    "VersionConflict",
]


# --------------------------------------------------------------------------- signing keys


class SigningKeyError(StoreError, OSError):
    """The data directory's signing key is unreadable, malformed or too widely readable."""

    code = "receipt_key_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


__all__ += ["SigningKeyError"]
