r"""Content hashes of raw logs: the identity of a build's input, recorded in the manifest.

Hashes depend on names and contents only (not on mtimes, permissions or the folder's own name
or location), so a copied folder hashes the same. A local folder is hashed over the listing
its reader then reads through (`raw_files.scan_raw_files`), recording each file's digest so
every read is checked against it; an object-storage prefix uses each object's version id,
else its ETag, so hashing a bucket costs one listing.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from platform_lib.errors import UserError
from platform_lib.fsguard import iter_chunks, open_regular
from platform_lib.sources.raw_files import RawFiles, scan_raw_files
from platform_lib.storage import call_with_retries, resolve_fs

if TYPE_CHECKING:
    import fsspec

__all__ = [
    "hash_logs",
    "check_raw_logs_unchanged",
    "hash_file",
    "hash_listing",
    "hash_log_location",
    "hash_raw_location",
    "hash_raw_log",
    "resolve_raw_folder",
]

_CHUNK = 1 << 20


def hash_file(path: str | os.PathLike[str]) -> str:
    """Return the hex sha256 of a regular file's bytes, read in 1 MiB chunks up to its fstat size.

    Raises:
        NotRegularFileError: `path` is a FIFO, device, socket, folder or kernel file (/proc...).
        OSError: it cannot be opened.
    """
    digest = hashlib.sha256()
    fd = open_regular(path)
    try:
        for chunk in iter_chunks(fd, path, chunk_bytes=_CHUNK):
            digest.update(chunk)
    finally:
        os.close(fd)
    return digest.hexdigest()


def hash_listing(listing: RawFiles) -> str:
    r"""Return the hex sha256 content hash of a folder's listing (names and bytes).

    The hash is sha256 over the sorted lines `relpath\0sha256(file bytes)\n`, plus
    `relpath\0-> "target"\n` per symbolic link. Each file's digest is recorded in
    `listing.digests`; a file already read through the listing keeps the digest of the bytes
    read (it is not read again).

    Raises:
        UserError: a listed file cannot be read or is no longer a regular file (culprit: it).
    """
    lines = []
    for rel, target in listing.links.items():
        lines.append((rel, 0, f"{rel}\0-> {json.dumps(target)}\n"))
    for rel in listing.files:
        try:
            file_digest = listing.digests.get(rel) or hash_file(listing.root / rel)
            listing.digests[rel] = file_digest
            lines.append((rel, 1, f"{rel}\0{file_digest}\n"))
        except UserError:
            raise
        except OSError as exc:
            raise UserError(
                f"cannot read raw file ({exc.strerror or exc})",
                str(listing.root / rel),
                "check that it exists and is readable, then re-run",
            ) from exc
    digest = hashlib.sha256()
    for _, _, line in sorted(lines):
        digest.update(line.encode())
    return digest.hexdigest()


def _log_hash(log_id: str, content_hash: str) -> str:
    return hashlib.sha256(f"log\0{log_id}\n{content_hash}\n".encode()).hexdigest()


def hash_raw_log(log_dir: str | os.PathLike[str]) -> str:
    """Return the identity of one raw log: sha256 over its log id (folder name) and content hash.

    Raises:
        FileNotFoundError: if `log_dir` is not a directory.
        UserError: as `scan_raw_files` and `hash_listing`.
    """
    _, [entry] = hash_logs([log_dir])
    return entry["content_hash"]


def hash_logs(
    log_dirs: Sequence[str | os.PathLike[str]],
) -> tuple[list[RawFiles], list[dict[str, str]]]:
    """Return each log's listing, hashed, and `[{"log_id", "content_hash"}]` for the manifest.

    Read the logs through these listings (`catalog.iter_log_frames(..., files=)`): the digests
    recorded while hashing are what every read is checked against, so the manifest's hashes
    name the bytes the build read.

    Raises:
        UserError: as `hash_listing`.
    """
    listings = [scan_raw_files(p) for p in log_dirs]
    logs = [
        {"log_id": f.root.name, "content_hash": _log_hash(f.root.name, hash_listing(f))}
        for f in listings
    ]
    return listings, logs


def hash_log_location(location: str) -> str:
    """Return the identity of one raw log at a local path or URL (`hash_raw_log` when local).

    The log id is the last part of the location, as the build names a fetched log
    (`platform_lib.storage.fetch_folder`).

    Raises:
        As `hash_raw_location`.
    """
    _, root, _ = resolve_fs(location)
    return _log_hash(Path(root.rstrip("/")).name, hash_raw_location(location))


def hash_raw_location(location: str) -> str:
    r"""Return the content key of a raw-log folder, local or on object storage.

    Args:
        location: local folder path, `file://` URL, or an fsspec URL such as `s3://bucket/logs/`.

    Returns:
        sha256 hex. Local files: over sorted `relpath\0sha256(bytes)\n`. Remote objects: over
        sorted `relpath\0version_id-or-ETag\n` (no bytes are read).

    Raises:
        UserError: the location does not exist, is not a folder or holds no files (culprit:
            the location), or a remote object has neither ETag nor version id.
        StorageAccessError / StorageUnreachableError: from `platform_lib.storage`.
    """
    fs, root, local = resolve_raw_folder(location)
    if local:
        listing = scan_raw_files(root)
        if not listing.files:
            raise UserError(
                "raw-log folder is empty", location, "pass raw_logs a folder holding raw logs"
            )
        return hash_listing(listing)
    lines = []
    listing = call_with_retries(lambda: fs.find(root, detail=True), what="listing", url=location)
    for path, info in sorted(listing.items()):
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        if rel.startswith(".") or "/." in rel:
            continue  # hidden tool state, skipped like `list_raw_files` does
        key = (
            info.get("VersionId") or info.get("version_id") or info.get("ETag") or info.get("etag")
        )
        if not key:
            raise UserError(
                f"object {path!r} has no ETag or version id",
                location,
                "use a store that reports one or copy the logs to a local folder",
            )
        lines.append(f"{rel}\0{str(key).strip(chr(34))}\n")
    if not lines:
        raise UserError(
            "raw-log folder is empty", location, "pass raw_logs a folder holding raw logs"
        )
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def resolve_raw_folder(location: str) -> tuple[fsspec.AbstractFileSystem, str, bool]:
    """Return `storage.resolve_fs(location)` (fs, root, local) once the folder is known to exist.

    Raises:
        UserError: the location does not exist or is not a folder (culprit: the location).
        StorageAccessError / StorageUnreachableError: from `platform_lib.storage`.
    """
    fs, root, local = resolve_fs(location)
    if not call_with_retries(lambda: fs.isdir(root), what="listing", url=location):
        raise UserError(
            "raw-log folder does not exist or is not a folder",
            location,
            "pass raw_logs a folder of raw logs (local path or object-storage URL)",
        )
    return fs, root, local


def check_raw_logs_unchanged(location: str, expected_hash: str) -> None:
    """Fail when the raw log at `location` changed since `hash_log_location` hashed it.

    Raises:
        UserError: naming the location and both hashes.
    """
    now = hash_log_location(location)
    if now != expected_hash:
        raise UserError(
            f"raw logs changed while the dataset was built (content hash {expected_hash[:12]} -> {now[:12]})",
            location,
            "stop writing to the raw-log folder and re-run",
        )
