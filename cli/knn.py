"""``earthmem knn upgrade``: rewrite the k-NN tables that an older version wrote."""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add ``knn`` to the ``earthmem`` parser."""
    knn = sub.add_parser("knn", help="the k-NN tables of a data directory")
    knn_sub = knn.add_subparsers(dest="knn_command", required=True, parser_class=knn.__class__)
    up = knn_sub.add_parser(
        "upgrade",
        help="rewrite tables written by an older layout (same rows and answers; exact cosine "
        "scans them pruned again); on an object-storage root, publish the new versions",
    )
    up.add_argument(
        "--data", default=None, help="data directory (default: $EARTHMEM_DATA or ./data)"
    )
    up.set_defaults(handler=_upgrade)


def _upgrade(args: argparse.Namespace) -> int:
    from cli.commands import existing_data_dir

    data = existing_data_dir(args.data)
    # Deferred: the tables load numba (a second of start-up for every other command).
    from store.knn.remote import upgrade_tables

    done = upgrade_tables(data)
    print(
        json.dumps(
            {"tables": {name: "rewritten" if new else "current" for name, new in done.items()}},
            indent=2,
        )
    )
    return 0
