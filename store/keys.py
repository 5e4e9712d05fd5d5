"""The data directory's ed25519 signing key: one key for every signer of one earthmem instance.

The API signs its receipts and memory history heads with it; the pipeline's memory
re-checks sign the heads they write with the same key, read from the same file,
so an audit finds one key and no unsigned tail. The key is the raw 32-byte seed in
``<data_dir>/keys/receipt_ed25519.key`` (mode 0600 inside a 0700 ``keys`` directory),
created atomically on first use (written to a temporary file, then hard-linked into
place), so processes starting together end up with the same key.

Replicas (several servers over one object store) share one key given to each as a
secret: ``EARTHMEM_SIGNING_KEY_FILE`` names a file holding the same 32-byte seed (raw,
or as 64 hex characters; owner-readable only, as a mounted secret is). When it is set
the data directory's key file is neither read nor created, so every replica signs
with, and publishes, the one key; the key is never written to the data root.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Self

import blake3
from nacl.bindings import crypto_sign, crypto_sign_BYTES, crypto_sign_seed_keypair
from nacl.signing import SigningKey

from store.errors import SigningKeyError

__all__ = ["KEY_FILE", "KEY_FILE_ENV", "Ed25519Key", "key_id_of"]

KEY_FILE = Path("keys") / "receipt_ed25519.key"
"""The key's path inside a data directory."""
KEY_FILE_ENV = "EARTHMEM_SIGNING_KEY_FILE"
"""A secret file with the signing key's seed: replaces the data directory's key when set."""


def key_id_of(public_key: bytes) -> str:
    """Key id: the first 16 hex characters of blake3 of the raw 32-byte public key."""
    return blake3.blake3(public_key).hexdigest()[:16]


@dataclass(frozen=True)
class Ed25519Key:
    """An ed25519 signing key (the private half is never serialised by this class)."""

    signing_key: SigningKey
    """The private key."""

    @classmethod
    def generate(cls) -> Self:
        """A fresh in-memory key (tests, ephemeral servers)."""
        return cls(SigningKey.generate())

    @classmethod
    def load_or_create(cls, data_dir: str | os.PathLike[str]) -> Self:
        """Load the key of a data directory, creating it on first use.

        With ``EARTHMEM_SIGNING_KEY_FILE`` set, the key is that secret file's instead
        (it must exist: a replica never makes up a key of its own).

        Raises:
            SigningKeyError: The key file is malformed (``receipt_key_malformed``),
                readable by group/others (``receipt_key_insecure``), or the secret file
                named by the environment is missing (``receipt_key_missing``).
        """
        secret = os.environ.get(KEY_FILE_ENV, "").strip()
        if secret:
            spath = Path(secret)
            if not spath.is_file():
                raise SigningKeyError(
                    f"{KEY_FILE_ENV}={secret}: no such file (the signing key secret)",
                    code="receipt_key_missing",
                )
            return cls(SigningKey(_read_key_file(spath)))
        path = Path(data_dir) / KEY_FILE
        keys_dir = path.parent
        if not keys_dir.exists():
            keys_dir.mkdir(parents=True, exist_ok=True)
            os.chmod(keys_dir, 0o700)
        if not path.exists():
            _create_key_file(path)
        return cls(SigningKey(_read_key_file(path)))

    @cached_property
    def public_key(self) -> bytes:
        """Raw 32-byte ed25519 public key."""
        return bytes(self.signing_key.verify_key)

    @cached_property
    def key_id(self) -> str:
        """First 16 hex characters of blake3(public key)."""
        return key_id_of(self.public_key)

    @cached_property
    def _secret(self) -> bytes:
        """libsodium's 64-byte secret key (seed and public key) of the signing key."""
        return crypto_sign_seed_keypair(bytes(self.signing_key))[1]

    def sign(self, message: bytes) -> bytes:
        """Raw 64-byte ed25519 signature of ``message``.

        ``self.signing_key.sign(message).signature``, through the binding directly (no
        ``SignedMessage`` object per call); ed25519 is deterministic, so the same bytes.
        """
        return crypto_sign(message, self._secret)[:crypto_sign_BYTES]


def _create_key_file(path: Path) -> None:
    seed = bytes(SigningKey.generate())
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)  # independent of the umask
        os.write(fd, seed)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # atomic; fails if another process won the race
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)


def _read_key_file(path: Path) -> bytes:
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise SigningKeyError(
            f"receipt key {path} has mode {mode:o}; it must be readable by its owner only "
            "(chmod 600)",
            code="receipt_key_insecure",
        )
    seed = path.read_bytes()
    text = seed.strip()
    if len(seed) != 32 and len(text) == 64:  # the seed as hex text (a secret manager's form)
        with contextlib.suppress(UnicodeDecodeError, ValueError):
            seed = bytes.fromhex(text.decode("ascii"))
    if len(seed) != 32:
        raise SigningKeyError(
            f"receipt key {path} holds {len(seed)} bytes, expected a 32-byte ed25519 seed "
            "(raw, or 64 hex characters)",
            code="receipt_key_malformed",
        )
    return seed
