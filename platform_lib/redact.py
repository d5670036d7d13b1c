"""Secret redaction: the one function every error, log line, MLflow value and page goes through.

`redact(text)` masks secrets (what counts: its docstring) as `MASK`; `install_redaction()`
applies it to every log record and to tracebacks of uncaught exceptions, and
`redacted_output()` to everything a block writes to stdout and stderr. The `drivetrain`
command and the Flyte tasks use all three.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
import traceback
import urllib.parse
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Any, TextIO

__all__ = [
    "MASK",
    "MIN_SECRET_CHARS",
    "RedactingFilter",
    "has_userinfo",
    "install_redaction",
    "is_secret_variable",
    "mask_userinfo",
    "redact",
    "redacted_output",
    "register_secret",
    "register_uri_secrets",
]

MASK = "***"
#: Shortest secret value (characters) masked wherever it appears in a text.
MIN_SECRET_CHARS = 6

#: Environment variables whose values are secrets, beyond the name patterns below.
_SECRET_VARIABLES = frozenset(
    {
        "MLFLOW_TRACKING_PASSWORD",
        "MLFLOW_TRACKING_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_ACCESS_KEY_ID",
        "DATABRICKS_TOKEN",
    }
)
_SECRET_NAME = re.compile(
    r"(_TOKEN|_PASSWORD|_PASSWD|_API_KEY|_ACCESS_KEY|_PRIVATE_KEY)$|SECRET|^_FSEC_", re.IGNORECASE
)
_NOT_SECRET_NAME = re.compile(r"USER(NAME)?$|_TOKEN_(PATH|FILE)$", re.IGNORECASE)

_registered: set[str] = set()
_lock = threading.Lock()

# scheme://user:password@host -> scheme://user:***@host; scheme://token@host -> scheme://***@host
_STOP = r"/\s\"'<>"
# (also "scheme:/user:password@", the form a URL takes after a path normalised its slashes; a
# lone "scheme:/name@" is not userinfo: it is MLflow's `models:/<name>@<alias>`, and a model
# name cannot hold ":")
_USERINFO = re.compile(
    rf"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*:/+)(?P<user>[^{_STOP}:@]*):(?P<password>[^{_STOP}]*)@"
)
_USER_ONLY = re.compile(rf"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^{_STOP}:@]+@")
_SECRET_KEYS = (
    r"[\w.-]*(?:token|signature|password|passwd|secret|credential|api[_-]?key|access[_-]?key"
    r"|private[_-]?key|session[_-]?key)"
)
_VALUE = r"[^&\s\"',;#<>)]+"
# key=value in query strings, command lines and messages (X-Amz-Signature=..., token=...)
# (also percent-encoded, "X-Amz-Signature%3D...", as a URL quoted into a path appears)
_KEY_VALUE = re.compile(rf"(?<![\w.-])(?P<key>[\w.-]+)(?P<sep>=|%3[Dd])(?P<value>{_VALUE})")
_SECRET_KEY = re.compile(rf"(?i){_SECRET_KEYS}")
# short names are secrets only as query parameters (?key=..., &sig=...)
_QUERY_KEY = re.compile(rf"(?i)(?P<key>[?&](?:key|sig|pwd|auth|code|pass))={_VALUE}")
# "password": "..." in JSON, 'token': '...' in a Python repr
_QUOTED = re.compile(
    rf"(?i)(?P<key>[\"'](?:{_SECRET_KEYS})[\"']\s*:\s*)(?P<quote>[\"'])(?:\\.|(?!(?P=quote)).)*(?P=quote)"
)
_AUTHORIZATION = re.compile(
    r"(?i)(?P<head>\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?(?:(?:basic|bearer|token|digest)\s+)?)"
    r"[^\s\"',;]+"
)
_BEARER = re.compile(r"(?i)(?P<head>\bbearer\s+)[A-Za-z0-9._~+/=-]{8,}")
#: Words one of which a secret-named key (`_SECRET_KEYS`) holds: the quoted-key pattern's gate.
_SECRET_WORDS = ("token", "signature", "passw", "secret", "credential", "key")
#: A run of key characters as long as the shortest key shape: the key-shape pattern's gate.
_KEY_RUN = re.compile(r"[A-Za-z0-9/+]{20}|gh[pousr]_|github_pat_")
#: A base64 data URI (an embedded plot): its payload is skipped by the text patterns.
_DATA_URI = re.compile(r"(data:[\w.+/-]+;base64,[A-Za-z0-9+/=]{64,})")
_KEY_SHAPES = re.compile(
    r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b"  # AWS access key id
    r"|(?<![A-Za-z0-9/+=])(?=[A-Za-z0-9/+]*[a-z])(?=[A-Za-z0-9/+]*[A-Z])(?=[A-Za-z0-9/+]*[0-9/+])"
    r"[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"  # AWS secret access key
    r"|\b(?:ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{20,}\b"  # GitHub tokens
    r"|\bdapi[0-9a-f]{32}(?:-\d+)?\b"  # Databricks personal access tokens
)


def has_userinfo(url: str) -> bool:
    """Return True when `url` holds URI userinfo (`scheme://user[:password]@host`)."""
    if "://" not in url:
        return False
    netloc = url.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    return "@" in netloc


def mask_userinfo(url: str) -> str:
    """Return `url` with its userinfo, if any, replaced by `MASK` (`s3://***@host/path`)."""
    if not has_userinfo(url):
        return url
    scheme, rest = url.split("://", 1)
    netloc, sep, path = rest.partition("/")
    return f"{scheme}://{MASK}@{netloc.rsplit('@', 1)[1]}{sep}{path}"


def is_secret_variable(name: str) -> bool:
    """Return True when the environment variable `name` holds a secret (its value is masked)."""
    if name in _SECRET_VARIABLES:
        return True
    return bool(_SECRET_NAME.search(name)) and not _NOT_SECRET_NAME.search(name)


def register_secret(value: str) -> None:
    """Mask `value` in every later `redact` call of this process (e.g. a mounted Flyte secret)."""
    if value and value.strip():
        with _lock:
            _registered.add(value.strip())


def _uri_passwords(text: str) -> set[str]:
    found = {m["password"] for m in _USERINFO.finditer(text) if m["password"]}
    return found | {urllib.parse.unquote(p) for p in found}


def register_uri_secrets(text: str) -> None:
    """Register the password of every URI userinfo in `text` (a command line, an input URL).

    A library may echo the password out of its URI (botocore's "Invalid bucket name
    'user:password@bucket'"); registered, it is masked there too.
    """
    for password in _uri_passwords(text):
        register_secret(password)


def _secret_values() -> list[str]:
    values = {v for k, v in os.environ.items() if v and is_secret_variable(k)}
    for value in os.environ.values():  # MLFLOW_TRACKING_URI=http://user:password@host
        if "@" in value and ":/" in value:
            values |= _uri_passwords(value)
    with _lock:
        values |= _registered
    forms = set()
    for value in values:
        if len(value) >= MIN_SECRET_CHARS:
            forms |= {value, urllib.parse.quote(value, safe=""), urllib.parse.quote_plus(value)}
    return sorted(forms, key=len, reverse=True)  # longest first: a secret holding another


def _mask_values(text: str, values: Iterable[str]) -> str:
    for value in values:
        if value in text:
            text = text.replace(value, MASK)
    return text


def _mask_key_value(match: re.Match[str]) -> str:
    if _SECRET_KEY.fullmatch(match["key"]):
        return f"{match['key']}{match['sep']}{MASK}"
    return match[0]


def redact(text: str) -> str:
    """Return `text` with every secret this process knows of masked as `MASK` (`***`).

    Args:
        text: any text about to leave the process: an error line, a log record, a traceback,
            an MLflow param/tag/artifact, a page.

    Returns:
        The text with secrets replaced; the unchanged text when it holds none.

    Masked, in this order: the values of secret environment variables present at call time
    (`is_secret_variable`: MLFLOW_TRACKING_PASSWORD, AWS_SECRET_ACCESS_KEY, any `*_TOKEN`,
    `*_PASSWORD`, `*SECRET*`, Flyte's `_FSEC_*`, ...), the passwords of URIs held by any
    environment variable (MLFLOW_TRACKING_URI) and secrets registered with `register_secret`
    or `register_uri_secrets` (a Flyte secret read from a mounted file, a URL on the command
    line), raw and percent-encoded, wherever they appear; the password of URI userinfo
    (`scheme://user:***@host`, a lone `scheme://***@host`; MLflow model URIs such as
    `models:/<name>@<alias>` are not userinfo and are kept); values of secret query/key-value
    parameters (`token=`, `X-Amz-Signature=`, `sig=`, `password=`, `?key=`, JSON
    `"password": "..."`); Authorization headers and bearer tokens; and key shapes that are
    secrets wherever they appear (AWS access key ids and 40-character secret keys, GitHub and
    Databricks tokens). Literal values shorter than `MIN_SECRET_CHARS` are not matched on their
    own (masking "1" everywhere would destroy every message); they are still masked where a
    URI or a `key=` names them.
    """
    if not text:
        return text
    text = _mask_values(str(text), _secret_values())
    if "base64," in text:  # an embedded image's payload is data, not text: the patterns skip it
        parts = _DATA_URI.split(text)
        return "".join(p if i % 2 else _redact_patterns(p) for i, p in enumerate(parts))
    return _redact_patterns(text)


def _redact_patterns(text: str) -> str:
    """Mask the pattern-shaped secrets of `text` (userinfo, tokens, keys; see `redact`).

    Each pattern runs only when the text holds the characters or words it needs (a plain
    substring test), so numbers-only text such as a timeline costs a few scans, not nine
    regular expressions.
    """
    lower = text.lower()
    if ":/" in text and "@" in text:
        text = _USERINFO.sub(rf"\g<scheme>\g<user>:{MASK}@", text)
        text = _USER_ONLY.sub(rf"\g<scheme>{MASK}@", text)
    if "uthoriz" in lower:
        text = _AUTHORIZATION.sub(rf"\g<head>{MASK}", text)
    if "bearer" in lower:
        text = _BEARER.sub(rf"\g<head>{MASK}", text)
    if "=" in text or "%3" in text:
        text = _KEY_VALUE.sub(_mask_key_value, text)
        text = _QUERY_KEY.sub(rf"\g<key>={MASK}", text)
    if any(word in lower for word in _SECRET_WORDS):
        text = _QUOTED.sub(rf"\g<key>\g<quote>{MASK}\g<quote>", text)
    if _KEY_RUN.search(text):
        text = _KEY_SHAPES.sub(MASK, text)
    return text


class RedactingFilter(logging.Filter):
    """A `logging.Filter` that redacts a record's message, exception text and stack in place."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact `record` (its message is formatted once, args dropped); always keep it."""
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string: logging reports it itself
            return True
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


_installed = False


def _redacting_excepthook(
    kind: type[BaseException], error: BaseException, tb: TracebackType | None
) -> None:
    sys.stderr.write(redact("".join(traceback.format_exception(kind, error, tb))))
    sys.stderr.flush()


def install_redaction() -> None:
    """Redact every log record of this process and the traceback of an uncaught exception.

    Wraps the log record factory (records of every logger, handlers added later included)
    with `RedactingFilter`, and replaces the default `sys.excepthook`. Idempotent.
    """
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
    redacting = RedactingFilter()
    make_record = logging.getLogRecordFactory()

    def redacted_record(*args: object, **kwargs: object) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        redacting.filter(record)
        return record

    logging.setLogRecordFactory(redacted_record)
    if sys.excepthook is sys.__excepthook__:
        sys.excepthook = _redacting_excepthook


class _RedactingStream:
    """A text stream that writes `redact(text)` to the stream it wraps (one write at a time)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(redact(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def redacted_output() -> Iterator[None]:
    """Redact everything written to `sys.stdout` and `sys.stderr` inside the block.

    Each `write` call is redacted on its own (a `print` is one call); the streams are put back
    when the block ends.
    """
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _RedactingStream(stdout), _RedactingStream(stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = stdout, stderr
