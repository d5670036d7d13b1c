"""The one list of a raw log's files: what the content hash covers is exactly what readers may open.

`scan_raw_files(folder)` walks a raw-log folder once and returns a `RawFiles` listing; the
content hash (`platform_lib.sources.hashing`) hashes that listing and the readers look files
up and open them only through it (`fsguard.open_regular`, size bounded, JSON with a nesting
bound), checking each file's bytes against the digest recorded when it was hashed
(`RawFileChangedError`). Rules of the walk (hidden names, links, refused entries, the
`MAX_ENTRIES` bound): `scan_raw_files`; the threat model: docs/security.md.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from platform_lib.errors import UserError
from platform_lib.fsguard import NotRegularFileError, file_kind, iter_chunks, open_regular

__all__ = [
    "MAX_ARRAY_BYTES",
    "MAX_ENTRIES",
    "MAX_IMAGE_BYTES",
    "MAX_JSON_BYTES",
    "MAX_JSON_DEPTH",
    "RawFileChangedError",
    "RawFiles",
    "parse_json",
    "scan_raw_files",
]

#: Largest JSON metadata file read, in bytes (PandaSet poses.json of 80 frames: ~20 KB).
MAX_JSON_BYTES = 64 << 20
#: Deepest JSON nesting accepted, in levels (`[]` is 1; PandaSet and synthetic metadata use <= 4).
MAX_JSON_DEPTH = 64
#: Largest camera image read, in bytes.
MAX_IMAGE_BYTES = 64 << 20
#: Largest lidar / annotation / array file read (before decompression), in bytes.
MAX_ARRAY_BYTES = 2 << 30
#: Most entries (files, folders, links) one walk visits; guards against link fan-out.
MAX_ENTRIES = 1_000_000


class RawFileChangedError(UserError):
    """A raw file's bytes as read differ from the bytes hashed for the build's lineage."""


@dataclass(frozen=True)
class RawFiles:
    """The listing of one raw-log folder (see module docstring); paths are relative POSIX."""

    root: Path
    """the folder as given (not resolved: readers and errors name paths below it)"""
    files: tuple[str, ...]
    """sorted relative paths of the regular files (links followed)"""
    dirs: frozenset[str]
    """relative paths of the folders (links followed)"""
    links: dict[str, str] = field(default_factory=dict)
    """relative path of each symbolic link -> its target as written"""
    digests: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    """relative path -> hex sha256 of its bytes, as hashed (`hashing.hash_listing`) or first
    read; every later read must give the same bytes"""
    _file_set: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Index the files for lookups."""
        object.__setattr__(self, "_file_set", frozenset(self.files))

    def rel(self, path: str | os.PathLike[str]) -> str:
        """Return `path` (the root joined with a relative path) relative to the root, POSIX."""
        try:
            return Path(path).relative_to(self.root).as_posix()
        except ValueError:
            return ""

    def has_file(self, path: str | os.PathLike[str]) -> bool:
        """Whether `path` (below the root) is a listed regular file."""
        return self.rel(path) in self._file_set

    def has_dir(self, path: str | os.PathLike[str]) -> bool:
        """Whether `path` (below the root) is a listed folder."""
        return self.rel(path) in self.dirs

    def names_in(self, folder: str | os.PathLike[str]) -> list[str]:
        """Return the sorted names of the listed regular files directly in `folder`."""
        prefix = self.rel(folder)
        prefix = "" if prefix == "." else prefix + "/"
        return [
            r[len(prefix) :]
            for r in self.files
            if r.startswith(prefix) and "/" not in r[len(prefix) :]
        ]

    def record_digest(self, path: str | os.PathLike[str], digest: str) -> None:
        """Record `digest` (hex sha256) as the bytes of listed file `path`, or check it.

        Raises:
            RawFileChangedError: another digest is recorded for `path` (culprit: the path).
        """
        recorded = self.digests.setdefault(self.rel(path), digest)
        if recorded != digest:
            raise RawFileChangedError(
                f"raw file changed while the build read it (sha256 {recorded[:12]} hashed, "
                f"{digest[:12]} read)",
                str(path),
                "stop writing to the raw-log folder and re-run the build",
            )

    def read(self, path: str | os.PathLike[str], *, max_bytes: int | None = None) -> bytes:
        """Return the bytes of the listed regular file `path`, checked against its digest.

        Args:
            path: a listed file (the root joined with its relative path).
            max_bytes: largest size accepted, in bytes (None: no bound).

        Raises:
            UserError: `path` is not in the listing, cannot be opened, or is larger than
                `max_bytes` (culprit: the path).
            NotRegularFileError: it is no longer a regular file (swapped since the walk).
            RawFileChangedError: its bytes differ from those hashed or read before.
        """
        if not self.has_file(path):
            raise UserError(
                f"not among the files listed (and hashed) in raw-log folder {self.root}",
                str(path),
                "read raw files only through the listing of their log folder",
            )
        try:
            with os.fdopen(open_regular(path, max_bytes=max_bytes), "rb") as handle:
                fd = handle.fileno()
                size = os.fstat(fd).st_size  # at most max_bytes (open_regular)
                data = b"".join(iter_chunks(fd, path))  # at most `size` bytes, never blocks
                grew = bool(os.pread(fd, 1, size))
        except UserError:
            raise
        except OSError as exc:
            raise UserError(
                f"cannot open raw file ({exc.strerror or exc})",
                str(path),
                "check that it exists and is readable, then re-run",
            ) from exc
        if grew:
            raise RawFileChangedError(
                f"raw file changed while the build read it (it grew past {size} bytes)",
                str(path),
                "stop writing to the raw-log folder and re-run the build",
            )
        self.record_digest(path, hashlib.sha256(data).hexdigest())
        return data

    def open(self, path: str | os.PathLike[str], *, max_bytes: int | None = None) -> IO[bytes]:
        """Return an in-memory binary stream of `path`'s checked bytes (`read`).

        The whole file is read first, so what the caller parses is exactly what was checked.

        Raises:
            As `read`.
        """
        return io.BytesIO(self.read(path, max_bytes=max_bytes))


def _refuse_link(path: Path, what: str, target: str) -> UserError:
    return UserError(
        f"{what} (link target {target!r})",
        str(path),
        "point the link at an existing file or folder, or replace it with a copy",
    )


def scan_raw_files(folder: str | os.PathLike[str]) -> RawFiles:
    """Walk `folder` once and return its listing.

    Rules of the walk:

    * Names starting with "." (tool state such as `.DS_Store`) are skipped: never hashed or read.
    * Symbolic links are followed wherever they point and each target as written is recorded,
      so the hash covers both; files keep their in-tree path (`camera/front_camera/00.jpg`).
      Links are the one way a read leaves the log folder: build only from raw logs you trust.
    * Refused with a one-line `UserError` naming the path: a dangling link, a link loop, a
      FIFO, device or socket (`NotRegularFileError`), and more than `MAX_ENTRIES` entries.
    * `RawFiles.read`/`open` refuse paths not in the listing and hash the bytes they read
      against `RawFiles.digests` (recorded by `hashing.hash_listing` or the first read), so a
      file changed between hashing and reading raises `RawFileChangedError`.

    Raises:
        FileNotFoundError: `folder` is not a directory.
        NotRegularFileError: an entry is a FIFO, device or socket (culprit: its in-tree path).
        UserError: a dangling link, a link loop, an unreadable folder, or more than
            `MAX_ENTRIES` entries (culprit: the path).
    """
    root = Path(folder)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: raw log folder does not exist; check the --input path")
    files: list[str] = []
    dirs: set[str] = set()
    links: dict[str, str] = {}
    stack: list[tuple[str, Path, tuple[str, ...]]] = [("", root, (os.path.realpath(root),))]
    visited = 0
    while stack:
        rel_dir, path, ancestors = stack.pop()
        try:
            with os.scandir(path) as it:
                entries = sorted(
                    (e for e in it if not e.name.startswith(".")), key=lambda e: e.name
                )
        except OSError as exc:
            raise UserError(
                f"cannot list raw-log folder ({exc.strerror or exc})",
                str(path),
                "check that it exists and is readable, then re-run",
            ) from exc
        visited += len(entries)
        if visited > MAX_ENTRIES:
            raise UserError(
                f"raw-log folder holds more than {MAX_ENTRIES} entries (links included)",
                str(root),
                "check for folder links that repeat the same tree many times",
            )
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            full = path / entry.name
            try:
                if entry.is_symlink():
                    links[rel] = os.readlink(full)
                    info = os.stat(full)
                else:
                    info = entry.stat(follow_symlinks=False)
            except OSError as exc:
                if rel in links and exc.errno == errno.ENOENT:
                    raise _refuse_link(full, "dangling symbolic link", links[rel]) from exc
                if rel in links and exc.errno == errno.ELOOP:
                    raise _refuse_link(full, "symbolic link loop", links[rel]) from exc
                raise UserError(
                    f"cannot read raw-log entry ({exc.strerror or exc})",
                    str(full),
                    "check that it is readable, then re-run",
                ) from exc
            if stat.S_ISDIR(info.st_mode):
                real = os.path.realpath(full)
                if real in ancestors:
                    raise _refuse_link(
                        full,
                        "symbolic link loop: it leads back to its own folder",
                        links.get(rel, ""),
                    )
                dirs.add(rel)
                stack.append((rel, full, (*ancestors, real)))
            elif stat.S_ISREG(info.st_mode):
                files.append(rel)
            else:
                raise NotRegularFileError(full, file_kind(info.st_mode) or "not a regular file")
    return RawFiles(root=root, files=tuple(sorted(files)), dirs=frozenset(dirs), links=links)


def _too_deep(value: Any, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((c, depth + 1) for c in children if isinstance(c, (list, dict)))
    return False


def parse_json(data: bytes) -> Any:
    """Parse UTF-8 JSON bytes, nested at most `MAX_JSON_DEPTH` levels.

    Raises:
        ValueError: not UTF-8, not JSON, or nested deeper than `MAX_JSON_DEPTH` (the message
            says which; `json` itself gives up on very deep input with RecursionError, which is
            caught here).
    """
    too_deep = ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        value = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise too_deep from None
    if isinstance(value, (list, dict)) and _too_deep(value, MAX_JSON_DEPTH):
        raise too_deep
    return value
