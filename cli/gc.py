"""``earthmem gc``: apply the retention to a data directory (old snapshots, old Dagster runs)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from api.errors import InvalidArgument
from cli.commands import existing_data_dir

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add ``gc`` to the ``earthmem`` parser."""
    p = sub.add_parser(
        "gc",
        help="expire cube snapshots and Dagster runs older than the retention window "
        "(the tip, tagged snapshots and each partition's latest run stay)",
    )
    p.add_argument("--data", default=os.environ.get("EARTHMEM_DATA", "data"), help="data directory")
    p.add_argument(
        "--keep-days", default="30", help="retention window in days (default: 30; 0 keeps the tip)"
    )
    p.add_argument(
        "--grace-hours",
        default=None,
        help="on object storage, keep unreachable objects younger than this: writes in flight "
        "on other machines may commit them (default: EARTHMEM_GC_GRACE_HOURS or 24; local disk: 0)",
    )
    p.add_argument("--dry-run", action="store_true", help="report what would go; change nothing")
    p.set_defaults(handler=_gc)


def _gc(args: argparse.Namespace) -> int:
    from store.retention import MAX_DAYS  # deferred: it imports icechunk

    try:
        keep_days = float(args.keep_days)
    except ValueError:
        keep_days = float("nan")
    if not (0 <= keep_days <= MAX_DAYS):
        raise InvalidArgument(
            f"--keep-days must be a number of days in [0, {MAX_DAYS}], got {args.keep_days!r}"
        )
    grace: float | None = None
    if args.grace_hours is not None:
        try:
            grace = float(args.grace_hours)
        except ValueError:
            grace = float("nan")
        if not (0 <= grace <= MAX_DAYS * 24):
            raise InvalidArgument(
                f"--grace-hours must be a number of hours in [0, {MAX_DAYS * 24}],"
                f" got {args.grace_hours!r}"
            )
    data = existing_data_dir(args.data)
    # Deferred: Dagster takes seconds to import (see cli/ingest.py).
    from pipelines.instance import open_instance
    from pipelines.retention import collect

    home = Path(os.environ.get("DAGSTER_HOME") or (data / "dagster_home"))
    if (home / "history").is_dir():  # an instance the ingests used (never create one here)
        with open_instance(home) as instance:
            done = collect(data, instance, keep_days, dry_run=args.dry_run, grace_hours=grace)
    else:
        done = collect(data, None, keep_days, dry_run=args.dry_run, grace_hours=grace)
    verb = "would expire" if args.dry_run else "expired"
    cube = done.cube
    if cube is None:
        print(f"no cube in {data}; ", end="")
    else:
        oldest = (
            f"oldest kept {cube.oldest_kept.id} ({cube.oldest_kept.written_at.isoformat()})"
            if cube.oldest_kept is not None
            else "only the empty root kept"
        )
        print(
            f"cube: {verb} {cube.expired} snapshots older than {cube.cutoff.isoformat()}, "
            f"kept {cube.kept} ({oldest}), deleted {cube.objects_deleted} objects "
            f"({cube.bytes_deleted / 1e6:.1f} MB) unreachable since before "
            f"{cube.collected_before.isoformat()}; ",
            end="",
        )
    print(
        f"dagster: {'would delete' if args.dry_run else 'deleted'} {done.runs_deleted} runs, "
        f"kept {done.runs_kept_latest} old runs holding a partition's latest materialisation"
    )
    return 0
