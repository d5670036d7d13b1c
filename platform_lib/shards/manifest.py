r"""manifest.json as a typed object: the identity and inventory of a dataset, written LAST.

`Manifest` (pydantic, frozen) is validated when loaded, so no caller reads a dict by key or
re-checks a field; manifest.json is read only as a regular file of at most
`MAX_MANIFEST_BYTES`. Shard paths must be `shards/shard-NNNNNN.tar`, and a merged dataset's
shard `location`s are checked by `shard_location` before any byte is read. Every file of a
local dataset (manifest, index, shards) is named through `dataset_file`, which refuses one
whose links lead out of the dataset folder. `dataset_hash`
(formula: docs/format.md, "Manifest") identifies a dataset for caching, lineage and MLflow.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from platform_lib.errors import UserError
from platform_lib.fsguard import PathOutsideRootError, ensure_inside
from platform_lib.shards.errors import ManifestError, ManifestMissingError
from platform_lib.shards.writer import fsync_dir, write_file_atomic
from platform_lib.storage import (
    explain_location_error,
    is_local_url,
    is_transient,
    read_input,
    resolve_fs,
)

__all__ = [
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "MAX_MANIFEST_BYTES",
    "SHARD_PATH_FORM",
    "SHARD_ROOTS_ENV",
    "IndexEntry",
    "Manifest",
    "Sensors",
    "ShardEntry",
    "ShardLocationError",
    "Splits",
    "ViewLineage",
    "builder_version",
    "check_shard_path",
    "compute_dataset_hash",
    "dataset_file",
    "declared_shard_roots",
    "dumps_manifest",
    "load_manifest",
    "shard_location",
    "write_manifest",
]

FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
#: Largest manifest.json read, in bytes (64 MiB: some 200,000 shard entries).
MAX_MANIFEST_BYTES = 64 * 2**20
#: Environment variable: comma-separated folders (paths or URLs) shard locations may point into.
SHARD_ROOTS_ENV = "DRIVETRAIN_SHARD_ROOTS"
#: The only shard path form a manifest may hold (relative, inside `shards/`).
SHARD_PATH_FORM = "shards/shard-NNNNNN.tar"
_SHARD_PATH = r"^shards/shard-[0-9]{6}\.tar$"
_SHA256 = r"^[0-9a-f]{64}$"


def check_shard_path(path: str) -> str:
    """Return `path` when it is `shards/shard-NNNNNN.tar`; raise otherwise.

    Raises:
        ValueError: absolute, escaping (`..`) or otherwise unexpected path; the message says why
            it is refused.
    """
    if not isinstance(path, str) or not re.match(_SHARD_PATH, path):
        raise ValueError(
            f"shard path {path!r} is not of the form {SHARD_PATH_FORM} (absolute and "
            "'..' paths are refused: they would read or write files outside the "
            "dataset and cache folders)"
        )
    return path


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class ShardEntry(_Record):
    """One shard of the dataset (manifest "shards" entry)."""

    path: str
    """shard path relative to the dataset root, `shards/shard-NNNNNN.tar`"""
    sha256: str = Field(pattern=_SHA256)
    """sha256 hex of the whole shard file"""
    bytes: int = Field(ge=0)
    """shard file size, in bytes"""
    num_samples: int = Field(ge=0)
    """samples in the shard"""
    location: str | None = None
    """merged datasets only: where the shard's bytes are (URL, absolute path, or relative to
    the dataset root); None: `<root>/<path>`"""

    @field_validator("path")
    @classmethod
    def _check_path(cls, value: str) -> str:
        return check_shard_path(value)


class IndexEntry(_Record):
    """The index file (manifest "index")."""

    path: Literal["index.parquet"]
    """index path relative to the dataset root"""
    sha256: str = Field(pattern=_SHA256)
    """sha256 hex of index.parquet"""
    bytes: int = Field(ge=0)
    """index.parquet size, in bytes"""


class Sensors(_Record):
    """Sensors every sample carries (manifest "sensors")."""

    cameras: tuple[str, ...]
    """camera names, sorted; each is a `<camera>.jpg` member"""
    lidar: bool
    """every sample has `lidar.npy`"""
    lidar_seg: bool
    """samples carry `lidar_seg.npy` (per-point class ids)"""
    radar: bool
    """samples carry `radar.npy`"""

    def required_members(self) -> tuple[str, ...]:
        """Member names every sample must have (cameras, LiDAR, cuboids, calibration, pose)."""
        lidar = ("lidar.npy",) if self.lidar else ()
        return (
            *(f"{c}.jpg" for c in self.cameras),
            *lidar,
            "cuboids.json",
            "calib.json",
            "pose.json",
        )


class SourceLog(_Record):
    """One raw log the dataset was built from (manifest "source_logs" entry)."""

    model_config = ConfigDict(frozen=True, extra="allow", strict=True)
    log_id: str
    """log (sequence) id"""
    content_hash: str
    """sha256 over the sorted (relpath, sha256) of the log's raw files"""
    num_frames: int = Field(default=0, ge=0)
    """samples written from the log"""
    num_quarantined: int = Field(default=0, ge=0)
    """frames of the log left out (quarantine)"""


class Splits(_Record):
    """Train/val assignment (manifest "splits")."""

    method: str
    """"by_log" or "by_frame_range\""""
    params: dict[str, Any]
    """parameters of the method (chosen val logs, fraction, frames per log)"""
    counts: dict[str, int]
    """samples per split, e.g. {"train": 8, "val": 2}"""


class ViewLineage(_Record):
    """Where a training view comes from (manifest "view"; absent in a dataset built from raw logs).

    A view (`platform_lib.shards.training_view`) is its parent dataset with every camera JPEG
    re-encoded at the model's resolution; these fields and the library versions they name
    determine its bytes.
    """

    parent_dataset_hash: str = Field(pattern=_SHA256)
    """dataset_hash of the dataset the view was built from"""
    camera_width: int = Field(ge=1)
    """camera image width in the view, in pixels"""
    camera_height: int = Field(ge=1)
    """camera image height in the view, in pixels"""
    anchor_y: float = Field(ge=0.0, le=1.0)
    """vertical position of the aspect-ratio crop (0 top, 1 bottom; `imaging.decode.CameraResize`)"""
    quality: int = Field(ge=1, le=100)
    """JPEG quality of the re-encoded cameras (libjpeg scale, 1-100)"""
    chroma_subsampling: str
    """chroma subsampling of the re-encoded cameras, e.g. 444 (full chroma)"""
    resize_filter: str
    """how the pixels were resampled (the decode path's DCT scaling + resize, with versions)"""
    encoder: str
    """JPEG encoder and its version, e.g. `simplejpeg 1.9.0 (libjpeg-turbo)`"""


class Manifest(_Record):
    """manifest.json of docs/format.md, validated (types, hashes, shard paths) on load."""

    format_version: Literal[1]
    """format version this manifest follows"""
    builder_version: str
    """"drivetrain <version>" that built it"""
    dataset_hash: str = Field(pattern=_SHA256)
    """identity of the dataset (see module docstring)"""
    source: str
    """raw-log source name ("pandaset", "synthetic")"""
    num_samples: int = Field(ge=0)
    """samples (index rows)"""
    num_shards: int = Field(ge=0)
    """shards"""
    total_bytes: int = Field(ge=0)
    """index + shard bytes"""
    sensors: Sensors
    """sensors every sample carries"""
    shards: tuple[ShardEntry, ...]
    """shards in build order; `shard_id` in the index is a position in this list"""
    index: IndexEntry
    """the index file"""
    source_logs: tuple[SourceLog, ...]
    """raw logs, sorted by log_id"""
    splits: Splits
    """train/val assignment"""
    class_counts: dict[str, int]
    """cuboids per class group over the dataset"""
    quarantine: tuple[dict[str, Any], ...]
    """frames left out: {key, reason, detail, path}"""
    build_config: dict[str, Any]
    """the build options that shape the bytes"""
    view: ViewLineage | None = None
    """training views only: the parent dataset and the view parameters"""

    @property
    def shard_paths(self) -> list[str]:
        """Shard paths relative to the root, in manifest order."""
        return [s.path for s in self.shards]

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-able dict (what manifest.json holds; unset optional fields left out)."""
        return self.model_dump(mode="json", exclude_none=True)

    @classmethod
    def from_dict(cls, data: Any, *, where: str) -> Manifest:
        """Validate `data` (parsed JSON) into a Manifest.

        Raises:
            ManifestError: another format version, or fields missing / mistyped / out of range
                (each named with its path, e.g. `shards.0.path`); `where` names the file.
        """
        version = data.get("format_version", FORMAT_VERSION) if isinstance(data, dict) else 1
        if version != FORMAT_VERSION:
            shown = version if type(version) is int and abs(version) < 10**9 else "(not 1)"
            raise ManifestError(
                f"{where} has format_version {shown}, this "
                f"drivetrain reads {FORMAT_VERSION}; rebuild the dataset or "
                "upgrade drivetrain"
            )
        try:
            text = json.dumps(data)  # validated as JSON: lists -> tuples
        except (ValueError, TypeError, RecursionError) as exc:  # too deep, or not JSON data
            raise ManifestError(
                f"{where} cannot be read as JSON data ({type(exc).__name__}); rebuild the dataset"
            ) from None
        try:
            manifest = cls.model_validate_json(text)
        except ValidationError as exc:
            problems = "; ".join(
                f"field {'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}"
                for e in exc.errors()[:10]
            )
            raise ManifestError(
                f"{where} does not follow docs/format.md ({problems}); rebuild the dataset"
            ) from None
        manifest.check_identity(where)
        return manifest

    def check_identity(self, where: str) -> None:
        """Check that `dataset_hash` is the hash of the index and shards this manifest lists.

        With the later sha256 checks of the index and shards, a dataset that passes is the one
        its hash names: lineage can trust it.

        Raises:
            ManifestError: the hash differs, shard paths repeat, or `num_shards` is not the count.
        """
        paths = [s.path for s in self.shards]
        if len(set(paths)) != len(paths) or self.num_shards != len(paths):
            raise ManifestError(
                f"{where} lists {len(paths)} shards ({len(set(paths))} distinct) but num_shards "
                f"is {self.num_shards}; rebuild the dataset"
            )
        expected = compute_dataset_hash(self.index.sha256, [vars(s) for s in self.shards])
        if self.dataset_hash != expected:
            raise ManifestError(
                f"{where} names dataset_hash {self.dataset_hash[:16]}... but its index and shards "
                f"hash to {expected[:16]}...; the manifest was edited or mixed from two builds: "
                "rebuild the dataset"
            )


def builder_version() -> str:
    """Return "drivetrain <package version>" (recorded in every manifest)."""
    try:
        return f"drivetrain {metadata.version('drivetrain')}"
    except metadata.PackageNotFoundError:
        return "drivetrain unknown"


def compute_dataset_hash(index_sha256: str, shards: Sequence[dict[str, Any]]) -> str:
    """Return the dataset hash from the index sha256 and the shard entries (path, sha256)."""
    lines = [f"index:{index_sha256}\n", *(f"{s['path']}:{s['sha256']}\n" for s in shards)]
    return hashlib.sha256("".join(lines).encode()).hexdigest()


class ShardLocationError(UserError, ManifestError):
    """A manifest names a shard `location` outside its own folder and every declared root."""

    def __init__(self, location: str, manifest: str, allowed: str) -> None:
        self.location, self.manifest, self.allowed = location, manifest, allowed
        super().__init__(
            f"shard location {location} is outside {allowed}",
            manifest,
            "keep the shards under the dataset folder, or declare their folder with "
            f"shard_roots= or ${SHARD_ROOTS_ENV} if you trust this manifest",
        )

    def __reduce__(self):
        """Pickle with the original arguments."""
        return type(self), (self.location, self.manifest, self.allowed)


def dataset_file(root: str, name: str, *, is_local: bool) -> str:
    """Return `<root>/<name>`, a file of the dataset at `root`, refusing a local one outside it.

    The one place where a dataset's own files get their paths: a local path is resolved (links
    and `..` followed) and must stay inside the resolved folder, so a link to another file of
    the dataset is fine and one to /etc/passwd is refused before it is opened.

    Args:
        root: the dataset folder (a path, a `file://` URL or, with `is_local` False, a URL or a
            path inside a remote file system).
        name: the file's path relative to `root`.
        is_local: `root` is on the local file system.

    Raises:
        PathOutsideRootError: the local file resolves outside `root`; names the file and the
            root.
    """
    root = root.rstrip("/")
    path = f"{root}/{name}"
    if is_local:
        ensure_inside(_local_path(path), _local_path(root))
    return path


def declared_shard_roots(roots: Sequence[str | os.PathLike[str]] = ()) -> tuple[str, ...]:
    """Return the folders the user declared for shard locations: `roots`, then `$DRIVETRAIN_SHARD_ROOTS`."""
    env = os.environ.get(SHARD_ROOTS_ENV, "").split(",")
    return tuple(
        text for text in (os.fspath(r).strip().rstrip("/") for r in (*roots, *env)) if text
    )


def _local_path(url: str) -> str:
    return re.sub(r"^(?:file|local)://", "", url)


def _url_inside(url: str, folder: str) -> bool:
    """True when `url` is `folder/...` on the same store (no `..` segment anywhere)."""
    protocol, _, rest = url.partition("://")
    base_protocol, _, base = folder.partition("://")
    if protocol != base_protocol or ".." in rest.split("/"):
        return False
    base = posixpath.normpath(base).rstrip("/")
    return posixpath.normpath(rest).startswith(f"{base}/")


def _check_location(target: str, root: str, roots: tuple[str, ...], location: str) -> None:
    """Refuse `target` (a shard's resolved location) outside `root` and the declared `roots`.

    A local manifest may name any URL (the node only downloads it into the cache by shard
    path) and local paths inside its folder, the local part store or `roots`; a remote
    manifest may name only URLs under its own folder URL or under `roots`, and local paths
    only inside a local folder of `roots`.
    """
    local_manifest = is_local_url(root)
    if not is_local_url(target):
        folders = [] if local_manifest else [root, *roots]
        if local_manifest or any(_url_inside(target, f) for f in folders if "://" in f):
            return
    else:
        folders = [_local_path(r) for r in roots if is_local_url(r)]
        if local_manifest:
            from platform_lib.shards.merge import resolve_part_store  # merge imports this module

            store = resolve_part_store()
            roots = (*roots, store) if is_local_url(store) else roots
            folders = [_local_path(root), *folders, *([store] if is_local_url(store) else [])]
        for folder in folders:
            try:
                ensure_inside(_local_path(target), folder)
                return
            except PathOutsideRootError:
                continue
    allowed = "the dataset folder" + (f" and the declared roots {list(roots)}" if roots else "")
    raise ShardLocationError(location, f"{root}/{MANIFEST_NAME}", allowed)


def shard_location(
    root: str | Path, entry: ShardEntry, *, roots: Sequence[str | os.PathLike[str]] = ()
) -> str:
    """Return where the bytes of the shard `entry` (one manifest shard) are, once checked.

    `<root>/<path>` for a dataset built in one piece; for a merged dataset the entry's
    `location` (a URL or absolute path as is, a relative one joined to `root`), which must lie
    inside the dataset folder or a declared root (`_check_location`). A location is only ever
    read; the node cache writes under `path`.

    Args:
        root: the dataset folder or URL (where manifest.json is).
        entry: the shard entry.
        roots: folders (paths or URLs) the user trusts to hold shards, besides
            `$DRIVETRAIN_SHARD_ROOTS`.

    Raises:
        ShardLocationError: the location leaves the dataset folder and every declared root;
            names the location and the manifest.
        PathOutsideRootError: a local shard `<root>/<path>` links out of the dataset folder.
    """
    root = str(root).rstrip("/")
    location = entry.location
    if not location:
        return dataset_file(root, entry.path, is_local=is_local_url(root))
    target = location if "://" in location or location.startswith("/") else f"{root}/{location}"
    _check_location(target, root, declared_shard_roots(roots), location)
    return target


def dumps_manifest(manifest: Manifest) -> bytes:
    """Return deterministic manifest bytes (sorted keys, 2-space indent, trailing newline)."""
    return (
        json.dumps(manifest.to_dict(), sort_keys=True, indent=2, allow_nan=False) + "\n"
    ).encode()


def write_manifest(root: Path, manifest: Manifest) -> Path:
    """Write `root/manifest.json` atomically (temporary name, fsync, rename, fsync folder)."""
    root = Path(root)
    path = root / MANIFEST_NAME
    write_file_atomic(path, dumps_manifest(manifest))
    fsync_dir(root)
    return path


def load_manifest(root: str | Path, *, storage_options: dict[str, Any] | None = None) -> Manifest:
    """Load and validate `<root>/manifest.json` (local path or fsspec URL).

    Args:
        root: dataset folder or URL.
        storage_options: fsspec options for a remote root.

    Raises:
        ManifestMissingError: the folder has no manifest.json (not a dataset, or a build that
            did not finish); the message names the folder and says to rebuild.
        ManifestError: the manifest is not valid JSON, does not follow docs/format.md, or
            holds more than `MAX_MANIFEST_BYTES`.
        NotRegularFileError: a local manifest.json is a FIFO, device, socket, folder or kernel
            file.
        PathOutsideRootError: a local manifest.json links out of the dataset folder.
        StorageURLError: `root` is no usable location (unknown scheme, malformed, bad bucket).
        StorageAccessError: missing or bad credentials, or access denied.
        OSError: a transient store error (network, throttling): callers decide whether to
            retry (`storage.call_with_retries`), then `storage.explain_location_error`.
    """
    root_str = str(root).rstrip("/")
    try:
        fs, path, is_local = resolve_fs(root_str, storage_options)
        manifest_path = dataset_file(path, MANIFEST_NAME, is_local=is_local)
        raw = read_input(
            fs, manifest_path, max_bytes=MAX_MANIFEST_BYTES, root=path if is_local else None
        )
    except (FileNotFoundError, NotADirectoryError):
        raw = None
    except UserError as exc:
        if type(exc) is not UserError:  # NotRegularFileError, StorageURLError
            raise
        raise ManifestError(
            f"{root_str}/{MANIFEST_NAME} holds more than {MAX_MANIFEST_BYTES} bytes; "
            "check that this is a Drivetrain dataset"
        ) from None
    except Exception as exc:  # the store's own errors: credentials, bucket name, network
        user = None if is_transient(exc) else explain_location_error(exc, root_str)
        if user is None:  # transient: the caller decides whether to retry
            raise
        raise user from exc
    if raw is None:
        raise ManifestMissingError(
            f"{root_str} is not a complete Drivetrain dataset: it has no {MANIFEST_NAME} "
            "(manifests are written last, so the build did not finish or this is the wrong "
            f"folder); rebuild it with `drivetrain data build ... --output {root_str}`"
        )
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise ManifestError(
            f"{root_str}/{MANIFEST_NAME} is not valid JSON ({exc}); rebuild the dataset"
        ) from exc
    return Manifest.from_dict(data, where=f"{root_str}/{MANIFEST_NAME}")
