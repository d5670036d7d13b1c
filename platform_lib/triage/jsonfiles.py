"""Bounded reading of JSON evidence files (exit codes, pod status, torchelastic `error.json`).

Evidence files are written by whatever ran the failed job (a launcher, a kubelet dump, a
user's script), so every one is read as untrusted input: a regular file only (`fsguard`),
at most `MAX_JSON_BYTES`, UTF-8, nested at most `MAX_JSON_DEPTH` deep, then taken apart with
typed accessors that return nothing for a value of an unexpected type instead of raising.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from platform_lib.fsguard import read_regular

__all__ = [
    "MAX_JSON_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_TEXT_CHARS",
    "UnreadableJSONError",
    "as_list",
    "as_mapping",
    "as_text",
    "read_json",
]

#: Largest JSON evidence file read, in bytes (a pod status is a few KiB).
MAX_JSON_BYTES = 4 * 1024 * 1024
#: Deepest nesting of arrays and objects accepted (a pod status nests about 6 deep).
MAX_JSON_DEPTH = 64
#: Characters of one JSON string value kept when it is rendered into an evidence line.
MAX_TEXT_CHARS = 2000

_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


class UnreadableJSONError(ValueError):
    """A JSON evidence file that cannot be used at all (syntax, encoding, size, nesting)."""


def _check_depth(text: str, limit: int) -> None:
    depth = 0
    for m in _TOKEN.finditer(text):
        token = m.group()
        if token in "[{":
            depth += 1
            if depth > limit:
                raise UnreadableJSONError(f"nested more than {limit} deep")
        elif token in "]}":
            depth -= 1


def read_json(path: str | Path) -> Any:
    """Return the JSON value of the evidence file `path`.

    Raises:
        NotRegularFileError: `path` is a FIFO, device, socket or directory.
        UnreadableJSONError: larger than `MAX_JSON_BYTES`, not UTF-8, nested deeper than
            `MAX_JSON_DEPTH`, not JSON, or holding a number Python refuses (over 4300
            digits); the message says which.
        OSError: the file cannot be opened.
    """
    data = read_regular(path, max_bytes=MAX_JSON_BYTES + 1)
    if len(data) > MAX_JSON_BYTES:
        raise UnreadableJSONError(f"larger than {MAX_JSON_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableJSONError(f"not UTF-8 (byte {exc.start})") from exc
    _check_depth(text, MAX_JSON_DEPTH)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, huge integers
        raise UnreadableJSONError(f"not JSON ({exc})") from exc


def as_mapping(value: Any) -> Mapping[str, Any] | None:
    """`value` if it is a JSON object, else None."""
    return value if isinstance(value, Mapping) else None


def as_list(value: Any) -> Sequence[Any]:
    """`value` if it is a JSON array, else an empty tuple."""
    return value if isinstance(value, list | tuple) else ()


def as_text(value: Any, default: str = "") -> str:
    """A JSON scalar as text (cut to `MAX_TEXT_CHARS`); `default` for null, arrays and objects."""
    if value is None or isinstance(value, Mapping | list | tuple):
        return default
    return str(value)[:MAX_TEXT_CHARS]
