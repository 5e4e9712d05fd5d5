"""The main job behind ``make run``: build the demo sample area, ingest it through Dagster, answer queries.

python -m cli.demo [--data data] [--size demo|tiny] [--serve]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cli.demo_memories import write_demo_memories
from cli.examples import run_examples
from cli.ingest import ingest
from cli.main import main as cli_main
from pipelines.sample import build_sample
from store import address, blocks, tslot

__all__ = ["main"]


def _progress(stage: str, done: int, total: int) -> None:
    end = "\n" if done >= total else ""
    print(f"\r  {stage}: {done}/{total}", end=end, file=sys.stderr, flush=True)


def _address_demo() -> None:
    cell = address.encode(23.36, 85.33)
    geo = address.decode(cell)
    blk = blocks.block_of(geo.lat_q, geo.lng_q, 7)
    print(
        f"  cell64 of (23.36, 85.33): {cell}; centre ({geo.lat:.6f}, {geo.lng:.6f}); block {blk.id}"
    )
    print(
        f"  tslot of 2024-03-15: day {tslot.day_slot('2024-03-15')}, year {tslot.year_slot('2024-03-15')}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default="data", help="data directory (default: ./data)")
    ap.add_argument("--size", choices=("tiny", "demo"), default="demo")
    ap.add_argument("--serve", action="store_true", help="start the query API afterwards")
    args = ap.parse_args(argv)
    data = Path(args.data)
    sample = data / "sample"

    print("== 1/5 address algebra")
    _address_demo()

    print(f"== 2/5 {args.size} sample area -> {sample}")
    if (sample / "manifest.json").exists():
        print("  already built (remove it to rebuild)")
    else:
        build_sample(sample, size=args.size, progress=_progress)

    print(f"== 3/5 ingest through Dagster -> {data} (DAGSTER_HOME={data / 'dagster_home'})")
    report = ingest(data)
    if report.failed:
        print(f"  failed partitions: {report.failed}", file=sys.stderr)
        return 1

    print("== 4/5 queries")
    manifest = json.loads((sample / "manifest.json").read_text())
    run_examples(data, manifest)
    print("== 5/5 memories (checked against the cube)")
    write_demo_memories(data, manifest, sample / "manifest.json")
    if args.serve:
        return cli_main(["serve", "--data", str(data)])
    print(f"\nserve the API: .venv/bin/earthmem serve --data {data}   (REST /v1/..., MCP at /mcp)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
