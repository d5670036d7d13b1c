"""Error classification at the task boundary: transient storage errors become retryable.

Flyte retries a task (`retries=`) on `FlyteRecoverableException` (and on system errors); any
other exception is a user error and fails the execution at once. Local runs (`pyflyte run`
without `--remote`) never retry; clusters do.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from flytekit.exceptions.user import FlyteRecoverableException

from platform_lib.pipeline import is_transient_storage_error

__all__ = ["recoverable_storage_errors"]


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
