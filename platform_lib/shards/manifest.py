r"""manifest.json: the identity and inventory of a dataset, written LAST (docs/format.md).

`dataset_hash` = sha256 of the text `index:<index sha256>\n` followed by one line
`<shard path>:<shard sha256>\n` per shard in manifest order; it changes whenever any byte of
the index or of any shard changes, and identifies a dataset for caching, lineage and MLflow.
"""

from __future__ import annotations

import hashlib
import json
import os
from importlib import metadata
from pathlib import Path
from typing import Any

import fsspec

from platform_lib.shards.errors import DatasetError, ManifestMissingError
from platform_lib.shards.writer import fsync_dir

__all__ = [
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "builder_version",
    "compute_dataset_hash",
    "dumps_manifest",
    "load_manifest",
    "shard_location",
    "write_manifest",
]

FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
_REQUIRED = ("format_version", "dataset_hash", "num_samples", "shards", "index", "sensors")


def builder_version() -> str:
    """Return "drivetrain <package version>" (recorded in every manifest)."""
    try:
        return f"drivetrain {metadata.version('drivetrain')}"
    except metadata.PackageNotFoundError:
        return "drivetrain unknown"


def compute_dataset_hash(index_sha256: str, shards: list[dict[str, Any]]) -> str:
    """Return the dataset hash from the index sha256 and the shard entries (path, sha256)."""
    digest = hashlib.sha256(f"index:{index_sha256}\n".encode())
    for shard in shards:
        digest.update(f"{shard['path']}:{shard['sha256']}\n".encode())
    return digest.hexdigest()


def shard_location(root: str | Path, entry: dict[str, Any]) -> str:
    """Return where the bytes of the shard `entry` (one manifest["shards"] item) are.

    `<root>/<path>` for a dataset built in one piece; for a merged dataset
    (`platform_lib.shards.merge`) the entry's `location`: a URL or absolute path as is, a
    relative one joined to `root`. `path` stays the dataset-relative name of the shard.
    """
    root = str(root).rstrip("/")
    location = entry.get("location")
    if not location:
        return f"{root}/{entry['path']}"
    if "://" in location or location.startswith("/"):
        return location
    return f"{root}/{location}"


def dumps_manifest(manifest: dict[str, Any]) -> bytes:
    """Return deterministic manifest bytes (sorted keys, 2-space indent, trailing newline)."""
    return (json.dumps(manifest, sort_keys=True, indent=2, allow_nan=False) + "\n").encode()


def write_manifest(root: Path, manifest: dict[str, Any]) -> Path:
    """Write `root/manifest.json` atomically (temporary name, fsync, rename, fsync folder)."""
    root = Path(root)
    path = root / MANIFEST_NAME
    tmp = root / f"{MANIFEST_NAME}.tmp-{os.getpid()}"
    with open(tmp, "xb") as f:
        f.write(dumps_manifest(manifest))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(root)
    return path


def load_manifest(root: str | Path) -> dict[str, Any]:
    """Load and sanity-check `<root>/manifest.json` (local path or fsspec URL).

    Raises:
        ManifestMissingError: the folder has no manifest.json (not a dataset, or a build that
            did not finish); the message names the folder and says to rebuild.
        DatasetError: the manifest is not valid JSON, lacks required keys, or has another
            format version.
    """
    root_str = str(root).rstrip("/")
    fs, path = fsspec.core.url_to_fs(root_str)
    manifest_path = f"{path}/{MANIFEST_NAME}"
    if not fs.exists(manifest_path):
        raise ManifestMissingError(
            f"{root_str} is not a complete Drivetrain dataset: it has no {MANIFEST_NAME} "
            "(manifests are written last, so the build did not finish or this is the wrong "
            "folder); rebuild it with `drivetrain data build ... --output "
            f"{root_str}`")
    try:
        manifest = json.loads(fs.cat_file(manifest_path))
    except (ValueError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{root_str}/{MANIFEST_NAME} is not valid JSON ({exc}); "
                           "rebuild the dataset") from exc
    missing = [k for k in _REQUIRED if k not in manifest] if isinstance(manifest, dict) else _REQUIRED
    if missing:
        raise DatasetError(f"{root_str}/{MANIFEST_NAME} lacks keys {list(missing)}; "
                           "rebuild the dataset")
    if manifest["format_version"] != FORMAT_VERSION:
        raise DatasetError(f"{root_str}/{MANIFEST_NAME} has format_version "
                           f"{manifest['format_version']}, this drivetrain reads "
                           f"{FORMAT_VERSION}; rebuild the dataset or upgrade drivetrain")
    return manifest
