"""Validate a published dataset end to end: manifest, index schema + values, every shard byte.

Collects every problem (with shard, member and byte offset where known): the manifest (as
`load_manifest` checks it), index.parquet size, sha256, schema, pandera rules and content
hashes, each shard's size and sha256, and a tar scan of each shard (safe member names, regular
files, checksums, zero padding) compared member by member with the index. Unsafe files (not
regular, or resolving outside the dataset folder and its declared roots) raise instead.
"""

from __future__ import annotations

import hashlib
import io
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem
from pandera.errors import SchemaErrors
from tqdm import tqdm

from platform_lib.shards.errors import DatasetError, ShardFormatError
from platform_lib.shards.index import INDEX_NAME, count_classes, read_index
from platform_lib.shards.manifest import (
    Manifest,
    dataset_file,
    load_manifest,
    shard_location,
)
from platform_lib.shards.tar import BLOCK_SIZE, check_member_name, iter_tar_members, padded_size
from platform_lib.shards.view import view_from_table
from platform_lib.shards.writer import sample_content_hash
from platform_lib.storage import open_input
from schemas.index import validate_index_frame

__all__ = ["Problem", "ValidationReport", "validate_dataset"]

_MAX_SCHEMA_LINES = 20


@dataclass(frozen=True)
class Problem:
    """One violation of docs/format.md."""

    message: str
    """what is wrong and what to do"""
    shard: str | None = None
    """shard path relative to the dataset root, or None for manifest/index problems"""
    member: str | None = None
    """tar member name (`<key>.<ext>`), or None"""
    offset: int | None = None
    """byte offset in the shard (header or data start), or None"""

    def __str__(self) -> str:
        where = [
            p
            for p in (
                self.shard and f"shard {self.shard}",
                self.member and f"member {self.member!r}",
                self.offset is not None and f"byte offset {self.offset}",
            )
            if p
        ]
        return f"{', '.join(where)}: {self.message}" if where else self.message


@dataclass(kw_only=True)
class ValidationReport:
    """Outcome of `validate_dataset`; `ok` when no problem was found."""

    root: str
    """dataset folder or URL"""
    dataset_hash: str | None = None
    """manifest dataset_hash (None when the manifest is unreadable)"""
    num_samples: int = 0
    """index rows checked"""
    num_shards: int = 0
    """shards checked"""
    problems: list[Problem] = field(default_factory=list)
    """every violation found, in check order"""

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems

    def describe(self) -> str:
        """Return a human summary listing every problem."""
        if self.ok:
            return (
                f"OK {self.root}: {self.num_samples} samples in {self.num_shards} shards, "
                f"dataset_hash {self.dataset_hash}"
            )
        lines = [f"INVALID {self.root}: {len(self.problems)} problem(s)"]
        lines += [f"  {p}" for p in self.problems]
        lines.append("Rebuild the dataset (or re-download the named shards) and validate again.")
        return "\n".join(lines)


def _scan_shard(data: bytes, shard: str, problems: list[Problem]) -> dict[str, dict[str, Any]]:
    """Scan tar bytes; return member name -> {header, offset, size, sha256}; record problems."""
    found: dict[str, dict[str, Any]] = {}
    view = memoryview(data)
    end = 0
    try:
        for info in iter_tar_members(view, shard=shard):
            problem = check_member_name(info.name)
            if problem:
                problem += "; refuse this shard"
            elif not info.is_regular:
                problem = "member is not a regular file"
            if problem:
                problems.append(Problem(problem, shard, info.name, info.header_offset))
            stop = info.data_offset + info.size
            end = info.data_offset + padded_size(info.size)
            if any(view[stop:end]):
                message = "non-zero bytes in member padding (tampered)"
                problems.append(Problem(message, shard, info.name, stop))
            found[info.name] = {
                "header": info.header_offset,
                "offset": info.data_offset,
                "size": info.size,
                "sha256": hashlib.sha256(info.data or b"").hexdigest(),
            }
    except ShardFormatError as exc:
        problems.append(Problem(exc.reason, shard, exc.member, exc.offset))
        return found
    tail = view[end:]
    if len(tail) < 2 * BLOCK_SIZE:
        message = (
            f"shard ends {len(tail)} bytes after the last member, "
            "before the end-of-archive blocks (truncated)"
        )
        problems.append(Problem(message, shard, offset=len(data)))
    elif any(tail):
        first = end + next(i for i, b in enumerate(tail) if b)
        problems.append(Problem("non-zero bytes after the end of the archive", shard, offset=first))
    return found


def _read_sized(
    fs: fsspec.AbstractFileSystem, path: str, expected: int, root: str | None = None
) -> tuple[int, bytes]:
    """Return (real size, bytes) of `path`, reading at most `min(real size, expected)` bytes.

    The size comes before any read (local: `fstat` of a regular file; remote: the store's), so
    no file is read past what the manifest promises. With `root`, a local file must lie inside
    that folder once open.

    Raises:
        FileNotFoundError: `path` does not exist.
        NotRegularFileError: a local `path` is not a regular file.
        PathOutsideRootError: the opened local file lies outside `root`.
    """
    with open_input(fs, path, root=root) as f:
        if isinstance(fs, LocalFileSystem):
            size = os.fstat(f.fileno()).st_size
        else:
            size = int(fs.size(path))
        data = f.read(min(size, expected)) or b""  # None: a read that would block
    return (size if len(data) == min(size, expected) else len(data)), data


def _check_index_rows(rows: list[dict[str, Any]], problems: list[Problem]) -> None:
    for row in rows:
        key = row["key"]
        expected_key = f"{row['log_id']}_{row['frame_index']:06d}"
        if key != expected_key:
            problems.append(Problem(f"index key {key} != {expected_key} (log_id, frame)"))
        if sample_content_hash(row["members"]) != row["content_hash"]:
            problems.append(
                Problem(
                    f"sample {key}: content_hash does not match its member hashes",
                    shard=row["shard"],
                )
            )


def _compare_shard(
    shard: str,
    found: dict[str, dict[str, Any]],
    rows: list[dict[str, Any]],
    problems: list[Problem],
) -> None:
    expected_names = set()
    for row in rows:
        key = row["key"]
        start = None
        last_end = None
        for m in row["members"]:
            name = f"{key}.{m['name']}"
            expected_names.add(name)
            actual = found.get(name)
            if actual is None:
                message = f"index row {key} lists this member, the tar scan did not find it"
                problems.append(Problem(message, shard, name, m["offset"]))
                continue
            start = actual["header"] if start is None else start
            last_end = actual["offset"] + padded_size(actual["size"])
            for field_name in ("offset", "size"):
                if actual[field_name] != m[field_name]:
                    message = (
                        f"index says {field_name} {m[field_name]}, tar has {actual[field_name]}"
                    )
                    problems.append(Problem(message, shard, name, m["offset"]))
            if actual["sha256"] != m["sha256"]:
                message = (
                    f"sha256 of member data [{actual['offset']}, "
                    f"{actual['offset'] + actual['size']}) differs from the index (tampered or "
                    "corrupt bytes)"
                )
                problems.append(Problem(message, shard, name, actual["offset"]))
        if start is not None and (
            start != row["sample_offset"] or last_end - start != row["sample_size"]
        ):
            message = (
                f"sample {key}: index range [{row['sample_offset']}, +{row['sample_size']}) "
                f"!= tar range [{start}, +{last_end - start})"
            )
            problems.append(Problem(message, shard, offset=start))
    for name in sorted(set(found) - expected_names):
        problems.append(
            Problem("tar member is not in the index", shard, name, found[name]["header"])
        )


def _check_summary(manifest: Manifest, rows: list[dict[str, Any]], problems: list[Problem]) -> None:
    """The manifest's split and class counts (what `data inspect` shows) must match the index."""
    splits = {"train": 0, "val": 0}
    for row in rows:
        splits[row["split"]] = splits.get(row["split"], 0) + 1
    for name, recorded, counted in (
        ("splits.counts", manifest.splits.counts, splits),
        ("class_counts", manifest.class_counts, count_classes(rows)),
    ):
        if recorded != counted:
            message = (
                f"manifest {name} {recorded} != {counted} counted in the index (manifest edited?)"
            )
            problems.append(Problem(message))


def validate_dataset(
    root: str,
    *,
    progress: bool | None = None,
    read_shards: bool = True,
    shard_roots: Sequence[str] = (),
) -> ValidationReport:
    """Check the dataset at `root` (local path or fsspec URL) against docs/format.md.

    Args:
        root: dataset folder or fsspec URL.
        progress: show a tqdm bar over the shards; None = only when stderr is a terminal.
        read_shards: also read every shard byte (sha256, tar structure, every member against
            the index). False checks manifest and index only: for a merged dataset whose parts
            were validated when they were built (`platform_lib.shards.merge`).
        shard_roots: folders (paths or URLs) a merged dataset's shard locations may point into
            besides the dataset folder.

    Returns:
        A report whose `problems` list every violation; `ok` when there is none. Never raises
        for bad data (only for I/O errors other than missing files, and the refusals below).

    Raises:
        NotRegularFileError: a local manifest, index or shard is a FIFO, device, socket, folder
            or kernel file (/proc, /sys, ...).
        ShardLocationError: a shard location outside the dataset folder and `shard_roots`.
        PathOutsideRootError: a local manifest, index or shard links out of the dataset folder.
    """
    root = str(root).rstrip("/")
    report = ValidationReport(root=root)
    problems = report.problems
    try:
        manifest = load_manifest(root)
    except DatasetError as exc:
        problems.append(Problem(str(exc)))
        return report
    report.dataset_hash = manifest.dataset_hash
    fs, base = fsspec.core.url_to_fs(root)
    shards = manifest.shards
    locations = [shard_location(root, entry, roots=shard_roots) for entry in shards]
    index_entry = manifest.index  # dataset_hash and num_shards: checked by load_manifest
    local = isinstance(fs, LocalFileSystem)
    try:
        index_file = dataset_file(base, INDEX_NAME, is_local=local)
        index_size, index_bytes = _read_sized(
            fs, index_file, index_entry.bytes, base if local else None
        )
    except FileNotFoundError:
        problems.append(Problem(f"{INDEX_NAME} is missing; rebuild the dataset"))
        return report
    if index_size != index_entry.bytes:
        problems.append(
            Problem(
                f"{INDEX_NAME} sha256/size differ from the manifest (it has {index_size} "
                f"bytes, the manifest says {index_entry.bytes}: replaced or corrupt); rebuild "
                "the dataset"
            )
        )
        return report
    if hashlib.sha256(index_bytes).hexdigest() != index_entry.sha256:
        problems.append(
            Problem(
                f"{INDEX_NAME} sha256/size differ from the manifest "
                "(replaced or corrupt); rebuild the dataset"
            )
        )
    try:
        table = read_index(io.BytesIO(index_bytes), where=f"{root}/{INDEX_NAME}")
    except Exception as exc:  # pyarrow raises several types for corrupt Parquet
        problems.append(Problem(f"{INDEX_NAME} is unreadable or off-schema: {exc}"))
        return report
    try:
        validate_index_frame(table.to_pandas())
    except SchemaErrors as exc:
        cases = exc.failure_cases.head(_MAX_SCHEMA_LINES)
        for case in cases.itertuples():
            problems.append(
                Problem(
                    f"{INDEX_NAME} column {case.column}: check "
                    f"{case.check} fails at row {case.index} "
                    f"(value {case.failure_case!r})"
                )
            )
    rows = table.to_pylist()
    report.num_samples = len(rows)
    if manifest.num_samples != len(rows):
        problems.append(
            Problem(f"manifest num_samples {manifest.num_samples} != {len(rows)} index rows")
        )
    _check_summary(manifest, rows, problems)
    _check_index_rows(rows, problems)
    try:  # the loader's row checks (shard ids, required members, byte ranges), all reported
        checked = view_from_table(
            table,
            manifest,
            url=root,
            root=base,
            is_local=True,
            storage_options={},
            error_policy="skip",
            shard_roots=shard_roots,
        )
        problems.extend(
            Problem(f"{INDEX_NAME} {reason} (key {key})") for key, reason in checked.skipped
        )
    except DatasetError as exc:
        problems.append(Problem(str(exc)))
    rows_of: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        rows_of.setdefault(row["shard"], []).append(row)
    show = sys.stderr.isatty() if progress is None else progress
    for entry, location in tqdm(
        list(zip(shards, locations, strict=True)), disable=not show, unit="shard", desc="validate"
    ):
        path = entry.path
        report.num_shards += 1
        shard_rows = rows_of.get(path, [])
        if len(shard_rows) != entry.num_samples:
            problems.append(
                Problem(
                    f"index has {len(shard_rows)} samples in this "
                    f"shard, manifest says {entry.num_samples}",
                    shard=path,
                )
            )
        if not read_shards:
            continue
        try:
            shard_fs, shard_file = fsspec.core.url_to_fs(location)
            inside = base if local and not entry.location else None  # merged: checked at resolve
            size, data = _read_sized(shard_fs, shard_file, entry.bytes, inside)
        except FileNotFoundError:
            problems.append(Problem("shard file is missing; rebuild or re-download it", shard=path))
            continue
        if size != entry.bytes:
            problems.append(
                Problem(
                    f"shard has {size} bytes, manifest says {entry.bytes} (truncated or extended)",
                    shard=path,
                    offset=min(size, entry.bytes),
                )
            )
        if hashlib.sha256(data).hexdigest() != entry.sha256:
            problems.append(
                Problem(
                    "shard sha256 differs from the manifest (corrupt or tampered bytes)",
                    shard=path,
                )
            )
        found = _scan_shard(data, path, problems)
        _compare_shard(path, found, shard_rows, problems)
    for path in sorted(set(rows_of) - {s.path for s in shards}):
        problems.append(
            Problem("index rows point to a shard the manifest does not list", shard=path)
        )
    return report
