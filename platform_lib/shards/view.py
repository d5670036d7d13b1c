"""DatasetView: one dataset (or one split) as the typed manifest plus a columnar index.

Shape legend (R rows = samples sorted by (shard_id, sample_offset), M members, S shards):
    key_offsets (R + 1,) int64, key_bytes (K,) uint8   key i = key_bytes[key_offsets[i]:key_offsets[i + 1]]
    shard_id, sample_offset, sample_size (R,)          shard position, byte range of the sample
    member_start (R + 1,) int64                        members of row i: [member_start[i], member_start[i + 1])
    member_code (M,) int16 -> member_names             ext name, e.g. "lidar.npy"
    member_offset, member_size (M,) int64              byte range of the member DATA in the shard
    member_sha256 (M, 32) uint8, member_xxh3 (M,) uint64 (None for datasets built without it)
    shard_bytes (S,) int64                             shard sizes from the manifest
No Python object per row, so forked workers share a view's pages (see `DatasetView`).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from platform_lib.shards.errors import DatasetIndexError
from platform_lib.shards.index import INDEX_NAME, check_index_table, load_index
from platform_lib.shards.manifest import Manifest, dataset_file, load_manifest, shard_location
from platform_lib.shards.sample import verification_folder
from platform_lib.storage import resolve_fs

__all__ = ["DatasetView", "check_index_rows", "load_view", "view_from_table"]

_HEX = np.full(256, 255, dtype=np.uint8)
_HEX[np.frombuffer(b"0123456789", np.uint8)] = np.arange(10)
_HEX[np.frombuffer(b"abcdef", np.uint8)] = np.arange(10, 16)


@dataclass(kw_only=True, eq=False)
class DatasetView:
    """One dataset split: the validated manifest plus fixed-width index columns (see module doc).

    Columns are fixed-width numpy arrays (keys as Arrow's string layout), so forked workers
    share its pages: reading a numpy element, unlike a Python object, writes no reference
    count. Rows are sorted by (shard_id, sample_offset), so units read sequentially.
    """

    url: str
    """dataset folder or fsspec URL as given"""
    root: str
    """the dataset folder inside its filesystem (no protocol)"""
    is_local: bool
    """True for a local folder (read in place), False for object storage (node cache)"""
    storage_options: dict[str, Any]
    """fsspec options of a remote dataset"""
    manifest: Manifest
    """the validated manifest"""
    row: np.ndarray
    """(R,) int64 row number in index.parquet (for messages)"""
    key_offsets: np.ndarray
    key_bytes: np.ndarray
    log_code: np.ndarray
    """(R,) int32 position of the row's log id in `log_ids` (sorted)"""
    log_ids: tuple[str, ...]
    frame_index: np.ndarray
    """(R,) int64 sweep index within the log"""
    shard_id: np.ndarray
    sample_offset: np.ndarray
    sample_size: np.ndarray
    member_start: np.ndarray
    member_code: np.ndarray
    member_names: tuple[str, ...]
    member_offset: np.ndarray
    member_size: np.ndarray
    member_sha256: np.ndarray
    member_xxh3: np.ndarray | None
    shard_bytes: np.ndarray
    shard_files: tuple[str, ...] = ()
    """per shard, where its bytes are inside the filesystem of `store_url` (`<root>/<path>`,
    or a merged dataset's part location)"""
    store_url: str = ""
    """URL whose filesystem holds the shards (= url unless the dataset is merged from parts)"""
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(key, reason) of index rows left out under error_policy "skip\""""
    _key_order: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.shard_id)

    @property
    def dataset_hash(self) -> str:
        """The manifest's dataset hash."""
        return self.manifest.dataset_hash

    @property
    def shard_paths(self) -> list[str]:
        """Shard paths relative to the root, in manifest order."""
        return self.manifest.shard_paths

    def key(self, i: int) -> str:
        """Return the key of row `i`."""
        return self.key_bytes[self.key_offsets[i] : self.key_offsets[i + 1]].tobytes().decode()

    def keys(self) -> list[str]:
        """Return every key in row order (one str per row: for tools, not for workers)."""
        blob = self.key_bytes.tobytes()
        offsets = self.key_offsets.tolist()
        return [blob[a:b].decode() for a, b in zip(offsets[:-1], offsets[1:], strict=True)]

    def row_of(self, key: str) -> int:
        """Return the row of `key` (binary search over a sorted permutation; O(log R)).

        Raises:
            KeyError: unknown key (names the dataset).
        """
        if self._key_order is None:
            arrow = pa.LargeStringArray.from_buffers(
                len(self), pa.py_buffer(self.key_offsets), pa.py_buffer(self.key_bytes)
            )
            self._key_order = pc.sort_indices(arrow).to_numpy().astype(np.int64)
        order = self._key_order
        target = key.encode()
        i = bisect.bisect_left(
            range(len(order)),
            target,
            key=lambda j: self.key_bytes[
                self.key_offsets[order[j]] : self.key_offsets[order[j] + 1]
            ].tobytes(),
        )
        if i < len(order) and self.key(int(order[i])) == key:
            return int(order[i])
        raise KeyError(f"sample {key!r} is not in {self.url}/{INDEX_NAME}")

    def members_of(self, i: int) -> range:
        """Return the member positions of row `i`."""
        return range(int(self.member_start[i]), int(self.member_start[i + 1]))

    def member_name(self, m: int) -> str:
        """Return the ext name of member `m` (e.g. "lidar.npy")."""
        return self.member_names[self.member_code[m]]

    def shard_path(self, i: int) -> str:
        """Return the shard path (relative to the root) of row `i`."""
        return self.manifest.shards[int(self.shard_id[i])].path


def _string_buffers(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Return (offsets (n + 1,) int64 starting at 0, data uint8) of a string array (copied once)."""
    large = pc.cast(array, pa.large_string()) if not pa.types.is_large_string(array.type) else array
    large = large.combine_chunks() if isinstance(large, pa.ChunkedArray) else large
    _, offsets_buf, data_buf = large.buffers()
    offsets = np.frombuffer(offsets_buf, np.int64)[large.offset : large.offset + len(large) + 1]
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    data = data[offsets[0] : offsets[-1]].copy()
    return (offsets - offsets[0]).astype(np.int64), data


def _hex_digests(array: pa.Array, where: str) -> np.ndarray:
    """Return (n, 32) uint8 digests of an array of 64-character hex strings."""
    offsets, data = _string_buffers(array)
    if len(offsets) > 1 and (np.diff(offsets) != 64).any():
        bad = int(np.flatnonzero(np.diff(offsets) != 64)[0])
        raise DatasetIndexError(
            f"{where}: member {bad} has a sha256 that is not 64 hex characters; rebuild the dataset"
        )
    nibbles = _HEX[data].reshape(-1, 32, 2)
    if (nibbles == 255).any():
        raise DatasetIndexError(
            f"{where}: a member sha256 holds non-hex characters; rebuild the dataset"
        )
    return (nibbles[:, :, 0] << 4) | nibbles[:, :, 1]


def check_index_rows(
    view: DatasetView, shard_column: pa.Array | None = None
) -> list[tuple[int, str]]:
    """Return (position in view, problem) for every row inconsistent with the manifest.

    Checked (vectorised): shard id in range and equal to the row's `shard` path; every member
    the manifest's sensors require present; sample range inside the shard's bytes; each member
    range inside its sample range (so inside its shard). Ranges are compared without int64
    overflow, so only sizes bounded by the manifest's shard sizes pass (what sizes the ring).
    """
    n, problems = len(view), dict[int, str]()
    shards = view.manifest.shards
    sid = view.shard_id
    bad_id = (sid < 0) | (sid >= len(shards))
    for i in np.flatnonzero(bad_id):
        problems.setdefault(
            int(i), f"shard id {sid[i]} is not in the manifest ({len(shards)} shards)"
        )
    if shard_column is not None:
        dictionary = shard_column.dictionary.to_pylist()
        expected = np.array(
            [
                view.manifest.shard_paths.index(p) if p in view.manifest.shard_paths else -1
                for p in dictionary
            ],
            dtype=np.int64,
        )
        named = expected[shard_column.indices.to_numpy(zero_copy_only=False)]
        for i in np.flatnonzero((named != sid) & ~bad_id):
            problems.setdefault(
                int(i),
                f"shard column {dictionary[shard_column.indices[i].as_py()]!r} "
                f"does not match shard id {sid[i]} ({shards[sid[i]].path}) of the manifest",
            )
    counts = np.diff(view.member_start)
    row_of_member = np.repeat(np.arange(n), counts)
    present = np.zeros((n, len(view.member_names)), dtype=bool)
    present[row_of_member, view.member_code] = True
    for name in view.manifest.sensors.required_members():
        code = view.member_names.index(name) if name in view.member_names else None
        missing = np.ones(n, bool) if code is None else ~present[:, code]
        for i in np.flatnonzero(missing):
            problems.setdefault(
                int(i), f"member {name!r} missing from the row (the manifest's sensors require it)"
            )
    limit = np.where(
        bad_id, 0, view.shard_bytes[np.clip(sid, 0, max(len(shards) - 1, 0))] if len(shards) else 0
    )
    # compared as differences, never sums: int64 sums of hostile sizes wrap around
    lo, size = view.sample_offset, view.sample_size
    bad_sample = (lo < 0) | (size <= 0) | (lo > limit) | (size > limit - np.maximum(lo, 0))
    for i in np.flatnonzero(bad_sample):
        problems.setdefault(
            int(i),
            f"sample bytes [{lo[i]}, {lo[i]} + {size[i]}) outside the shard's {limit[i]} bytes",
        )
    hi = np.where(bad_sample, lo, lo + np.where(bad_sample, 0, size))
    m_lo, m_size = view.member_offset, view.member_size
    m_room = hi[row_of_member] - np.maximum(m_lo, lo[row_of_member])
    outside = (m_lo < lo[row_of_member]) | (m_size < 0) | (m_room < 0) | (m_size > m_room)
    for m in np.flatnonzero(outside):
        row = int(row_of_member[m])
        problems.setdefault(
            row,
            f"member {view.member_name(int(m))!r} bytes [{m_lo[m]}, {m_lo[m]} + {m_size[m]}) "
            f"outside the sample [{lo[row]}, {hi[row]}) of the shard's {limit[row]} bytes",
        )
    return sorted(problems.items())


def _shard_files(
    manifest: Manifest,
    url: str,
    root: str,
    is_local: bool,
    storage_options: dict[str, Any],
    shard_roots: Sequence[str],
) -> dict[str, Any]:
    """Where each shard's bytes are: `<root>/<path>`, or the parts of a merged dataset."""
    if not any(s.location for s in manifest.shards):
        return {
            "shard_files": tuple(
                dataset_file(root, p, is_local=is_local) for p in manifest.shard_paths
            ),
            "store_url": url,
            "is_local": is_local,
        }
    located = [shard_location(url, s, roots=shard_roots) for s in manifest.shards]
    files = tuple(resolve_fs(loc, storage_options)[1] for loc in located)
    local = all("://" not in loc or loc.startswith(("file://", "local://")) for loc in located)
    return {"shard_files": files, "store_url": located[0], "is_local": local}


def _columns(table: pa.Table, manifest: Manifest, *, where: str, **location: Any) -> DatasetView:
    members = table["members"].combine_chunks()
    flat = pc.list_flatten(members)
    names = pc.dictionary_encode(flat.field("name"))
    lengths = (
        pc.list_value_length(members).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    )
    logs = pc.dictionary_encode(table["log_id"].combine_chunks())
    log_names = logs.dictionary.to_pylist()
    rank = np.zeros(len(log_names), np.int32)
    rank[np.argsort(np.array(log_names, dtype=object), kind="stable")] = np.arange(len(log_names))
    key_offsets, key_bytes = _string_buffers(table["key"])
    xxh3 = flat.field("xxh3_64") if "xxh3_64" in [f.name for f in flat.type] else None
    return DatasetView(
        **location,
        manifest=manifest,
        row=table["__row__"].to_numpy(),
        key_offsets=key_offsets,
        key_bytes=key_bytes,
        log_code=rank[logs.indices.to_numpy(zero_copy_only=False)],
        log_ids=tuple(sorted(log_names)),
        frame_index=table["frame_index"].to_numpy().astype(np.int64),
        shard_id=table["shard_id"].to_numpy().astype(np.int64),
        sample_offset=table["sample_offset"].to_numpy().astype(np.int64),
        sample_size=table["sample_size"].to_numpy().astype(np.int64),
        member_start=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        member_code=names.indices.to_numpy(zero_copy_only=False).astype(np.int16),
        member_names=tuple(names.dictionary.to_pylist()),
        member_offset=flat.field("offset").to_numpy(zero_copy_only=False).astype(np.int64),
        member_size=flat.field("size").to_numpy(zero_copy_only=False).astype(np.int64),
        member_sha256=_hex_digests(flat.field("sha256"), where),
        member_xxh3=None if xxh3 is None else xxh3.to_numpy(zero_copy_only=False).astype(np.uint64),
        shard_bytes=np.array([s.bytes for s in manifest.shards], dtype=np.int64),
    )


def view_from_table(
    table: pa.Table,
    manifest: Manifest,
    *,
    url: str,
    root: str,
    is_local: bool,
    storage_options: dict[str, Any],
    split: str | None = None,
    error_policy: str = "raise",
    shard_roots: Sequence[str] = (),
) -> DatasetView:
    """Build the view of `split` (None: all rows) from an index table checked by `read_index`.

    `shard_roots`: folders a merged dataset's shard locations may point into besides its own
    (`platform_lib.shards.manifest.shard_location`).

    Raises:
        ShardLocationError: a shard location outside the dataset folder and `shard_roots`.
        DatasetIndexError: the row count differs from the manifest or a key repeats
            (`check_index_table`, whatever the policy); a row is inconsistent with the manifest (error_policy "raise"; the
            message names the index row, key and shard id); with "skip" the row is left out
            and listed in `DatasetView.skipped`.
    """
    where = f"{url}/{INDEX_NAME}"
    check_index_table(table, manifest, where=where)
    location = {
        "url": url,
        "root": root,
        "storage_options": dict(storage_options),
        **_shard_files(manifest, url, root, is_local, storage_options, shard_roots),
    }
    table = table.append_column("__row__", pa.array(np.arange(table.num_rows, dtype=np.int64)))
    if split is not None:
        table = table.filter(pc.equal(table["split"], split))
    table = table.sort_by([("shard_id", "ascending"), ("sample_offset", "ascending")])
    view = _columns(table, manifest, where=where, **location)
    problems = check_index_rows(view, pc.dictionary_encode(table["shard"].combine_chunks()))
    if not problems:
        return view
    if error_policy == "raise":
        i, problem = problems[0]
        raise DatasetIndexError(
            f"{where} row {view.row[i]} (key {view.key(i)!r}, shard id "
            f"{view.shard_id[i]}): {problem}; rebuild the dataset or load with "
            "error_policy='skip'"
        )
    keep = np.ones(len(view), bool)
    keep[[i for i, _ in problems]] = False
    kept = _columns(table.filter(pa.array(keep)), manifest, where=where, **location)
    kept.skipped = [(view.key(i), f"index row {view.row[i]}: {problem}") for i, problem in problems]
    return kept


def load_view(
    url: str,
    *,
    split: str | None = None,
    storage_options: dict[str, Any] | None = None,
    error_policy: str = "raise",
    shard_roots: Sequence[str] = (),
    cache_dir: str | None = None,
) -> DatasetView:
    """Open the dataset at `url` (local folder or fsspec URL): validated manifest + index view.

    The index must be the manifest's (size, sha256, row count, unique keys, every member range
    inside its shard) before any row is used; its sha256 is computed once per node and file
    version and recorded in `<cache_dir>/<dataset_hash[:16]>/verified/index.parquet.json`
    (beside the shard records; `cache_dir` None: the default node cache).

    Raises:
        NotRegularFileError: a local manifest.json or index.parquet is not a regular file.
        ShardLocationError: a shard location outside the dataset folder and `shard_roots`.
        ManifestMissingError: no manifest.json (unfinished build or wrong path).
        ManifestError: manifest.json off-contract (e.g. an absolute or `..` shard path).
        DatasetIndexError: index.parquet missing, of another size or sha256 than the
            manifest's, unreadable, off-schema, or a row inconsistent with the manifest
            (see `load_index`, `view_from_table`).
        PathOutsideRootError: a local manifest, index or shard links out of the dataset folder.
        OSError: the store could not be read (the loader retries transient ones).
    """
    options = dict(storage_options or {})
    fs, root, is_local = resolve_fs(url, options)
    manifest = load_manifest(url, storage_options=options)
    table, _ = load_index(
        fs,
        dataset_file(root, INDEX_NAME, is_local=is_local),
        manifest.index,
        is_local=is_local,
        where=f"{url}/{INDEX_NAME}",
        record=verification_folder(cache_dir, manifest.dataset_hash) / f"{INDEX_NAME}.json",
    )
    return view_from_table(
        table,
        manifest,
        url=url,
        root=root,
        is_local=is_local,
        storage_options=options,
        split=split,
        error_policy=error_policy,
        shard_roots=shard_roots,
    )
