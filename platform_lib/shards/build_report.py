"""Per-reason accounting of bad frames in a build (the failure report and the quarantine table)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from platform_lib.sources.frame import FrameError

__all__ = ["BadFrames"]

_EXAMPLES = 3


class BadFrames:
    """Collects FrameErrors; nothing is dropped silently, every one is counted by reason."""

    def __init__(self, *, input_root: str | Path | None = None) -> None:
        # Raw-file paths in errors are built from the input as given (often relative to the
        # working directory): strip that spelling as well as the absolute one, longest first,
        # so the manifest does not depend on where the build ran.
        prefixes: set[str] = set()
        if input_root is not None:
            prefixes = {os.path.abspath(input_root), str(Path(input_root))} - {".", os.sep}
        self._prefixes = sorted(prefixes, key=len, reverse=True)
        self._items: list[dict[str, Any]] = []

    def _relative(self, text: str) -> str:
        for prefix in self._prefixes:
            # only where a path starts (text start, or after a space, quote or bracket)
            pattern = r"(?<![^\s'\"(\[])" + re.escape(prefix.rstrip(os.sep) + os.sep)
            text = re.sub(pattern, "", text)
        return text

    def add(self, error: FrameError) -> None:
        """Record `error` under its `.reason`, with its `.path` and sample key.

        The key is `.key` when `prepare_frame` set it, else `<log_id>_<frame:06d>` when the
        error names a frame, else "" (a log-level error).
        """
        key = getattr(error, "key", None)
        if key is None and error.log_id is not None and error.frame_index is not None:
            key = f"{error.log_id}_{int(error.frame_index):06d}"
        path = error.path
        self._items.append(
            {
                "key": key or "",
                "reason": str(error.reason or type(error).__name__),
                "detail": self._relative(str(error)),
                "path": self._relative(path) if path else "",
                "abs_path": path or "",
            }
        )

    @property
    def count(self) -> int:
        """Bad frames recorded."""
        return len(self._items)

    def report(self) -> dict[str, dict[str, Any]]:
        """Return reason -> {"count", "examples": [file or key, ...]} in sorted reason order."""
        out: dict[str, dict[str, Any]] = {}
        for item in self._items:
            entry = out.setdefault(item["reason"], {"count": 0, "examples": []})
            entry["count"] += 1
            if len(entry["examples"]) < _EXAMPLES:
                entry["examples"].append(item["abs_path"] or item["key"] or item["detail"])
        return dict(sorted(out.items()))

    def describe(self) -> str:
        """Return the human report: counts per reason, first files, and what to do."""
        lines = [f"{self.count} bad frame(s); the build was stopped. Per reason:"]
        for reason, entry in self.report().items():
            lines.append(f"  {reason}: {entry['count']} (e.g. {', '.join(entry['examples'])})")
        first = self._items[0]["detail"] if self._items else ""
        lines.append(f"first error: {first}")
        lines.append(
            "Fix or remove the files, or rebuild with --quarantine to leave these frames "
            "out (they are then listed in manifest['quarantine'])."
        )
        return "\n".join(lines)

    def entries(self) -> list[dict[str, str]]:
        """Return quarantine rows {key, reason, detail, path} (paths relative to the input)."""
        rows = [{k: v for k, v in item.items() if k != "abs_path"} for item in self._items]
        return sorted(rows, key=lambda r: (r["key"], r["reason"], r["path"], r["detail"]))

    def count_per_log(self) -> dict[str, int]:
        """Return log_id -> bad frames, for keys of the form `<log_id>_<frame>`."""
        counts: dict[str, int] = {}
        for item in self._items:
            if item["key"]:
                log_id = item["key"].rsplit("_", 1)[0]
                counts[log_id] = counts.get(log_id, 0) + 1
        return counts
