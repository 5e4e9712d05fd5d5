"""The text embedder recall's vector lane and the memory write path use: one setting.

``EARTHMEM_EMBEDDER`` is either

* a **local model directory** in a standard format: a model2vec ``StaticModel``
  directory (``config.json``, ``model.safetensors``, ``tokenizer.json``; or the
  sentence-transformers static-embedding layouts model2vec also reads), loaded
  with ``model2vec.StaticModel.from_pretrained``; or a sentence-transformers
  directory (``modules.json``), loaded with ``local_files_only=True`` when that
  library is importable (it is not a dependency; without it the directory is a
  typed configuration error that says so); or
* an **HTTP(S) embedding endpoint** speaking the OpenAI-style JSON API:
  ``POST {"input": [texts], "model": name}`` answered by
  ``{"data": [{"index": i, "embedding": [floats]}, ...]}``. The URL is the
  endpoint itself (a bare ``http://host:port`` means ``/v1/embeddings``); its
  fragment, if any, is the model name sent (``http://host/v1/embeddings#bge-small``;
  fragments never leave the client), else ``earthmem``.

Weights are never downloaded: a directory is checked to exist and to hold a known
layout *before* any loader sees it (model2vec would otherwise read a missing path
as a Hugging Face repo id and fetch it), and the Hugging Face libraries are put
offline (``HF_HUB_OFFLINE``) before they are imported here. A setting that names
no such directory, an unreadable model or a malformed URL is a typed
configuration error (:class:`EmbedderMisconfigured`, ``embedder_misconfigured``,
HTTP 503): servers log it at start (:meth:`api.context.ServiceContext.warm`), memory
writes answer it (nothing is written), and recall answers without its vector lane
(``degraded``). Vectors are float32, L2-normalised (an all-zero vector stays zero:
a text with no known word).
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import math
import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from api.errors import Unavailable

_LOG = logging.getLogger("earthmem.embedder")

__all__ = [
    "EMBEDDER_ENV",
    "MAX_DIM",
    "MAX_EMBED_CHARS",
    "WRITE_DEADLINE_S",
    "EmbedDeadline",
    "Embedder",
    "EmbedderFailed",
    "EmbedderMisconfigured",
    "HttpEmbedder",
    "LocalEmbedder",
    "cosine_ready",
    "embed_item",
    "item_text",
    "load_embedder",
]

EMBEDDER_ENV = "EARTHMEM_EMBEDDER"
"""The setting: a local model directory or an ``http(s)://`` embedding endpoint."""
MAX_EMBED_CHARS = 8192
"""Each text is cut to this many characters before it is embedded."""
MAX_DIM = 8192
"""Largest embedding dimension accepted from an endpoint."""
WRITE_DEADLINE_S = 10.0
"""How long a memory write waits for its item's embedding (then stores the item without one)."""
HTTP_TIMEOUT_S = 10.0
"""Timeout of an endpoint call when the caller sets no deadline (writes, re-embedding)."""
_MAX_RESPONSE_BYTES = 64 << 20
_DEFAULT_HTTP_MODEL = "earthmem"
_M2V_LAYOUTS = (
    ("config.json", "model.safetensors", "tokenizer.json"),
    ("config_sentence_transformers.json", "model.safetensors", "tokenizer.json"),
    (
        "config_sentence_transformers.json",
        "0_StaticEmbedding/model.safetensors",
        "0_StaticEmbedding/tokenizer.json",
    ),
)


class EmbedderMisconfigured(Unavailable):
    """``EARTHMEM_EMBEDDER`` names no usable model or endpoint (HTTP 503)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="embedder_misconfigured")


class EmbedderFailed(Unavailable):
    """The embedder was reachable but did not answer usable vectors (HTTP 503)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="embedder_failed")


class EmbedDeadline(Unavailable):
    """The embedding step missed its deadline (``embedDeadlineMs``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="embed_deadline")


def _normalise(vectors: npt.NDArray[Any]) -> npt.NDArray[np.float32]:
    out = np.asarray(vectors, dtype=np.float32)
    if out.ndim != 2:
        raise EmbedderFailed(f"the embedder answered an array of shape {out.shape}, not (n, d)")
    if not np.all(np.isfinite(out)):
        raise EmbedderFailed("the embedder answered non-finite values")
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)


def _remaining(deadline: float | None) -> float | None:
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise EmbedDeadline("the embedding deadline had passed before the text was embedded")
    return left


class Embedder(ABC):
    """Texts to unit vectors."""

    name: str
    """What embeds (``model2vec:<dir>``, ``sentence-transformers:<dir>``, ``http:<url>``)."""

    @abstractmethod
    def embed(
        self, texts: Sequence[str], *, deadline: float | None = None
    ) -> npt.NDArray[np.float32]:
        """``(len(texts), d)`` float32 unit rows.

        Args:
            texts: The texts (each cut to :data:`MAX_EMBED_CHARS`).
            deadline: ``time.monotonic()`` by which the vectors are needed.

        Raises:
            EmbedDeadline: the deadline passed first.
            EmbedderFailed: the model or endpoint failed.
        """


_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="earthmem-embed")


class LocalEmbedder(Embedder):
    """A model loaded from a local directory (model2vec, or sentence-transformers)."""

    def __init__(self, model: Any, name: str) -> None:
        self.model = model
        self.name = name
        self._lock = threading.Lock()

    def _encode(self, texts: list[str]) -> npt.NDArray[Any]:
        with self._lock:  # one encode at a time per model (tokenizer state)
            return np.asarray(self.model.encode(texts))

    def embed(
        self, texts: Sequence[str], *, deadline: float | None = None
    ) -> npt.NDArray[np.float32]:
        """Encode on a worker thread, waiting at most until ``deadline``."""
        batch = [t[:MAX_EMBED_CHARS] for t in texts]
        if not batch:
            return np.zeros((0, 0), dtype=np.float32)
        left = _remaining(deadline)
        if left is None:
            return _normalise(self._encode(batch))
        future = _POOL.submit(self._encode, batch)
        try:
            raw = future.result(timeout=left)
        except concurrent.futures.TimeoutError:
            raise EmbedDeadline(
                f"{self.name} did not embed the query within the deadline"
            ) from None
        return _normalise(raw)


class HttpEmbedder(Embedder):
    """An OpenAI-style ``/v1/embeddings`` endpoint."""

    def __init__(self, url: str, model: str) -> None:
        import httpx

        self.url = url
        self.model = model
        self.name = f"http:{url}"
        self._client = httpx.Client(follow_redirects=False)

    def embed(
        self, texts: Sequence[str], *, deadline: float | None = None
    ) -> npt.NDArray[np.float32]:
        """POST the texts; the timeout is what is left of ``deadline`` (else :data:`HTTP_TIMEOUT_S`)."""
        import httpx

        batch = [t[:MAX_EMBED_CHARS] for t in texts]
        if not batch:
            return np.zeros((0, 0), dtype=np.float32)
        left = _remaining(deadline)
        timeout = HTTP_TIMEOUT_S if left is None else left
        try:
            with self._client.stream(
                "POST", self.url, json={"input": batch, "model": self.model}, timeout=timeout
            ) as resp:
                body = bytearray()
                for chunk in resp.iter_bytes():
                    body += chunk
                    if len(body) > _MAX_RESPONSE_BYTES:
                        raise EmbedderFailed(
                            f"{self.name} answered more than {_MAX_RESPONSE_BYTES} bytes"
                        )
                    if deadline is not None and time.monotonic() > deadline:
                        raise EmbedDeadline(f"{self.name} did not answer within the deadline")
                status = resp.status_code
        except httpx.TimeoutException:
            raise EmbedDeadline(f"{self.name} did not answer within {timeout:.3f} s") from None
        except httpx.HTTPError as exc:
            raise EmbedderFailed(f"{self.name} is unreachable: {exc}") from exc
        if status != 200:
            raise EmbedderFailed(f"{self.name} answered HTTP {status}")
        return _normalise(_parse_response(bytes(body), len(batch), self.name))


def _parse_response(body: bytes, n: int, name: str) -> npt.NDArray[np.float64]:
    try:
        payload = json.loads(body)
        data = payload["data"]
        if not isinstance(data, list) or len(data) != n:
            raise ValueError(f"{n} embeddings expected")
        ordered = sorted(data, key=lambda d: int(d.get("index", 0))) if n > 1 else data
        rows = [row["embedding"] for row in ordered]
        dims = {len(r) for r in rows}
        if len(dims) != 1 or not 0 < next(iter(dims)) <= MAX_DIM:
            raise ValueError("embeddings of one dimension (1..8192) expected")
        if not all(isinstance(x, int | float) and not isinstance(x, bool) for r in rows for x in r):
            raise ValueError("embeddings must be lists of numbers")
        return np.asarray(rows, dtype=np.float64)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise EmbedderFailed(f"{name} answered no usable embeddings: {exc}") from None


def _load_http(setting: str) -> HttpEmbedder:
    import httpx

    try:
        url = httpx.URL(setting)
    except (httpx.InvalidURL, ValueError) as exc:
        raise EmbedderMisconfigured(f"{EMBEDDER_ENV}={setting!r} is not a URL: {exc}") from None
    if not url.host:
        raise EmbedderMisconfigured(f"{EMBEDDER_ENV}={setting!r} names no host")
    model = url.fragment or _DEFAULT_HTTP_MODEL
    url = url.copy_with(fragment=None)
    if url.path in ("", "/"):
        url = url.copy_with(path="/v1/embeddings")
    return HttpEmbedder(str(url), model)


def _offline() -> None:
    # before the Hugging Face libraries are imported: they read these once
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _load_dir(path: Path) -> LocalEmbedder:
    if any(all((path / f).is_file() for f in layout) for layout in _M2V_LAYOUTS):
        _offline()
        from model2vec import StaticModel

        try:
            model = StaticModel.from_pretrained(path, force_download=False)
        except Exception as exc:  # a third-party loader: any failure is the setting's
            raise EmbedderMisconfigured(
                f"{EMBEDDER_ENV}: the model2vec model in {path} does not load: {exc}"
            ) from exc
        return LocalEmbedder(model, f"model2vec:{path}")
    if (path / "modules.json").is_file():
        _offline()
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise EmbedderMisconfigured(
                f"{EMBEDDER_ENV}: {path} is a sentence-transformers directory, but the "
                "sentence-transformers library is not installed (a model2vec directory needs "
                "nothing more)"
            ) from None
        try:
            st = SentenceTransformer(str(path), local_files_only=True, device="cpu")
        except Exception as exc:  # a third-party loader: any failure is the setting's
            raise EmbedderMisconfigured(
                f"{EMBEDDER_ENV}: the sentence-transformers model in {path} does not load: {exc}"
            ) from exc
        return LocalEmbedder(st, f"sentence-transformers:{path}")
    raise EmbedderMisconfigured(
        f"{EMBEDDER_ENV}: {path} is neither a model2vec directory (config.json, "
        "model.safetensors, tokenizer.json) nor a sentence-transformers one (modules.json)"
    )


def load_embedder(setting: str) -> Embedder:
    """The embedder a setting names (see the module docstring).

    Raises:
        EmbedderMisconfigured: no such directory, not a known layout, a model that
            does not load, a sentence-transformers directory without that library,
            or a malformed URL.
    """
    text = setting.strip()
    if text.lower().startswith(("http://", "https://")):
        return _load_http(text)
    path = Path(text).expanduser()
    if not path.is_dir():
        raise EmbedderMisconfigured(
            f"{EMBEDDER_ENV}={text!r} is not a directory (a local model directory or an "
            "http(s):// embedding endpoint is expected; weights are never downloaded)"
        )
    return _load_dir(path.resolve())


def cosine_ready(vec: npt.NDArray[Any]) -> bool:
    """Whether a query vector can rank anything (finite, not all zero)."""
    return (
        bool(vec.size)
        and bool(np.all(np.isfinite(vec)))
        and not math.isclose(float(np.abs(vec).sum()), 0.0)
    )


def item_text(title: str, statement: str, details: str | None, tags: Sequence[str]) -> str:
    """The text an item's embedding is computed from: title, statement, details and tags."""
    return "\n".join(p for p in (title, statement, details or "", " ".join(tags)) if p)


def embed_item(embedder: Embedder | None, draft: Any) -> tuple[float, ...] | None:
    """The embedding a memory write stores with its item (None: no embedder configured).

    ``embedder`` is the server's (:meth:`api.context.ServiceContext.embedder`, which raises
    :class:`EmbedderMisconfigured` when ``EARTHMEM_EMBEDDER`` names no usable model, so
    nothing is written then). ``draft`` is the write's :class:`api.memory.rules.Draft` (its ``fields`` hold the
    title, statement, details and tags). An embedder that fails or misses
    :data:`WRITE_DEADLINE_S` does not fail the write: the item is stored without an
    embedding (logged; recall's vector lane counts such items in its note).
    """
    if embedder is None:
        return None
    f = draft.fields
    text = item_text(f["title"], f["statement"], f.get("details"), f.get("tags") or ())
    try:
        vec = embedder.embed([text], deadline=time.monotonic() + WRITE_DEADLINE_S)[0]
    except (EmbedderFailed, EmbedDeadline) as exc:
        _LOG.warning("item stored without an embedding: %s", exc.message)
        return None
    return tuple(float(x) for x in vec)
