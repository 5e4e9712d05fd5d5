"""Subcommands beyond the address algebra: sample, run, serve, mcp, intent, verify, export.

Each handler imports its layer lazily, so ``earthmem cell ...`` stays fast.
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add the layer subcommands to the ``earthmem`` parser."""
    sample = sub.add_parser("sample", help="the bundled sample area")
    sample_sub = sample.add_subparsers(
        dest="sample_command", required=True, parser_class=sample.__class__
    )
    build = sample_sub.add_parser("build", help="generate the sample area and its STAC catalog")
    build.add_argument("--size", choices=("tiny", "demo"), default="demo")
    build.add_argument(
        "--out", default="data/sample", help="output directory (default: data/sample)"
    )
    build.add_argument("--seed", type=int, default=0)
    build.set_defaults(handler=_sample_build)


def _sample_build(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from pipelines.sample import build_sample

    def progress(stage: str, done: int, total: int) -> None:
        print(
            f"\r  {stage}: {done}/{total}",
            end="" if done < total else "\n",
            file=sys.stderr,
            flush=True,
        )

    info = build_sample(Path(args.out), size=args.size, seed=args.seed, progress=progress)
    print(f"sample area ({args.size}) written to {info.root}")
    return 0
