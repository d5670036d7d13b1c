"""Safe opens and owner locks: only regular files, only inside their root, leftovers swept by liveness.

Every local open of an untrusted file (raw log, shard, index, manifest, checkpoint metadata)
goes through `open_regular` (non-blocking, file type and file system checked by `fstat` on the
descriptor, size bounded before any read); `read_regular` and `iter_chunks` read at most that
size; `ensure_inside` keeps a path inside its declared root, and `open_regular(root=)` checks
the file the descriptor refers to (no race with a link swapped after that check). `hold_owner_lock` /
`remove_if_orphaned` are the one liveness rule for leftovers of killed processes: an `flock`
the kernel drops with its owner, so it holds across PID namespaces. Rules: docs/security.md.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

from platform_lib.errors import UserError

__all__ = [
    "NotRegularFileError",
    "PathOutsideRootError",
    "ensure_inside",
    "PSEUDO_FILE_SYSTEMS",
    "file_kind",
    "file_system_type",
    "hold_owner_lock",
    "iter_chunks",
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

#: File system types (as /proc/self/mountinfo names them) whose regular-typed files are kernel
#: interfaces, not data: a read may block forever (/proc/kmsg), never end or differ per reader.
#: `open_regular` refuses their files.
PSEUDO_FILE_SYSTEMS = frozenset(
    {
        "proc",
        "sysfs",
        "debugfs",
        "tracefs",
        "securityfs",
        "configfs",
        "cgroup",
        "cgroup2",
        "pstore",
        "efivarfs",
        "bpf",
        "fusectl",
        "binfmt_misc",
        "selinuxfs",
        "mqueue",
        "rpc_pipefs",
        "nsfs",
    }
)
_MOUNTINFO = "/proc/self/mountinfo"
#: st_dev -> file system type of every mount seen in /proc/self/mountinfo ("" for a device not
#: listed there, e.g. a btrfs subvolume); read once, and again for each device not seen before.
_mount_types: dict[int, str] = {}


class NotRegularFileError(UserError):
    """A path that should be a regular file is a FIFO, device, socket, directory or kernel file."""

    def __init__(self, path: str | os.PathLike[str], kind: str) -> None:
        self.path, self.kind = str(path), kind
        super().__init__(
            f"not a regular file: it is {kind}",
            str(path),
            "replace it with the regular file it should be; FIFOs, devices, sockets and files "
            "of /proc, /sys and other kernel file systems are refused",
        )


class PathOutsideRootError(UserError):
    """A path (after resolving `..` and symbolic links) leaves the root it must stay in."""

    def __init__(self, path: str | os.PathLike[str], root: str | os.PathLike[str]) -> None:
        self.path, self.root = str(path), str(root)
        super().__init__(
            f"path leaves its root {root}",
            str(path),
            "keep every path inside the declared root (no '..', no links out of it)",
        )


def file_kind(mode: int) -> str | None:
    """Return what a non-regular `st_mode` is ("a FIFO", "a socket", ...), or None for a regular file."""
    for test, kind in _KINDS:
        if test(mode):
            return kind
    return None if stat.S_ISREG(mode) else "not a regular file"


def _read_mount_types() -> dict[int, str]:
    """Return st_dev -> file system type of the mounts in /proc/self/mountinfo ({} without /proc)."""
    types = {}
    try:
        with open(_MOUNTINFO, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                fields, _, rest = line.partition(" - ")
                major, _, minor = fields.split(" ")[2].partition(":")
                types[os.makedev(int(major), int(minor))] = rest.split(" ", 1)[0]
    except (OSError, ValueError, IndexError):  # no /proc (then no procfs files either), odd line
        pass
    return types


def file_system_type(dev: int) -> str:
    """Return the type of the file system of device number `dev` ("ext4", "proc"; "" if unknown).

    From /proc/self/mountinfo, read once per process and again for a device not seen before
    (a file system mounted later), so an open costs a dict lookup.
    """
    if dev not in _mount_types:
        _mount_types.update(_read_mount_types())
        _mount_types.setdefault(dev, "")
    return _mount_types[dev]


def open_regular(
    path: str | os.PathLike[str],
    *,
    max_bytes: int | None = None,
    root: str | os.PathLike[str] | None = None,
) -> int:
    """Open `path` read-only and return its file descriptor, refusing anything but a regular file.

    The open is non-blocking (a FIFO without a writer does not block it) and the descriptor
    stays non-blocking: a regular file of a disk reads as usual, a read that would wait fails
    with `BlockingIOError` instead of hanging (`iter_chunks` and `read_regular` turn that into
    `NotRegularFileError`). The file type is checked with `fstat` on the open descriptor (no
    race with a swap after a `stat`), and so is its file system: a file of /proc, /sys or
    another kernel file system (`PSEUDO_FILE_SYSTEMS`) is refused, whatever links lead to it.
    With `root`, the file the descriptor refers to (`/proc/self/fd/<fd>`) must lie inside
    `root`: a link swapped between a caller's `ensure_inside` and this open is refused too.

    Args:
        path: a local path.
        max_bytes: when given, a file larger than this is refused before any read.
        root: when given, the folder the opened file must lie in (links inside it are fine,
            `root` itself may be a link).

    Returns:
        An open, non-blocking file descriptor (the caller closes it); read at most its `fstat`
        size.

    Raises:
        NotRegularFileError: the path is a FIFO, device, socket, directory or kernel file.
        PathOutsideRootError: the opened file lies outside `root`.
        UserError: the file is larger than `max_bytes`.
        OSError: the open itself failed (missing file, permission).
    """
    _before_open(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:  # a socket (or a device without a driver) cannot be opened: ENXIO
        kind = file_kind(os.stat(path).st_mode) if exc.errno == errno.ENXIO else None
        if kind is not None:
            raise NotRegularFileError(path, kind) from None
        raise
    try:
        if root is not None:
            _ensure_fd_inside(fd, path, root)
        info = os.fstat(fd)
        kind = file_kind(info.st_mode)
        if kind is not None:
            raise NotRegularFileError(path, kind)
        fs_type = file_system_type(info.st_dev)
        if fs_type in PSEUDO_FILE_SYSTEMS:
            raise NotRegularFileError(path, f"a file of the kernel's {fs_type} file system")
        if max_bytes is not None and info.st_size > max_bytes:
            raise UserError(
                f"file is {info.st_size} bytes, more than the {max_bytes} allowed",
                str(path),
                "check that this is the file you meant; it is too large to be one",
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def _before_open(path: str | os.PathLike[str]) -> None:
    """Nothing: the moment between a caller's checks and `open_regular`'s open (a test seam)."""


def _ensure_fd_inside(fd: int, path: str | os.PathLike[str], root: str | os.PathLike[str]) -> None:
    """Refuse the open file `fd` unless the file it refers to lies inside `root`.

    The kernel's name of the open file (`/proc/self/fd/<fd>`, links resolved at the open) is
    compared with `root` resolved; without /proc, `path` is resolved again (`ensure_inside`).

    Raises:
        PathOutsideRootError: the file lies outside `root`; names `path` and `root`.
    """
    try:
        opened = Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:  # no /proc: the path check, as before the open
        ensure_inside(path, root)
        return
    base = Path(root).resolve()
    if opened != base and base not in opened.parents:
        raise PathOutsideRootError(path, root)


def iter_chunks(
    fd: int, path: str | os.PathLike[str], *, chunk_bytes: int = 1 << 20
) -> Iterator[bytes]:
    """Yield the bytes of the open file `fd` (from `open_regular`) from offset 0, in chunks.

    Reads at most the `fstat` size at the call (a file that grows meanwhile is read to that
    size; one that shrinks, to its end), with `os.pread` (the descriptor's offset is unused).

    Args:
        fd: an open descriptor.
        path: its path, named in errors.
        chunk_bytes: largest chunk yielded, in bytes.

    Raises:
        NotRegularFileError: a read would block (a kernel file, not data).
        OSError: a read failed.
    """
    size, offset = os.fstat(fd).st_size, 0
    while offset < size:
        try:
            chunk = os.pread(fd, min(chunk_bytes, size - offset), offset)
        except BlockingIOError:
            raise NotRegularFileError(path, "a file whose reads would block") from None
        if not chunk:
            return
        offset += len(chunk)
        yield chunk


def read_regular(
    path: str | os.PathLike[str],
    *,
    max_bytes: int,
    root: str | os.PathLike[str] | None = None,
) -> bytes:
    """Return the bytes of the regular file `path`, refusing other types and files over `max_bytes`.

    Reads at most the `fstat` size (itself at most `max_bytes`); with `root`, the opened file
    must lie inside it (`open_regular`).

    Raises:
        NotRegularFileError, PathOutsideRootError, UserError, OSError: as `open_regular` and
            `iter_chunks`.
    """
    fd = open_regular(path, max_bytes=max_bytes, root=root)
    try:
        return b"".join(iter_chunks(fd, path, chunk_bytes=max(max_bytes, 1)))
    finally:
        os.close(fd)


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
