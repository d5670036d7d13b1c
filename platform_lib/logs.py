"""The one logging setup of the `drivetrain` command and the Flyte tasks, and the one place that reports a user error.

`report_user_error` prints the one line `error: <what> (<culprit>): <what to do>` on stderr and
logs the traceback to `$DRIVETRAIN_HOME/logs/errors.log` only (the `drivetrain.errors` logger's
file handler, opened at the first report; the file is mode 0600, its folder created 0700). Library modules log diagnostics with
`logging.getLogger(__name__)` and use `warnings.warn` only for warnings to their caller.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

from platform_lib.errors import format_user_error
from platform_lib.redact import RedactingFilter, install_redaction

__all__ = ["errors_log_path", "report_user_error", "setup_logging"]

#: The logger whose records (tracebacks of reported user errors) go to errors.log only.
ERRORS_LOGGER = logging.getLogger("drivetrain.errors")
ERRORS_LOGGER.propagate = False


def setup_logging() -> None:
    """Redact every log record and uncaught traceback of this process (idempotent)."""
    install_redaction()


def errors_log_path() -> Path:
    """Return `$DRIVETRAIN_HOME/logs/errors.log` (default `~/.drivetrain/logs/errors.log`)."""
    home = Path(os.environ.get("DRIVETRAIN_HOME") or "~/.drivetrain").expanduser()
    return home / "logs" / "errors.log"


def _errors_handler() -> Path | None:
    """Point `ERRORS_LOGGER` at the current errors.log; return it, or None when it cannot be opened."""
    path = errors_log_path()
    for handler in list(ERRORS_LOGGER.handlers):
        if isinstance(handler, logging.FileHandler) and handler.baseFilename == str(
            path.absolute()
        ):
            return path
        ERRORS_LOGGER.removeHandler(handler)  # DRIVETRAIN_HOME changed since
        handler.close()
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600))
        if path.stat().st_uid == os.getuid():
            path.chmod(0o600)  # one created before this rule: tracebacks are this user's only
        handler = logging.FileHandler(path, encoding="utf-8")
    except OSError:
        return None
    formatter = logging.Formatter(
        "--- %(asctime)s pid %(process)d %(message)s", datefmt="%Y-%m-%dT%H:%M:%SZ"
    )
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    handler.addFilter(RedactingFilter())
    ERRORS_LOGGER.addHandler(handler)
    return path


def report_user_error(
    user: BaseException, error: BaseException, context: str
) -> tuple[str, Path | None]:
    """Print `user` as its one `error: ...` line on stderr; log the traceback of `error` to errors.log.

    Args:
        user: the error as the user sees it (a `platform_lib.errors.UserError`).
        error: the exception raised, whose traceback is logged.
        context: what was running (the command line, the task), the log entry's header.

    Returns:
        (the printed line, the errors.log path, or None when it could not be opened).
    """
    line = format_user_error(user)
    path = _errors_handler()
    if path is not None:
        ERRORS_LOGGER.error("%s", context, exc_info=error)
    print(line, file=sys.stderr, flush=True)
    return line, path
