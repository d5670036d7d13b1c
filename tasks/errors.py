"""Error handling at the task boundary: retryable storage errors and one-line user errors.

Flyte retries a task (`retries=`) on `FlyteRecoverableException` (and on system errors); any
other exception is a user error and fails the execution at once. Local runs (`pyflyte run`
without `--remote`) never retry; clusters do.

A `platform_lib.errors.UserError` (bad input: overrides, a missing folder, a full disk) leaves
a task as the single line `error: <what> (<culprit>): <what to do>` on stderr and a
`PipelineInputError`, which `pyflyte run` hands to click (a `click.exceptions.Exit`), so a
local run ends there without a traceback, exit code 2; the traceback is appended to
`$DRIVETRAIN_HOME/logs/errors.log`. On a cluster the line is the execution's error message.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path

import click
from flytekit.exceptions.user import FlyteRecoverableException

from platform_lib.errors import UserError, format_user_error
from platform_lib.pipeline import is_transient_storage_error

__all__ = ["PipelineInputError", "recoverable_storage_errors", "user_errors"]


class PipelineInputError(click.exceptions.Exit):
    """A user error leaving a task, after its one `error: ...` line was printed to stderr.

    A `click.exceptions.Exit` (exit code 2), which `pyflyte run` hands to click, so a local
    run ends with the line and no traceback; `str(error)` is the line, which a cluster
    records as the execution's error message.
    """

    def __init__(self, message: str) -> None:
        """Keep `message` as the error text; exit code 2 (usage error)."""
        super().__init__(2)
        self.args = (message,)
        self.message = message

    def __str__(self) -> str:
        """Return the one-line message."""
        return self.message


def _log_traceback(error: BaseException) -> Path | None:
    """Append the traceback of `error` to `$DRIVETRAIN_HOME/logs/errors.log`; return the file."""
    home = Path(os.environ.get("DRIVETRAIN_HOME") or "~/.drivetrain").expanduser()
    path = home / "logs" / "errors.log"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as log:
            log.write(f"--- {datetime.datetime.now(datetime.UTC).isoformat()} pid {os.getpid()}\n")
            log.write("".join(traceback.format_exception(error)))
    except OSError:
        return None
    return path


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn a `UserError` raised inside into a one-line `PipelineInputError` (traceback logged).

    Raises:
        PipelineInputError: for every `platform_lib.errors.UserError`.
    """
    try:
        yield
    except UserError as exc:
        line = format_user_error(exc)
        log = _log_traceback(exc)
        print(line, file=sys.stderr, flush=True)
        raise PipelineInputError(line + (f" [traceback: {log}]" if log else "")) from exc


@contextlib.contextmanager
def recoverable_storage_errors(what: str) -> Iterator[None]:
    """Re-raise transient storage errors (ECONNRESET, timeouts, ...) as retryable.

    Args:
        what: the operation, for the message (e.g. "reading raw_logs=s3://bucket/logs").

    Raises:
        FlyteRecoverableException: for `is_transient_storage_error` errors.
    """
    try:
        yield
    except Exception as exc:
        if is_transient_storage_error(exc):
            raise FlyteRecoverableException(
                f"transient storage error while {what}: {exc!r}; Flyte retries this task"
            ) from exc
        raise
