"""User errors: one line that says what is wrong, which input is the culprit and what to do.

Every error a user can fix (a bad override, a missing folder, a full disk) is raised as a
`UserError`; the `drivetrain` command and the Flyte tasks print it as

    error: <what> (<culprit>): <what to do>

and keep the traceback for `--debug` or the log file. Anything else is a bug and keeps its
traceback. Secrets never reach the line (`platform_lib.redact`).
"""

from __future__ import annotations

import errno
import os
from typing import Any

from platform_lib.redact import redact

__all__ = ["UserError", "format_user_error", "to_user_error"]

#: errno values of a full disk or an exhausted quota.
_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
#: errno values of a local file or folder this user may not open (mode bits, ACLs, a mount).
_DENIED = frozenset({errno.EACCES, errno.EPERM})


class UserError(ValueError):
    """A problem with the user's input or environment, with its culprit and the fix.

    Subclasses `ValueError` so that callers catching bad values keep working.

    Attributes:
        what: what is wrong, e.g. "unknown field 'max_stepz'".
        culprit: the input, option, file or URL at fault, e.g. "overrides", "--input".
        fix: what to do, e.g. "use one of batch_size, lr, ...".
    """

    def __init__(self, what: str, culprit: str, fix: str) -> None:
        """Keep the three parts; `str(error)` joins them as `<what> (<culprit>): <fix>`."""
        self.what, self.culprit, self.fix = what, culprit, fix
        super().__init__(f"{what} ({culprit}): {fix}")

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle every attribute, not via `__init__` (a subclass's arguments differ)."""
        return _restore, (type(self), self.args), self.__dict__


def _restore(cls: type[UserError], args: tuple[Any, ...]) -> UserError:
    error = cls.__new__(cls)
    error.args = args
    return error


def format_user_error(error: BaseException) -> str:
    """Return the one-line `error: ...` text of `error` (newlines folded, secrets `redact`ed)."""
    text = " ".join(str(error).split("\n")).strip() or type(error).__name__
    return redact(f"error: {text}")


def to_user_error(error: BaseException, *, where: str = "") -> UserError | None:
    """Return `error` as a `UserError` when the user can fix it, else None (a bug: keep the traceback).

    A `UserError` is returned as is; a full disk or exhausted quota (ENOSPC, EDQUOT) becomes
    "disk full" naming the file being written (or `where`) and the fix; a local file or folder
    this user may not open (EACCES, EPERM with a file name) becomes "permission denied"
    naming it (an object store's denial has no errno: `storage.explain_storage_error`).
    """
    if isinstance(error, UserError):
        return error
    if isinstance(error, OSError) and error.errno in _DISK_FULL:
        target = error.filename or where or "the output folder"
        return UserError(
            f"disk full while writing ({error.strerror or 'no space left on device'})",
            str(target),
            "free space on that disk or write the output to a larger one (--output, TMPDIR)",
        )
    if isinstance(error, PermissionError) and error.errno in _DENIED and error.filename:
        return UserError(
            f"permission denied: user {os.getuid()} may not open it",
            str(error.filename),
            "give this user access to it and to the folders above it (chmod, chown, ACLs) "
            "or use another path",
        )
    return None
