"""The `drivetrain` command: one argparse subcommand group per area.

Groups register themselves through `COMMAND_GROUPS`: each entry is a function
`add_<group>_commands(subparsers)` that adds its group parser and sets `func` on every leaf
(`func(args) -> int` exit code). To add a group (e.g. `drivetrain bench loader`), write
`add_bench_commands` next to its code and append it to `COMMAND_GROUPS` below.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from platform_lib.loading.commands import add_bench_commands
from platform_lib.registry.commands import add_goodput_commands, add_zoo_commands
from platform_lib.shards.commands import add_data_commands
from platform_lib.triage.commands import add_triage_command

__all__ = ["COMMAND_GROUPS", "build_parser", "main"]

#: Functions that add one subcommand group each to the top-level subparsers.
COMMAND_GROUPS: list[Callable[[argparse._SubParsersAction], None]] = [
    add_data_commands,
    add_bench_commands,
    add_triage_command,
    add_goodput_commands,
    add_zoo_commands,
]


def build_parser() -> argparse.ArgumentParser:
    """Return the `drivetrain` argument parser with every registered command group."""
    parser = argparse.ArgumentParser(
        prog="drivetrain",
        description="Drivetrain: raw driving logs -> shards -> training -> registry.")
    groups = parser.add_subparsers(dest="group", metavar="GROUP", required=True)
    for add_group in COMMAND_GROUPS:
        add_group(groups)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `drivetrain` command; return its exit status (0 = success)."""
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
