"""Safe opens and owner locks: only regular files, only inside their root, leftovers swept by liveness.

Every local open of an untrusted file (raw log, shard, index, manifest, checkpoint metadata)
goes through `open_regular`: the path is opened non-blocking (a FIFO cannot block the open),
`fstat` checks the file type before a byte is read, and a size bound is checked against the
real size before the caller allocates. `ensure_inside` keeps a path inside the root the user
declared. `hold_owner_lock` / `remove_if_orphaned` are the one liveness rule for leftovers of
killed processes (shared-memory files, staging folders, downloads): the owner holds an
exclusive `flock` on a lock file for as long as it lives; a sweeper removes a leftover only
when it can take that lock itself. The kernel drops a dead process's locks, so the rule holds
across PID namespaces where a process id means nothing.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import stat
from pathlib import Path

from platform_lib.errors import UserError

__all__ = [
    "NotRegularFileError",
    "PathOutsideRootError",
    "ensure_inside",
    "file_kind",
    "hold_owner_lock",
    "open_regular",
    "read_regular",
    "remove_if_orphaned",
]

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


class NotRegularFileError(UserError):
    """A path that should be a regular file is a FIFO, device, socket or directory."""

    def __init__(self, path: str | os.PathLike[str], kind: str) -> None:
        self.path, self.kind = str(path), kind
        super().__init__(
            f"not a regular file: it is {kind}",
            str(path),
            "replace it with the regular file it should be; FIFOs, devices and sockets are refused",
        )

    def __reduce__(self):  # noqa: D105
        """Pickle with the original arguments."""
        return type(self), (self.path, self.kind)


class PathOutsideRootError(UserError):
    """A path (after resolving `..` and symbolic links) leaves the root it must stay in."""

    def __init__(self, path: str | os.PathLike[str], root: str | os.PathLike[str]) -> None:
        self.path, self.root = str(path), str(root)
        super().__init__(
            f"path leaves its root {root}",
            str(path),
            "keep every path inside the declared root (no '..', no links out of it)",
        )

    def __reduce__(self):  # noqa: D105
        """Pickle with the original arguments."""
        return type(self), (self.path, self.root)


def file_kind(mode: int) -> str | None:
    """Return what a non-regular `st_mode` is ("a FIFO", "a socket", ...), or None for a regular file."""
    for test, kind in _KINDS:
        if test(mode):
            return kind
    return None if stat.S_ISREG(mode) else "not a regular file"


def open_regular(path: str | os.PathLike[str], *, max_bytes: int | None = None) -> int:
    """Open `path` read-only and return its file descriptor, refusing anything but a regular file.

    The open is non-blocking (a FIFO without a writer does not block it); the file type is
    checked with `fstat` on the open descriptor (no race with a swap after a `stat`), then
    blocking mode is restored for ordinary reads.

    Args:
        path: a local path.
        max_bytes: when given, a file larger than this is refused before any read.

    Returns:
        An open file descriptor (the caller closes it).

    Raises:
        NotRegularFileError: the path is a FIFO, device, socket or directory.
        UserError: the file is larger than `max_bytes`.
        OSError: the open itself failed (missing file, permission).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:  # a socket (or a device without a driver) cannot be opened: ENXIO
        kind = file_kind(os.stat(path).st_mode) if exc.errno == errno.ENXIO else None
        if kind is not None:
            raise NotRegularFileError(path, kind) from None
        raise
    try:
        info = os.fstat(fd)
        kind = file_kind(info.st_mode)
        if kind is not None:
            raise NotRegularFileError(path, kind)
        if max_bytes is not None and info.st_size > max_bytes:
            raise UserError(
                f"file is {info.st_size} bytes, more than the {max_bytes} allowed",
                str(path),
                "check that this is the file you meant; it is too large to be one",
            )
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str | os.PathLike[str], *, max_bytes: int) -> bytes:
    """Return the bytes of the regular file `path`, refusing other types and files over `max_bytes`.

    Raises:
        NotRegularFileError, UserError, OSError: as `open_regular`.
    """
    fd = open_regular(path, max_bytes=max_bytes)
    with os.fdopen(fd, "rb") as handle:
        return handle.read(max_bytes + 1)[:max_bytes]


def ensure_inside(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> Path:
    """Return `path` resolved (links and `..` followed), refusing one that leaves `root`.

    Raises:
        PathOutsideRootError: the resolved path is not `root` or below it.
    """
    resolved = Path(path).resolve()
    base = Path(root).resolve()
    if resolved != base and base not in resolved.parents:
        raise PathOutsideRootError(path, root)
    return resolved


def hold_owner_lock(lock_path: str | os.PathLike[str]) -> int:
    """Create `lock_path` if needed and hold an exclusive `flock` on it; return the fd.

    The lock lives as long as the descriptor (the process); close it (or exit) to release.
    Descriptors are not inherited by spawned children (close-on-exec).
    """
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        os.close(fd)
        raise
    return fd


def remove_if_orphaned(
    lock_path: str | os.PathLike[str], *leftovers: str | os.PathLike[str]
) -> bool:
    """Remove `leftovers` and `lock_path` when no live process holds the lock; return True if removed.

    A lock held by a live owner (in any PID namespace sharing the file system) is left alone.
    Folders among `leftovers` are removed recursively.
    """
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        for leftover in leftovers:
            target = Path(leftover)
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    target.unlink()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock_path)
        return True
    finally:
        os.close(fd)
