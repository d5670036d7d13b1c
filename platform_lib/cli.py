"""The `drivetrain` command: one argparse subcommand group per area.

To add a group, write `add_<group>_commands(subparsers)` next to its code (it adds the group's
parser and sets `func(args) -> int` on every leaf) and append it to `COMMAND_GROUPS`.
Benchmarks are scripts in `bench/`, not commands. A command raises; `main` prints a user error
(`platform_lib.errors.UserError`, a bad dataset, a full disk, an unreachable store, missing
credentials) as one redacted line `error: <what> (<culprit>): <what to do>` and returns 1 (2 for
bad arguments), the traceback going to `$DRIVETRAIN_HOME/logs/errors.log` (`--debug` shows it
instead); anything else is a bug and keeps its traceback. See docs/architecture.md, "Errors".
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Sequence

from platform_lib.errors import UserError, format_user_error, to_user_error
from platform_lib.loading.commands import add_plan_command
from platform_lib.logs import report_user_error, setup_logging
from platform_lib.redact import redacted_output, register_uri_secrets
from platform_lib.shards.commands import add_data_commands
from platform_lib.telemetry.commands import add_goodput_commands
from platform_lib.triage.commands import add_triage_command
from platform_lib.zoo.commands import add_zoo_commands

__all__ = ["COMMAND_GROUPS", "build_parser", "explain_error", "main"]

#: Functions that add one subcommand group each to the top-level subparsers.
COMMAND_GROUPS: list[Callable[[argparse._SubParsersAction], None]] = [
    functools.partial(add_data_commands, more=[add_plan_command]),
    add_triage_command,
    add_goodput_commands,
    add_zoo_commands,
]


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one redacted line (a bad value may be a URL with a password)."""

    def error(self, message: str):
        """Print `message` as one line `error: ... (<command>): see <command> --help`; exit 2.

        argparse's hook; the usage is left to `--help` (a bad argument is one line, as every
        other error).
        """
        line = format_user_error(UserError(message, self.prog, f"see `{self.prog} --help`"))
        self.exit(2, line + "\n")


def build_parser() -> argparse.ArgumentParser:
    """Return the `drivetrain` argument parser with every registered command group."""
    parser = _Parser(
        prog="drivetrain",
        description="Drivetrain: raw driving logs -> shards -> training -> registry.",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the full traceback of an error instead of one line",
    )
    groups = parser.add_subparsers(dest="group", metavar="GROUP", required=True)
    for add_group in COMMAND_GROUPS:
        add_group(groups)
    return parser


def explain_error(
    error: BaseException, culprit: str, output: str | None = None
) -> UserError | None:
    """Return the one-line `UserError` of an error the user can act on, else None (a bug).

    Args:
        error: what a command raised.
        culprit: the command's main input (folder or URL), named when the error has no culprit.
        output: the folder the command writes, named for a full disk.
    """
    user = to_user_error(error, where=output or culprit)
    if user is not None:
        return user
    from platform_lib.storage import explain_location_error

    user = explain_location_error(error, culprit)  # credentials, bucket name, unreachable store
    if user is not None:
        return user
    if type(error).__module__.startswith("platform_lib.shards"):
        from platform_lib.shards.check import explain_dataset_error
        from platform_lib.shards.errors import DatasetError

        if isinstance(error, DatasetError):
            return explain_dataset_error(error, culprit)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `drivetrain` command; return its exit status (0 = success, 1 = error, 2 = usage)."""
    setup_logging()
    argv = sys.argv[1:] if argv is None else list(argv)
    register_uri_secrets(" ".join(argv))
    with redacted_output():
        return _run(argv)


def _run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except Exception as exc:
        culprit = next(
            (
                str(getattr(args, name))
                for name in ("input", "dataset", "target", "output")
                if getattr(args, name, None)
            ),
            "drivetrain",
        )
        output = str(args.output) if getattr(args, "output", None) else None
        user = None if args.debug else explain_error(exc, culprit, output)
        if user is None:
            raise
        report_user_error(user, exc, f"drivetrain {argv}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
