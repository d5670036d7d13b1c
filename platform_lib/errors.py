"""User errors: one line that says what is wrong, which input is the culprit and what to do.

Every error a user can fix (a bad override, a missing folder, a full disk) is raised as a
`UserError`; the `drivetrain` command and the Flyte tasks print it as

    error: <what> (<culprit>): <what to do>

and keep the traceback for `--debug` or the log file. Anything else is a bug and keeps its
traceback.
"""

from __future__ import annotations

__all__ = ["UserError", "format_user_error"]


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

    def __reduce__(self) -> tuple[type[UserError], tuple[str, str, str]]:
        """Pickle with the three parts (errors cross process boundaries in elastic workers)."""
        return type(self), (self.what, self.culprit, self.fix)


def format_user_error(error: BaseException) -> str:
    """Return the one-line `error: ...` text of `error` (newlines folded into spaces)."""
    text = " ".join(str(error).split("\n")).strip() or type(error).__name__
    return f"error: {text}"
