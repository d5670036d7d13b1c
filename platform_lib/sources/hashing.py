"""Content hashes of raw logs: the identity of a build's input, recorded in the manifest.

`hash_raw_log(log_dir)` = sha256 over the sorted list of (relative POSIX path, sha256 of the
file bytes) of every regular file below `log_dir`. It depends on file names and contents only
(not on mtimes, permissions or the folder's own name/location), so a copied log hashes the same.

`hash_raw_location(url)` is the content key of a whole raw-log location, local or remote: a
local folder hashes its bytes (`hash_raw_log`); an object-storage prefix (s3://, gs://, ...)
uses each object's version id, else its ETag, instead of reading the bytes, so hashing a bucket
costs one listing (an ETag changes whenever the object's bytes change).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from platform_lib.errors import UserError
from platform_lib.storage import call_with_retries, resolve_fs

__all__ = [
    "check_raw_logs_unchanged",
    "hash_file",
    "hash_raw_location",
    "hash_raw_log",
    "list_raw_files",
]

_CHUNK = 1 << 20


def hash_file(path: str | os.PathLike[str]) -> str:
    """Return the hex sha256 of a file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def list_raw_files(log_dir: str | os.PathLike[str]) -> list[str]:
    """Return the sorted relative POSIX paths of all regular files below `log_dir`.

    Hidden files and folders (names starting with ".") are skipped: they hold tool state such as
    `.DS_Store`, never sensor data.

    Raises:
        FileNotFoundError: if `log_dir` is not a directory.
    """
    root = Path(log_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: raw log folder does not exist; check the --input path")
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in filenames:
            if name.startswith("."):
                continue
            full = Path(dirpath, name)
            if full.is_file():
                out.append(full.relative_to(root).as_posix())
    return sorted(out)


def hash_raw_log(log_dir: str | os.PathLike[str]) -> str:
    r"""Return the hex sha256 content hash of a raw log folder (see module docstring).

    Each entry contributes `relpath + "\0" + file_sha256 + "\n"`, in sorted relpath order.

    Raises:
        FileNotFoundError: if `log_dir` is not a directory.
    """
    root = Path(log_dir)
    digest = hashlib.sha256()
    for rel in list_raw_files(root):
        digest.update(f"{rel}\0{hash_file(root / rel)}\n".encode())
    return digest.hexdigest()


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
    fs, root, local = resolve_fs(location)
    if not call_with_retries(lambda: fs.isdir(root), what="listing", url=location):
        raise UserError(
            "raw-log folder does not exist or is not a folder",
            location,
            "pass raw_logs a folder of raw logs (local path or object-storage URL)",
        )
    if local:
        if not list_raw_files(root):
            raise UserError(
                "raw-log folder is empty", location, "pass raw_logs a folder holding raw logs"
            )
        return hash_raw_log(root)
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


def check_raw_logs_unchanged(location: str, expected_hash: str) -> None:
    """Fail when the raw logs changed since they were hashed (a cache key would lie).

    Raises:
        UserError: naming the location and both hashes.
    """
    now = hash_raw_location(location)
    if now != expected_hash:
        raise UserError(
            f"raw logs changed while the dataset was built (content hash {expected_hash[:12]} -> {now[:12]})",
            location,
            "stop writing to the raw-log folder and re-run",
        )
