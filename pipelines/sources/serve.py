"""Serve a static catalog as a real STAC API on loopback (rustac's server).

``rustac serve`` (the Rust ``stac-server`` shipped in the ``rustac`` wheel) runs
as a subprocess with its in-memory backend: it implements STAC API core,
collections, features and item search (``bbox``, ``datetime``, ``collections``,
``ids``, paging) fully offline. It does not implement the ``query`` or
``filter`` extensions and its conformance says so; the STAC API adapter then
applies ``max_cloud`` locally (see :mod:`pipelines.sources.api`). The DuckDB
(stac-geoparquet) backend would add CQL2 ``filter``, but it installs DuckDB's
``spatial`` extension from the network at start-up, which cannot work offline.

Command::

    python -m pipelines.sources.serve CATALOG.json [--host 127.0.0.1] [--port 7822]

prints the base URL and serves until interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pystac

from pipelines.sources.errors import CatalogUnreachable
from pipelines.sources.static import load_catalog_items

__all__ = ["export_for_server", "main", "serve_catalog"]


def _rustac_command() -> list[str]:
    """The ``rustac`` console script of this environment (the rustac wheel installs it)."""
    import shutil

    here = Path(sys.executable).parent
    found = shutil.which("rustac", path=str(here)) or shutil.which("rustac")
    if found is None:
        raise CatalogUnreachable("rustac", "the rustac command is not installed")
    return [found]


def export_for_server(catalog_path: str | Path, out_dir: Path) -> list[Path]:
    """Write a catalog's collections and items as files ``rustac serve`` loads.

    Collections are written without links (the server makes its own); all items
    go to one FeatureCollection with absolute asset hrefs.

    Returns:
        The files to pass to the server (collections first, then items).
    """
    root = pystac.read_file(str(catalog_path))
    files: list[Path] = []
    seen: set[str] = set()
    if isinstance(root, pystac.Catalog):
        stack: list[pystac.Catalog] = [root]
        while stack:
            node = stack.pop()
            if isinstance(node, pystac.Collection) and node.id not in seen:
                seen.add(node.id)
                data = node.to_dict(include_self_link=False, transform_hrefs=False)
                data["links"] = []
                path = out_dir / f"collection-{len(files)}.json"
                path.write_text(json.dumps(data))
                files.append(path)
            stack.extend(c for c in node.get_children() if isinstance(c, pystac.Catalog))
    features: list[dict[str, Any]] = []
    for _, data in load_catalog_items(catalog_path):
        data = dict(data)
        data["links"] = []
        features.append(data)
    items_path = out_dir / "items.json"
    items_path.write_text(json.dumps({"type": "FeatureCollection", "features": features}))
    files.append(items_path)
    return files


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _wait_ready(proc: subprocess.Popen[bytes], url: str, deadline: float, log: Path) -> None:
    import httpx

    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise CatalogUnreachable(url, f"server exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(url, timeout=0.5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise CatalogUnreachable(url, f"server not ready in time: {log.read_text()[-2000:]}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@contextlib.contextmanager
def serve_catalog(
    catalog_path: str | Path,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    startup_timeout_s: float = 20.0,
) -> Iterator[str]:
    """Serve a static catalog as a STAC API for the duration of a ``with`` block.

    Args:
        catalog_path: Path to the static ``catalog.json``.
        host: Interface to bind (loopback by default).
        port: TCP port; 0 picks a free one.
        startup_timeout_s: Bound on the wait for the server to answer.

    Yields:
        The API's base URL, e.g. ``http://127.0.0.1:43121``.

    Raises:
        CatalogUnreachable: The catalog is unreadable or the server did not start.
    """
    with tempfile.TemporaryDirectory(prefix="earthmem-stac-") as tmp:
        out = Path(tmp)
        files = export_for_server(catalog_path, out)
        log = out / "server.log"
        attempts = 3 if port == 0 else 1
        for attempt in range(attempts):
            chosen = port or _free_port(host)
            url = f"http://{host}:{chosen}"
            cmd = [*_rustac_command(), "serve", "--addr", f"{host}:{chosen}"]
            cmd += ["--create-collections", *map(str, files)]
            with log.open("wb") as sink:
                proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT)
            try:
                _wait_ready(proc, url, time.monotonic() + startup_timeout_s, log)
            except CatalogUnreachable:
                _stop(proc)
                if attempt + 1 == attempts:
                    raise
                continue
            try:
                yield url
            finally:
                _stop(proc)
            return


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry: serve CATALOG until interrupted."""
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.sources.serve",
        description="Serve a static STAC catalog as a STAC API on loopback (rustac).",
    )
    parser.add_argument("catalog", help="path to catalog.json")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=7822, help="0 picks a free port")
    args = parser.parse_args(argv)

    def _terminate(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt  # unwinds serve_catalog, which stops the server

    signal.signal(signal.SIGTERM, _terminate)
    try:
        with serve_catalog(args.catalog, args.host, args.port) as url:
            print(url, flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    time.sleep(3600)
    except CatalogUnreachable as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
