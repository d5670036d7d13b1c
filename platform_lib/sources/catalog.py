"""The raw-log formats by name: which exist, how each is split, and how to list and read its logs.

`check_source(name)` refuses an unknown format; `list_logs` / `iter_log_frames` dispatch to the
format's reader (`pandaset.py`, `synthetic.py`); `list_log_urls` lists logs on a local folder or
on object storage. Importing it costs no numpy or fsspec (the readers and `storage` are
imported when called), so `drivetrain --help` can list the formats.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from platform_lib.errors import UserError

if TYPE_CHECKING:
    from platform_lib.sources.frame import Frame, FrameError
    from platform_lib.sources.raw_files import RawFiles

__all__ = [
    "DEFAULT_SPLITS",
    "SOURCE_NAMES",
    "check_raw_folder",
    "check_source",
    "find_log_folders",
    "iter_log_frames",
    "list_log_urls",
    "list_logs",
    "read_frames",
]

#: The one list of raw-log formats; each has a reader below and a default split.
SOURCE_NAMES: tuple[str, ...] = ("pandaset", "synthetic")

#: How each source is split into train/val unless told otherwise (`BuildConfig` fields):
#: synthetic runs hold out whole logs (25 %); PandaSet holds out the last 2 frames of every
#: sequence, so even one sequence (the 10-frame sample 002: 8 train, 2 val) has val frames.
DEFAULT_SPLITS: dict[str, dict[str, Any]] = {
    "pandaset": {"split": "by_frame_range", "val_frames_per_log": 2},
    "synthetic": {"split": "by_log", "val_fraction": 0.25},
}


def check_source(source: str, *, culprit: str = "source") -> str:
    """Return `source` if it is a known raw-log format.

    Raises:
        UserError: naming `culprit` and the known formats.
    """
    if source not in SOURCE_NAMES:
        raise UserError(
            f"unknown raw-log format {source!r}", culprit, f"use one of {', '.join(SOURCE_NAMES)}"
        )
    return source


def find_log_folders(root: Path, marker: str) -> list[Path]:
    """Return [root] if it holds the file `marker`, else its sorted non-hidden folders that do."""
    if (root / marker).is_file():
        return [root]
    if not root.is_dir():
        return []
    return sorted(
        p for p in root.iterdir() if not p.name.startswith(".") and (p / marker).is_file()
    )


def _resolve(
    source: str,
) -> tuple[Callable[..., list[Path]], Callable[..., Any], Callable[..., Frame]]:
    """Return the (list_logs, load_log, read_frame) functions of `source`'s reader."""
    if source == "pandaset":
        from platform_lib.sources import pandaset

        return pandaset.list_pandaset_logs, pandaset.load_pandaset_log, pandaset.read_pandaset_frame
    if source == "synthetic":
        from platform_lib.sources import synthetic, synthetic_io

        return (
            synthetic.list_synthetic_logs,
            synthetic_io.load_synthetic_log,
            synthetic_io.read_synthetic_frame,
        )
    check_source(source)
    raise AssertionError(f"source {source!r} is listed in SOURCE_NAMES but has no reader")


def list_logs(source: str, root: str | os.PathLike[str]) -> list[Path]:
    """Return the sorted log folders of `source` under `root` (or [root] if it is one log).

    Every folder of a root of logs is a log or hidden (name starting with "."): a folder the
    reader does not recognise (a link to some other folder, a log missing its metadata) is
    refused, never skipped, so no log is left out of a build silently. Links may lead out of
    the root (docs/security.md, "Known limits"): their targets are read and hashed.

    Raises:
        ValueError: unknown source. FileNotFoundError: no log found.
        UserError: a folder of the root is not a log of `source` (names it, and its link
            target when it is a link).
    """
    root = Path(root)
    logs = _resolve(source)[0](root)
    if logs == [root]:
        return logs
    known = set(logs)
    for entry in sorted(root.iterdir()):
        if entry.name.startswith(".") or entry in known or not entry.is_dir():
            continue
        link = f", a link to {os.readlink(entry)}" if entry.is_symlink() else ""
        raise UserError(
            f"folder is not a {source} log{link}",
            str(entry),
            f"make it a {source} log, move it out of the raw-log folder, or rename it to "
            "start with '.' to leave it out",
        )
    return logs


def iter_log_frames(
    source: str, log_dir: str | os.PathLike[str], *, files: RawFiles | None = None
) -> Iterator[Frame | FrameError]:
    """Yield each frame of one log, or the `FrameError` of a bad frame in its place.

    A log-level problem (e.g. a missing poses file) is yielded last as a `FrameError` with
    frame_index None and the log's id, so the builder counts (and quarantines) it like a bad
    frame instead of aborting the other logs.

    Raises:
        UserError: unknown source.
        RawFileChangedError: a file's bytes differ from those hashed (`raw_files`).
    """
    from platform_lib.sources.frame import FrameError

    _, load_log, read_frame = _resolve(source)
    try:
        log = load_log(Path(log_dir), files=files)
    except FrameError as exc:
        if exc.log_id is None:
            exc.log_id = Path(log_dir).name
        yield exc
        return
    for i in log.frame_indices:
        try:
            yield read_frame(log, i)
        except FrameError as exc:
            yield exc


def read_frames(source: str, root: str | os.PathLike[str]) -> Iterator[Frame]:
    """Yield the frames of every log of `source` under `root`; raise the first `FrameError`.

    Logs are listed by `list_logs` (`root` may be one log folder) and read in order, frames in
    index order; a log-level problem raises like a bad frame.

    Raises:
        FrameError: the first bad frame or log. UserError, FileNotFoundError: as `list_logs`.
    """
    from platform_lib.sources.frame import FrameError

    for log_dir in list_logs(source, root):
        for item in iter_log_frames(source, log_dir):
            if isinstance(item, FrameError):
                raise item
            yield item


def check_raw_folder(path: str | os.PathLike[str], source: str, *, flag: str = "--input") -> None:
    """Fail in one line naming `path` unless it is a local folder this user can list.

    Checked before any log in it is looked for, so that the error names the folder itself, not
    a file inside it that could not be opened (or that does not exist).

    Args:
        path: the local raw-log folder.
        source: its raw-log format, for the fix.
        flag: how the user passed it (`--input`, `raw_logs`).

    Raises:
        UserError: the path does not exist, is not a folder, or may not be listed.
    """
    folder = Path(path)
    if not folder.exists():
        raise UserError(
            "raw-log folder does not exist", str(path), f"pass {flag} a folder of {source} logs"
        )
    if not folder.is_dir():
        raise UserError(
            f"{flag} is not a folder",
            str(path),
            f"pass {flag} the folder that holds the {source} logs",
        )
    try:
        with os.scandir(folder) as entries:
            next(entries, None)
    except PermissionError:
        raise UserError(
            f"permission denied: user {os.getuid()} may not list this raw-log folder",
            str(path),
            "give this user read and search access to it (chmod, chown, ACLs) or use another path",
        ) from None


def list_log_urls(source: str, location: str) -> list[str]:
    """Return one folder path or URL per raw log of `source` at `location`, sorted by log id.

    Local folders are listed by the source's own rules (`list_logs`: a root of log folders,
    or one log folder). On object storage every non-hidden sub-folder is a log.

    Raises:
        UserError: unknown source, or the location is not a folder, may not be listed or holds
            no logs (culprit: the location).
        StorageAccessError / StorageUnreachableError: from `platform_lib.storage`.
    """
    from platform_lib.sources.hashing import resolve_raw_folder
    from platform_lib.storage import call_with_retries

    check_source(source)
    fs, root, local = resolve_raw_folder(location)
    if local:
        check_raw_folder(root, source, flag="raw_logs")
        try:
            return [str(p) for p in list_logs(source, root)]
        except (FileNotFoundError, NotADirectoryError) as exc:
            detail, _, fix = str(exc).split(": ", 1)[-1].rpartition("; ")
            raise UserError(
                f"no {source} logs found" + (f" ({detail})" if detail else ""),
                location,
                fix or f"pass raw_logs a folder of {source} logs or one log folder",
            ) from None
    scheme = location.split("://", 1)[0]
    entries = call_with_retries(lambda: fs.ls(root, detail=True), what="listing", url=location)
    logs = sorted(
        e["name"].rstrip("/")
        for e in entries
        if e.get("type") == "directory"
        and not e["name"].rstrip("/").rsplit("/", 1)[-1].startswith(".")
    )
    if not logs:
        raise UserError(
            "no log folders found", location, f"pass raw_logs a folder of {source} log folders"
        )
    return [f"{scheme}://{p}" for p in logs]
