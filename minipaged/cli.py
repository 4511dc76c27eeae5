"""The ``minipaged`` command line.

Subcommands that later work will provide say so plainly and exit with status 2; none prints
made-up output.
"""

from __future__ import annotations

import argparse
import sys

# Subcommand -> the part of the project that will provide it.
NOT_YET_AVAILABLE = {
    "tui": "the Textual step-through visualizer",
    "generate": "the engine and the embedded tiny model",
    "simulate": "the real-scale simulator and baseline allocators",
    "bench": "the benchmark suite",
    "trace": "trace recording and replay",
    "exercises": "the classroom exercises and grader",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="minipaged",
        description="PagedAttention's paged KV-cache memory manager, to read, run and teach.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    sub.add_parser(
        "demo",
        help="a narrated walk through the block manager: allocate, fork, copy-on-write, swap",
    )
    for name, part in NOT_YET_AVAILABLE.items():
        sub.add_parser(name, help=f"not yet available (comes with {part})")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        from minipaged import walkthrough

        walkthrough.run()
        return 0
    print(
        f"minipaged {args.command}: not yet available; it comes with "
        f"{NOT_YET_AVAILABLE[args.command]}. Try `minipaged demo`.",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
