"""Training class groups: the order of the BEV target channels (a contract; imports nothing)."""

from __future__ import annotations

__all__ = ["CLASS_GROUPS"]

#: Training class groups, in the order of the BEV target channels; any other label is "other".
CLASS_GROUPS: tuple[str, ...] = ("vehicle", "pedestrian", "cyclist")
