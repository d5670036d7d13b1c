"""Raw-log sources the builder knows: name -> (log listing, per-log frame iterator).

Each source lists its logs (sorted), hashes each raw log folder for the manifest
(`platform_lib.sources.hashing.hash_log_listing`) and yields `Frame | FrameError` per frame,
reading through the listing it hashed: every byte read is checked against the digest hashed
(`platform_lib.sources.raw_files`), so the manifest's content hash names the bytes read.
A log-level `FrameError` (e.g. a missing poses file) is yielded in place of that log's frames,
so it is counted (and quarantined) like any bad frame instead of aborting other logs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from platform_lib.shards.errors import BuildError
from platform_lib.sources import catalog
from platform_lib.sources.catalog import SOURCE_NAMES
from platform_lib.sources.frame import Frame, FrameError
from platform_lib.sources.hashing import hash_log_listing
from platform_lib.sources.raw_files import RawFiles, scan_raw_files

__all__ = ["SOURCE_NAMES", "hash_logs", "iter_log", "list_logs", "open_source"]


def iter_log(
    source: str, log_dir: Path, files: RawFiles | None = None
) -> Iterator[Frame | FrameError]:
    """Yield the frames of one raw log of `source`; a log-level FrameError is yielded last.

    Args:
        source: raw-log format.
        log_dir: the log folder.
        files: its hashed listing (`hash_logs`), through which every file is read and checked;
            None: list it now.

    Raises:
        RawFileChangedError: a file's bytes differ from those hashed (not a bad frame: the
            build stops).
    """
    try:
        yield from catalog.iter_log_frames(source, log_dir, files=files)
    except FrameError as exc:  # log-level problem: counted like a bad frame
        if getattr(exc, "log_id", None) is None:
            exc.log_id = log_dir.name
        yield exc


def list_logs(source: str, input_path: Path) -> list[Path]:
    """Return the sorted raw log folders of `source` under `input_path`.

    Raises:
        BuildError: unknown source, or `input_path` holds no logs of that source.
    """
    if source not in SOURCE_NAMES:
        raise BuildError(f"unknown source {source!r}; choose one of {SOURCE_NAMES}")
    try:
        return [Path(p) for p in catalog.list_logs(source, input_path)]
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise BuildError(f"{input_path}: no {source} logs found ({exc})") from exc


def hash_logs(log_dirs: list[Path]) -> tuple[list[RawFiles], list[dict[str, Any]]]:
    """Return each log's listing, hashed, and [{"log_id", "content_hash"}] for the manifest.

    Read the logs through these listings (`iter_log(..., files=)`): the digests recorded while
    hashing are what every read is checked against.

    Raises:
        UserError: as `platform_lib.sources.hashing.hash_listing`.
    """
    listings = [scan_raw_files(p) for p in log_dirs]
    logs = [{"log_id": f.root.name, "content_hash": hash_log_listing(f)} for f in listings]
    return listings, logs


def open_source(
    source: str, input_path: Path
) -> tuple[Iterator[Frame | FrameError], list[dict[str, Any]], int | None]:
    """Return (frames of every log in order, [{"log_id", "content_hash"}], total or None).

    Raises:
        BuildError: unknown source, or `input_path` holds no logs of that source.
    """
    listings, logs = hash_logs(list_logs(source, input_path))
    frames = (item for files in listings for item in iter_log(source, files.root, files))
    return frames, logs, None
