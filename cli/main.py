"""The ``earthmem`` command.

Each subcommand is a thin adapter: parse arguments, call a plain function,
print JSON or text. Bad input exits with status 2 and one line on stderr; a failure
of the environment rather than of the input (a full disk, storage or a memory database
that does not answer: :data:`cli.exits.ENVIRONMENT_CODES`) exits with status 1 and one line.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from cli import commands, gc, ingest, knn, memory, recall
from cli.exits import EXIT_USAGE, report
from store import address, tslot
from store.errors import AddressError

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage dump) and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=False, default=str))


# --------------------------------------------------------------------------- handlers


def _cell_encode(args: argparse.Namespace) -> int:
    print(address.encode(args.lat, args.lng))
    return 0


def _cell_decode(args: argparse.Namespace) -> int:
    _print_json(address.decode(args.cell).as_dict())
    return 0


def _cell_neighbours(args: argparse.Namespace) -> int:
    ring = address.neighbours(args.cell)
    _print_json(dict(zip(address.NEIGHBOUR_ORDER, ring, strict=True)))
    return 0


def _tslot(args: argparse.Namespace) -> int:
    slot = tslot.to_slot(args.date, args.tempo)
    _print_json(
        {
            "tslot": slot,
            "tempo": args.tempo,
            "date": tslot.slot_to_date(slot, args.tempo).isoformat(),
        }
    )
    return 0


def _export(args: argparse.Namespace) -> int:
    # Deferred: the cube and the COG writer import zarr, icechunk and rasterio, which would
    # slow the start-up of every other command.
    from store.cube import band_spec
    from store.export import export_band

    try:
        bbox = tuple(float(v) for v in args.bbox.split(","))
    except ValueError:
        raise AddressError(
            f"--bbox must be four numbers min_lat,min_lng,max_lat,max_lng, got {args.bbox!r}"
        ) from None
    if len(bbox) != 4:
        raise AddressError(
            f"--bbox must be four numbers min_lat,min_lng,max_lat,max_lng, got {args.bbox!r}"
        )
    tempo = band_spec(args.band).tempo
    t0 = tslot.to_slot(args.start, tempo) if args.start else None
    t1 = tslot.to_slot(args.end, tempo) + 1 if args.end else None
    from store.snapshots import object_root

    # the cube on object storage needs no local data directory; on local disk it must exist
    data = args.data or commands.default_data_dir()
    path = export_band(
        data if object_root() is not None else commands.existing_data_dir(args.data),
        args.band,
        (bbox[0], bbox[1], bbox[2], bbox[3]),
        t0,
        t1,
        args.out,
        args.format,
        overwrite=args.overwrite,
    )
    print(path)
    return 0


def _float_arg(name: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            return float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None

    return parse


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (exposed for tests and docs)."""
    p = _Parser(
        prog="earthmem", description="A shared memory of the Earth's surface for AI agents."
    )
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    cell = sub.add_parser("cell", help="cell64 addresses: encode, decode, neighbours")
    cell_sub = cell.add_subparsers(dest="cell_command", required=True, parser_class=_Parser)
    enc = cell_sub.add_parser("encode", help="print the cell64 of LAT LNG")
    enc.add_argument("lat", type=_float_arg("latitude"))
    enc.add_argument("lng", type=_float_arg("longitude"))
    enc.set_defaults(handler=_cell_encode)
    dec = cell_sub.add_parser("decode", help="print JSON with centre and bounds of CELL")
    dec.add_argument("cell")
    dec.set_defaults(handler=_cell_decode)
    nb = cell_sub.add_parser("neighbours", help="print the 3x3 neighbourhood of CELL")
    nb.add_argument("cell")
    nb.set_defaults(handler=_cell_neighbours)

    ts = sub.add_parser("tslot", help="print the time slot of DATE")
    ts.add_argument("date")
    ts.add_argument("--tempo", choices=("day", "year"), default="day")
    ts.set_defaults(handler=_tslot)

    ex = sub.add_parser(
        "export", help="write a band over a bbox and tslot range as COG or plain Zarr"
    )
    ex.add_argument("band", help="e.g. indices.ndvi")
    ex.add_argument("--bbox", required=True, help="min_lat,min_lng,max_lat,max_lng")
    ex.add_argument("--start", help="first date (inclusive), e.g. 2024-01-01")
    ex.add_argument("--end", help="last date (inclusive)")
    ex.add_argument("--format", choices=("cog", "zarr"), default="cog")
    ex.add_argument("--out", required=True)
    ex.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier Zarr export at --out (a GeoTIFF file is always replaced; a"
        " path that is not a Zarr store never is)",
    )
    ex.add_argument(
        "--data", default=None, help="data directory (default: $EARTHMEM_DATA or ./data)"
    )
    ex.set_defaults(handler=_export)

    commands.register(sub)
    ingest.register(sub)
    memory.register(sub)
    recall.register(sub)
    gc.register(sub)
    knn.register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``earthmem`` console command."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except Exception as exc:
        status = report(exc)
        if status is None:
            raise  # not a foreseeable failure: a bug, shown whole
        return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
