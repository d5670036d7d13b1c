"""Cron expressions of scheduled launch plans, checked before Flyte ever sees them.

flytekit's `CronSchedule` rejects a bad expression with a message that names neither the
launch-plan input nor the cron field at fault. `check_cron` parses with croniter (the parser
flytekit and flyteadmin's native scheduler use) and, on failure, re-parses each of the five
fields alone to say which one is wrong.
"""

from __future__ import annotations

import croniter

__all__ = ["CRON_FIELDS", "check_cron"]

#: The five fields of a standard cron expression, in order (crontab(5)).
CRON_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
#: The `@` shorthands croniter accepts for whole expressions.
CRON_ALIASES = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")


def _parses(expression: str) -> bool:
    try:
        croniter.croniter(expression)
    except (ValueError, KeyError, TypeError, croniter.CroniterError):
        return False
    return True


def check_cron(expression: str, *, field: str = "schedule") -> str:
    """Return `expression` if it is a valid 5-field cron expression (or an `@` alias).

    Args:
        expression: e.g. "0 3 * * *" (03:00 every day, in the scheduler's time zone, UTC
            on flyteadmin's native scheduler).
        field: the input or setting the expression came from, named in the error.

    Raises:
        ValueError: naming `field`, the expression and the first bad cron field (minute,
            hour, day-of-month, month or day-of-week), or the wrong field count.
    """
    text = " ".join(str(expression).split())
    if text.startswith("@"):
        if text in CRON_ALIASES:
            return text
        raise ValueError(
            f"{field}={expression!r} is not a cron alias; use one of @hourly, "
            "@daily, @weekly, @monthly, @yearly or a 5-field expression"
        )
    parts = text.split(" ")
    if len(parts) != len(CRON_FIELDS):
        raise ValueError(
            f"{field}={expression!r} has {len(parts) if text else 0} fields; a cron "
            f"expression has 5: {' '.join(CRON_FIELDS)} (e.g. '0 3 * * *')"
        )
    if _parses(text):
        return text
    for i, name in enumerate(CRON_FIELDS):
        alone = ["*"] * len(CRON_FIELDS)
        alone[i] = parts[i]
        if not _parses(" ".join(alone)):
            raise ValueError(
                f"{field}={expression!r}: cron field {name} ({parts[i]!r}) is "
                "invalid; see crontab(5) for its allowed values"
            )
    raise ValueError(
        f"{field}={expression!r} is not a valid cron expression (its fields are "
        "valid alone but not together, e.g. a day that no month has)"
    )
