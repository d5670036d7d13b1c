"""Open a dataset (local folder or fsspec URL): manifest, index, and retried object-store access.

The index is loaded once in the main process into flat numpy arrays (`DatasetView`), which
worker processes inherit, so workers never re-read it from the object store.
"""

from __future__ import annotations

import errno
import io
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import tenacity

from platform_lib.loading.errors import (
    DatasetIndexError,
    DatasetNotFoundError,
    ObjectStoreUnreachableError,
)
from platform_lib.shards.manifest import shard_location

__all__ = ["DatasetView", "call_with_retries", "is_transient", "load_dataset_view", "resolve_fs"]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: errno values that retrying cannot fix.
_PERMANENT_ERRNOS = {errno.ENOENT, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT, errno.EFBIG,
                     errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG, errno.ELOOP}
#: Bounded timeouts and retries for s3 unless the caller overrides them.
_S3_DEFAULTS = {"config_kwargs": {"connect_timeout": 5, "read_timeout": 60, "retries": {"max_attempts": 2}}}


def is_transient(exc: BaseException) -> bool:
    """Return True for errors worth retrying (network, timeouts, throttling), False otherwise."""
    if isinstance(exc, FileNotFoundError | PermissionError | IsADirectoryError):
        return False
    if isinstance(exc, OSError) and exc.errno in _PERMANENT_ERRNOS:
        return False
    name = type(exc).__name__
    return isinstance(exc, OSError | ConnectionError | TimeoutError) or any(
        word in name for word in ("Connection", "Timeout", "Throttl", "ServiceUnavailable")
    )


def call_with_retries(fn: Callable[[], T], *, what: str, max_retries: int, backoff_s: float) -> T:
    """Run `fn`, retrying transient errors with exponential backoff (doubling, capped at 8 s).

    Raises:
        ObjectStoreUnreachableError: when a transient error persists after `max_retries` retries.
        Exception: a non-transient error from `fn`, unchanged, on its first occurrence.
    """
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(max_retries + 1),
        wait=tenacity.wait_exponential(multiplier=backoff_s, max=8.0),
        retry=tenacity.retry_if_exception(is_transient),
        reraise=True,
    )
    try:
        return retrying(fn)
    except Exception as exc:
        if not is_transient(exc):
            raise
        raise ObjectStoreUnreachableError(
            f"{what} failed after {max_retries + 1} attempts ({type(exc).__name__}: {exc}); "
            "check the endpoint, credentials and network, or raise LoaderConfig.max_retries"
        ) from exc


def resolve_fs(url: str, storage_options: dict[str, Any]) -> tuple[fsspec.AbstractFileSystem, str, bool]:
    """Return (filesystem, root path inside it, is_local) for a folder path or fsspec URL."""
    protocol = url.split("://", 1)[0] if "://" in url else "file"
    options = dict(storage_options)
    if protocol in ("s3", "s3a"):
        for key, value in _S3_DEFAULTS.items():
            options.setdefault(key, value)
    fs, root = fsspec.core.url_to_fs(url, **options)
    is_local = protocol in ("file", "local")
    return fs, root.rstrip("/"), is_local


@dataclass(kw_only=True)
class DatasetView:
    """One dataset split as flat arrays, rows sorted by (shard_id, sample_offset).

    Members are stored CSR-style: the members of row i are
    `member_*[member_start[i]:member_start[i + 1]]`. Byte offsets are absolute in the shard.
    """

    url: str
    root: str
    is_local: bool
    storage_options: dict[str, Any]
    dataset_hash: str
    shard_paths: list[str]
    shard_files: list[str]  # where each shard's bytes are, inside the filesystem of store_url
    store_url: str  # URL whose filesystem holds the shards (= url unless the dataset is merged)
    shard_bytes: np.ndarray  # (S,) int64
    key: np.ndarray  # (R,) object str
    log_id: np.ndarray  # (R,) object str
    frame_index: np.ndarray  # (R,) int64
    shard_id: np.ndarray  # (R,) int64
    sample_offset: np.ndarray  # (R,) int64
    sample_size: np.ndarray  # (R,) int64
    member_start: np.ndarray  # (R + 1,) int64
    member_name: np.ndarray  # (M,) object str, e.g. "lidar.npy"
    member_offset: np.ndarray  # (M,) int64
    member_size: np.ndarray  # (M,) int64
    member_sha256: np.ndarray  # (M,) object str hex
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.key)


def _read_bytes(fs: fsspec.AbstractFileSystem, path: str, url: str, max_retries: int, backoff_s: float) -> bytes:
    return call_with_retries(
        lambda: fs.cat_file(path), what=f"reading {url}", max_retries=max_retries, backoff_s=backoff_s
    )


def _required_members(manifest: dict[str, Any]) -> list[str]:
    sensors = manifest.get("sensors", {})
    names = [f"{camera}.jpg" for camera in sensors.get("cameras", [])]
    if sensors.get("lidar", False):
        names.append("lidar.npy")
    return names + ["cuboids.json", "calib.json", "pose.json"]


def load_dataset_view(
    url: str,
    *,
    split: str | None,
    storage_options: dict[str, Any],
    error_policy: str = "raise",
    max_retries: int = 4,
    backoff_s: float = 0.5,
) -> DatasetView:
    """Read manifest.json and index.parquet of `url` and return the rows of `split`.

    Raises:
        DatasetNotFoundError: no manifest.json (unfinished build or wrong path).
        ObjectStoreUnreachableError: the store did not answer after retries.
        DatasetIndexError: an index row is inconsistent (error_policy "raise"); with "skip"
            the row is left out and listed in `DatasetView.skipped`.
    """
    fs, root, is_local = resolve_fs(url, storage_options)
    manifest_path = f"{root}/manifest.json"
    try:
        manifest = json.loads(_read_bytes(fs, manifest_path, f"{url}/manifest.json", max_retries, backoff_s))
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise DatasetNotFoundError(
            f"{url} has no manifest.json: the build did not finish or the path is wrong; "
            "run `drivetrain data build` to (re)publish the dataset"
        ) from exc
    index_rel = manifest.get("index", {}).get("path", "index.parquet")
    table = pq.read_table(io.BytesIO(_read_bytes(fs, f"{root}/{index_rel}", f"{url}/{index_rel}", max_retries, backoff_s)))
    if split is not None:
        table = table.filter(pc.equal(table["split"], split))
    shard_paths = [s["path"] for s in manifest["shards"]]
    store_url, shard_files, is_local = url, [f"{root}/{p}" for p in shard_paths], is_local
    if any(s.get("location") for s in manifest["shards"]):  # merged: bytes stay in the parts
        located = [resolve_fs(shard_location(url, s), storage_options) for s in manifest["shards"]]
        store_url, shard_files = shard_location(url, manifest["shards"][0]), [f for _, f, _ in located]
        is_local = all(local for _, _, local in located)
    shard_bytes = np.array([int(s["bytes"]) for s in manifest["shards"]], dtype=np.int64)
    view = _build_view(table, manifest, shard_bytes, url, error_policy)
    return DatasetView(
        url=url, root=root, is_local=is_local, storage_options=dict(storage_options),
        dataset_hash=manifest["dataset_hash"], shard_paths=shard_paths, shard_files=shard_files,
        store_url=store_url, shard_bytes=shard_bytes, **view,
    )


def _build_view(table: pa.Table, manifest: dict, shard_bytes: np.ndarray, url: str, policy: str) -> dict:
    members = table["members"].combine_chunks()
    lengths = pc.list_value_length(members).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = pc.list_flatten(members)
    name = np.asarray(flat.field("name").to_pylist(), dtype=object)
    offset = flat.field("offset").to_numpy(zero_copy_only=False).astype(np.int64)
    size = flat.field("size").to_numpy(zero_copy_only=False).astype(np.int64)
    sha = np.asarray(flat.field("sha256").to_pylist(), dtype=object)
    start = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    cols = {
        "key": np.asarray(table["key"].to_pylist(), dtype=object),
        "log_id": np.asarray(table["log_id"].to_pylist(), dtype=object),
        "frame_index": table["frame_index"].to_numpy().astype(np.int64),
        "shard_id": table["shard_id"].to_numpy().astype(np.int64),
        "sample_offset": table["sample_offset"].to_numpy().astype(np.int64),
        "sample_size": table["sample_size"].to_numpy().astype(np.int64),
    }
    required = _required_members(manifest)
    keep = np.ones(len(cols["key"]), dtype=bool)
    skipped: list[tuple[str, str]] = []
    for row in range(len(keep)):
        problem = _check_row(row, cols, start, name, offset, size, required, shard_bytes)
        if problem is None:
            continue
        where = f"{url}/index.parquet row {row} (key {cols['key'][row]!r}, shard id {cols['shard_id'][row]})"
        if policy == "raise":
            raise DatasetIndexError(
                f"{where}: {problem}; rebuild the dataset or load with LoaderConfig(error_policy='skip')"
            )
        keep[row] = False
        skipped.append((str(cols["key"][row]), f"index: {problem}"))
        log.warning("skipping %s: %s", where, problem)
    rows = np.flatnonzero(keep)
    order = rows[np.lexsort((cols["sample_offset"][rows], cols["shard_id"][rows]))]
    # Re-pack the CSR member arrays in the sorted row order.
    new_lengths = lengths[order]
    new_start = np.concatenate([[0], np.cumsum(new_lengths)]).astype(np.int64)
    within = np.arange(new_start[-1]) - np.repeat(new_start[:-1], new_lengths)
    gather = np.repeat(start[order], new_lengths) + within
    return {
        **{k: v[order] for k, v in cols.items()},
        "member_start": new_start,
        "member_name": name[gather], "member_offset": offset[gather],
        "member_size": size[gather], "member_sha256": sha[gather], "skipped": skipped,
    }


def _check_row(row, cols, start, name, offset, size, required, shard_bytes) -> str | None:
    shard = cols["shard_id"][row]
    if not 0 <= shard < len(shard_bytes):
        return f"shard id {shard} is not in the manifest ({len(shard_bytes)} shards)"
    names = set(name[start[row]:start[row + 1]])
    missing = [m for m in required if m not in names]
    if missing:
        return f"member(s) {missing} missing from the row (the manifest's sensors require them)"
    lo, hi = cols["sample_offset"][row], cols["sample_offset"][row] + cols["sample_size"][row]
    if lo < 0 or hi > shard_bytes[shard]:
        return f"sample bytes [{lo}, {hi}) outside the shard's {shard_bytes[shard]} bytes"
    for m in range(start[row], start[row + 1]):
        if offset[m] < lo or offset[m] + size[m] > hi:
            return f"member {name[m]!r} bytes [{offset[m]}, {offset[m] + size[m]}) outside the sample [{lo}, {hi})"
    return None
