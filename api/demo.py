"""The main job behind ``make run``: build the demo sample area, ingest it, answer queries.

Stages run in order and each prints what it did. Stages whose layer is not
built yet say so instead of pretending.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from store import address, tslot

__all__ = ["main"]


def _address_demo() -> None:
    place = (23.36, 85.33)
    cell = address.encode(*place)
    geo = address.decode(cell)
    print(f"cell64 of {place}: {cell}")
    print(
        f"  centre ({geo.lat:.6f}, {geo.lng:.6f}); neighbours: {', '.join(address.neighbours(cell)[:3])}, ..."
    )
    blk = address.block_of(geo.lat_q, geo.lng_q, 7)
    print(
        f"  level-7 block {blk.id}, bounds {tuple(round(v, 5) for v in address.block_bounds(blk))}"
    )
    print(
        f"  tslot of 2024-03-15: day {tslot.day_slot('2024-03-15')}, year {tslot.year_slot('2024-03-15')}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default="data", help="data directory (default: ./data)")
    ap.add_argument("--size", choices=("tiny", "demo"), default="demo")
    args = ap.parse_args(argv)
    data = Path(args.data)
    print("== earthmem: address algebra")
    _address_demo()
    try:
        from pipelines.sample import build_sample
    except ImportError:
        print("== sample area: generator not available in this build")
        return 0
    print(f"== building the {args.size} sample area under {data / 'sample'}")
    info = build_sample(data / "sample", size=args.size, progress=_progress)
    print(json.dumps({"sample": str(info.root)}, indent=2))
    return 0


def _progress(stage: str, done: int, total: int) -> None:
    end = "\n" if done >= total else ""
    print(f"\r  {stage}: {done}/{total}", end=end, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
