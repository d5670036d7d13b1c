"""Fingerprint of a root cause: class, rule and the root line with what varies removed.

The same bug, OOM or bad shard gives the same fingerprint on every attempt (other rank, pid,
step, node, time, temporary folder); a different failure gives another. The restart policy
compares fingerprints across attempts (`policy.decide_restart`).
"""

from __future__ import annotations

import hashlib
import re

from platform_lib.triage.taxonomy import FailureClass

__all__ = ["fingerprint", "normalise_line"]

_NORMALISERS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), r)
    for p, r in (
        (r"^\[?[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d+ [^\]]*\]\s*", ""),  # glog header
        (r"\d{4}-\d{2}-\d{2}[T _]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?", "<time>"),
        (r"\b[A-Z][a-z]{2} +\d{1,2} \d{2}:\d{2}:\d{2}\b", "<time>"),
        (r"\[(?:PG [^\]]*?)?Rank \d+\]|\brank ?\d+\b", "<rank>"),
        (r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", "<uuid>"),
        (r"\b0x[0-9a-fA-F]+\b", "<hex>"),
        (r"\b[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.\d)?\b", "<pci>"),
        (r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b", "<ip>"),
        (r"/tmp/[^\s'\"]+|/var/folders/[^\s'\"]+", "<tmp>"),
        (r"\b[0-9a-f]{16,}\b", "<hash>"),
        (r"\d+(?:\.\d+)?", "<n>"),
        (r"\s+", " "),
    )
)


def normalise_line(message: str) -> str:
    """Return `message` with times, ranks, ids, addresses, temp paths and numbers replaced.

    Example: `[Rank 3] ... SeqNum=1580 ... ran for 600060 milliseconds` ->
    `<rank> ... SeqNum=<n> ... ran for <n> milliseconds`.
    """
    text = message.strip()
    for pattern, repl in _NORMALISERS:
        text = pattern.sub(repl, text)
    return text.strip()


def fingerprint(
    failure_class: FailureClass | None, rule: str | None, message: str | None = None
) -> str:
    """Return `class/rule/hash12` of a root cause (`none` when there is none).

    The hash covers the normalised root line, so the same failure on another rank, pid,
    step or node has the same fingerprint.
    """
    if failure_class is None or rule is None:
        return "none"
    digest = hashlib.sha256(normalise_line(message or "").encode()).hexdigest()[:12]
    return f"{failure_class}/{rule}/{digest}"
