"""Error handling at the task boundary: retryable storage errors and one-line user errors.

Every task body runs inside `task_errors(what, url)`, which turns a transient storage error
into `FlyteRecoverableException`, a user error into its one line plus `PipelineInputError`,
and leaves a bug its traceback; every message, the errors.log traceback and the task's log
records go through `platform_lib.redact`. `download_input` fetches a FlyteDirectory/FlyteFile
input and names the stale cache when a cached task's output was deleted.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import click
from flytekit.exceptions.user import FlyteRecoverableException
from flytekit.types.directory import FlyteDirectory
from flytekit.types.file import FlyteFile

from platform_lib.errors import UserError, to_user_error
from platform_lib.logs import report_user_error, setup_logging
from platform_lib.redact import register_uri_secrets
from platform_lib.storage import explain_location_error, explain_storage_error, is_transient

__all__ = [
    "PipelineInputError",
    "RetryableStorageError",
    "download_input",
    "stale_cache_error",
    "task_errors",
]


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


class RetryableStorageError(FlyteRecoverableException, click.exceptions.Exit):
    """A store that stayed unreachable through the task's own retries, after its one line was printed.

    A `FlyteRecoverableException`, so a cluster retries the task (`retries=`); also a
    `click.exceptions.Exit` (exit code 1), which `pyflyte run` hands to click, so a local run
    (which never retries) ends with the line and no traceback. `str(error)` is the line.
    """

    def __init__(self, message: str) -> None:
        """Keep `message` as the error text; exit code 1."""
        click.exceptions.Exit.__init__(self, 1)
        self.args = (message,)
        self.message = message

    def __str__(self) -> str:
        """Return the one-line message."""
        return self.message


@contextlib.contextmanager
def task_errors(what: str, url: str = "") -> Iterator[None]:
    """Classify an error leaving a task body.

    - a transient storage error (`platform_lib.storage.is_transient`: connection refused/reset,
      timeouts, throttling) is printed as one line naming the store and saying to retry
      (`storage.explain_location_error`) and leaves the task as `RetryableStorageError`, a
      `FlyteRecoverableException`, which Flyte retries (`retries=`; on a cluster only, local
      runs never retry);
    - a user error (`platform_lib.errors.UserError`, bad credentials for `url`, a full disk)
      is printed as the single line `error: <what> (<culprit>): <what to do>` on stderr and
      leaves the task as `PipelineInputError`; the traceback is appended to
      `$DRIVETRAIN_HOME/logs/errors.log` (`platform_lib.logs.report_user_error`). On a
      cluster the line is the execution's error message;
    - anything else is a bug and keeps its traceback.

    From the first `task_errors` on, every log record of the task's process is redacted.

    Args:
        what: the operation, for messages (e.g. "reading raw_logs").
        url: the storage location involved, named in credential errors.

    Raises:
        RetryableStorageError: for transient storage errors (a `FlyteRecoverableException`).
        PipelineInputError: for user errors (one line, printed to stderr first).
    """
    setup_logging()
    register_uri_secrets(url)
    try:
        yield
    except (FlyteRecoverableException, PipelineInputError):
        raise
    except Exception as exc:
        user = to_user_error(exc, where=url) or (explain_storage_error(exc, url) if url else None)
        if user is not None:
            line, log = report_user_error(user, exc, f"task {what} {url}".strip())
            raise PipelineInputError(line + (f" [traceback: {log}]" if log else "")) from exc
        if is_transient(exc):
            store = explain_location_error(exc, url or "the store")  # names the store, "retry"
            unreachable = UserError(
                f"transient storage error while {f'{what} {url}'.strip()} ({type(exc).__name__}: "
                f"{store.what if store else exc})",
                store.culprit if store else url or "the store",
                f"{store.fix if store else 'retry'}; on a cluster Flyte retries this task",
            )
            line, _ = report_user_error(unreachable, exc, f"task {what} {url}".strip())
            raise RetryableStorageError(line) from exc
        raise


def stale_cache_error(path: str, producer: str) -> UserError:
    """Return the error of a cached output that no longer exists, naming the cache and its fix."""
    return UserError(
        f"the cached output of task {producer} no longer exists (flytekit local cache "
        "~/.flyte/local-cache points at deleted files)",
        path,
        "clear the cache with `pyflyte local-cache clear` (or `make clean-cache`) and run again",
    )


def download_input(value: FlyteDirectory | FlyteFile, producer: str) -> str:
    """Return a local path of a FlyteDirectory/FlyteFile input, downloading a remote one.

    Raises:
        UserError: the output of the (cached) task `producer` was deleted.
    """
    source = str(value.remote_source or value.path)
    try:
        local = value.download()
    except FileNotFoundError:
        raise stale_cache_error(source, producer) from None
    if not Path(local).exists():
        raise stale_cache_error(source, producer)
    return str(local)
