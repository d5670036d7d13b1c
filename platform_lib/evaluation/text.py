"""How an interval (`bootstrap.Interval.to_dict`) reads in tables, tags and version descriptions.

A metric reads as its estimate with its interval, or marked with the reason it has none; a
paired difference (what the promotion rule decides on) never reads as a number without an
interval, only as the reason ("insufficient: 2 logs").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["format_difference", "format_metric", "logs_text"]


def logs_text(num_logs: int) -> str:
    """Return "1 log" or "<n> logs"."""
    return f"{num_logs} log" if num_logs == 1 else f"{num_logs} logs"


def format_metric(interval: Mapping[str, Any]) -> str:
    """Return one model's metric with its interval, or its estimate marked as having none.

    E.g. "0.4521 [0.4012, 0.5011]", "0.4521 (insufficient: 2 logs)" or "undefined".
    """
    if interval["status"] == "ok":
        return f"{interval['estimate']:.4f} [{interval['low']:.4f}, {interval['high']:.4f}]"
    if interval["estimate"] is None:
        return str(interval["status"])
    return f"{interval['estimate']:.4f} ({interval['status']}: {logs_text(interval['num_logs'])})"


def format_difference(interval: Mapping[str, Any]) -> str:
    """Return a paired difference with its interval, or without one only the reason (no number).

    E.g. "+0.0400 [+0.0100, +0.0700]", "insufficient: 2 logs" or "undefined".
    """
    if interval["status"] == "ok":
        return f"{interval['estimate']:+.4f} [{interval['low']:+.4f}, {interval['high']:+.4f}]"
    if interval["status"] == "insufficient":
        return f"insufficient: {logs_text(interval['num_logs'])}"
    return str(interval["status"])
