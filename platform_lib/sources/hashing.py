"""Content hashes of raw logs: the identity of a build's input, recorded in the manifest.

`hash_raw_log(log_dir)` = sha256 over the sorted list of (relative POSIX path, sha256 of the
file bytes) of every regular file below `log_dir`. It depends on file names and contents only
(not on mtimes, permissions or the folder's own name/location), so a copied log hashes the same.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

__all__ = ["hash_file", "hash_raw_log", "list_raw_files"]

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
    """Return the hex sha256 content hash of a raw log folder (see module docstring).

    Each entry contributes `relpath + "\\0" + file_sha256 + "\\n"`, in sorted relpath order.

    Raises:
        FileNotFoundError: if `log_dir` is not a directory.
    """
    root = Path(log_dir)
    digest = hashlib.sha256()
    for rel in list_raw_files(root):
        digest.update(f"{rel}\0{hash_file(root / rel)}\n".encode())
    return digest.hexdigest()
