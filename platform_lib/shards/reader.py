"""DatasetReader: random access by key (through the index) and sequential shard scans.

A thin tool over `DatasetView` (validated manifest + columnar index): a member is one ranged
read `[offset, offset + size)`, a sample one ranged read `[sample_offset, sample_offset +
sample_size)`. Works on local paths and fsspec URLs (e.g. s3://bucket/ds). A local shard is
opened once (regular files only, `platform_lib.fsguard`) and kept open, and every range is
checked against the file's real size before a buffer is allocated for it. The streaming
loader reads the same view with `sample.read_sample_into` instead.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from functools import cached_property
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.compute as pc
from fsspec.implementations.local import LocalFileSystem

from platform_lib.fsguard import open_regular
from platform_lib.shards.errors import SampleIntegrityError, ShardFormatError
from platform_lib.shards.index import INDEX_NAME, load_index
from platform_lib.shards.manifest import Manifest, dataset_file, load_manifest, shard_location
from platform_lib.shards.sample import verification_folder
from platform_lib.shards.tar import check_member_name, iter_tar_members, split_member_name
from platform_lib.shards.view import DatasetView, view_from_table
from platform_lib.storage import open_input, resolve_fs

__all__ = ["DatasetReader", "iter_tar_samples", "open_dataset"]


def iter_tar_samples(
    fileobj: IO[bytes], *, shard: str, expected_keys: Sequence[str] | None = None
) -> Iterator[dict[str, Any]]:
    """Scan a shard stream sequentially and yield one WebDataset-style dict per sample.

    Args:
        fileobj: readable binary stream positioned at the start of a shard (no seeking needed).
        shard: shard name used in samples (`__shard__`) and error messages.
        expected_keys: the shard's keys in order (from the index); a scan that yields other or
            fewer samples raises instead of dropping them silently.

    Yields:
        {"__key__": key, "__shard__": shard, "<ext>": bytes, ...} with members in tar order.

    Raises:
        ShardFormatError: unsafe member name (absolute, `..`, separators), non-file member,
            a truncated/corrupt tar, or samples differing from `expected_keys`; names the
            shard, member and byte offset.
    """
    yielded, current_offset, end_offset = 0, 0, 0
    current: dict[str, Any] | None = None

    def check_next(sample: dict[str, Any], offset: int) -> dict[str, Any]:
        nonlocal yielded
        if expected_keys is not None and (
            yielded >= len(expected_keys) or expected_keys[yielded] != sample["__key__"]
        ):
            want = expected_keys[yielded] if yielded < len(expected_keys) else "no more samples"
            raise ShardFormatError(
                f"sample {sample['__key__']} found where the index expects "
                f"{want}; run `drivetrain data validate` and rebuild",
                shard=shard,
                offset=offset,
            )
        yielded += 1
        return sample

    members = iter_tar_members(fileobj, shard=shard)
    while True:
        try:
            member = next(members, None)
        except ShardFormatError as exc:
            if expected_keys is None:
                raise
            if current is not None:  # what was read before the damage
                yield check_next(current, current_offset)
            missing = expected_keys[yielded] if yielded < len(expected_keys) else "none"
            raise ShardFormatError(
                f"{exc.reason}; the scan stops after {yielded} of "
                f"{len(expected_keys)} samples, first missing sample {missing}",
                shard=exc.shard,
                member=exc.member,
                offset=exc.offset,
            ) from exc
        if member is None:
            break
        problem = check_member_name(member.name)
        if problem:
            raise ShardFormatError(
                f"{problem}; refusing to read this shard, rebuild it",
                shard=shard,
                member=member.name,
                offset=member.header_offset,
            )
        if not member.is_regular:
            raise ShardFormatError(
                "member is not a regular file; rebuild the shard",
                shard=shard,
                member=member.name,
                offset=member.header_offset,
            )
        key, ext = split_member_name(member.name)
        if current is not None and current["__key__"] != key:
            yield check_next(current, current_offset)
            current = None
        if current is None:
            current, current_offset = {"__key__": key, "__shard__": shard}, member.header_offset
        if ext in current:
            raise ShardFormatError(
                f"duplicate member {ext!r} in sample {key}",
                shard=shard,
                member=member.name,
                offset=member.header_offset,
            )
        current[ext] = bytes(member.data or b"")
        end_offset = member.data_offset + member.size
    if current is not None:
        yield check_next(current, current_offset)
    if expected_keys is not None and yielded < len(expected_keys):
        raise ShardFormatError(
            f"tar ends after {yielded} of {len(expected_keys)} samples; first "
            f"missing sample {expected_keys[yielded]}; run `drivetrain data "
            "validate` and rebuild or re-download the shard",
            shard=shard,
            offset=end_offset,
        )


class DatasetReader:
    """Read samples of a published dataset by key (random access) or by shard (sequential).

    Args:
        root: dataset folder or fsspec URL.
        storage_options: fsspec options of a remote root.
        shard_roots: folders (paths or URLs) a merged dataset's shard locations may point
            into besides the dataset folder (`platform_lib.shards.manifest.shard_location`).
        max_open: local shard files kept open, in files.

    Attributes:
        root: dataset folder or URL as given.
        manifest: the validated manifest (`Manifest`).
        view: the columnar index of every split (`DatasetView`).
        index: index.parquet as an Arrow table (`schemas.index.INDEX_SCHEMA`).
    """

    def __init__(
        self,
        root: str | Path,
        *,
        storage_options: dict[str, Any] | None = None,
        shard_roots: Sequence[str] = (),
        max_open: int = 8,
    ) -> None:
        self.root = str(root).rstrip("/")
        options = dict(storage_options or {})
        self.manifest: Manifest = load_manifest(self.root, storage_options=options)
        self._fs, self._path, is_local = resolve_fs(self.root, options)
        self.index: pa.Table = load_index(
            self._fs,
            dataset_file(self._path, INDEX_NAME, is_local=is_local),
            self.manifest.index,
            is_local=is_local,
            where=f"{self.root}/{INDEX_NAME}",
            record=verification_folder(None, self.manifest.dataset_hash) / f"{INDEX_NAME}.json",
        )[0]
        self.view: DatasetView = view_from_table(
            self.index,
            self.manifest,
            url=self.root,
            root=self._path,
            is_local=is_local,
            storage_options=options,
            shard_roots=shard_roots,
        )
        self._files = {
            e.path: resolve_fs(shard_location(self.root, e, roots=shard_roots), options)[:2]
            for e in self.manifest.shards
        }  # path -> (filesystem, file); merged: parts
        self._roots = {  # path -> the folder its open file must lie in (merged: checked above)
            e.path: None if e.location else self._path for e in self.manifest.shards
        }
        self._open: OrderedDict[str, tuple[int, int]] = OrderedDict()  # path -> (fd, bytes)
        self._max_open = max_open

    def close(self) -> None:
        """Close the local shard files kept open."""
        while self._open:
            os.close(self._open.popitem()[1][0])

    def __enter__(self) -> DatasetReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if "_open" in self.__dict__:
            self.close()

    def _local_shard(self, shard: str) -> tuple[int, int]:
        """Return (fd, real size in bytes) of local shard `shard`, opened once (regular files only)."""
        if shard in self._open:
            self._open.move_to_end(shard)
            return self._open[shard]
        fd = open_regular(self._files[shard][1], root=self._roots[shard])
        self._open[shard] = (fd, os.fstat(fd).st_size)
        if len(self._open) > self._max_open:
            os.close(self._open.popitem(last=False)[1][0])
        return self._open[shard]

    def __len__(self) -> int:
        return len(self.view)

    @cached_property
    def keys(self) -> list[str]:
        """Sample keys in index (build) order."""
        return self.index.column("key").to_pylist()

    @property
    def shard_paths(self) -> list[str]:
        """Shard paths relative to the root, in manifest order."""
        return self.manifest.shard_paths

    def split_keys(self, split: str) -> list[str]:
        """Return the keys of `split` ("train", "val") in index order (empty when none)."""
        mask = pc.equal(self.index.column("split"), split)
        return self.index.column("key").filter(mask).to_pylist()

    def _read_range(self, i: int, start: int, size: int) -> bytes:
        shard = self.view.shard_path(i)
        fs, path = self._files[shard]
        if isinstance(fs, LocalFileSystem):
            fd, real = self._local_shard(shard)
            if start + size > real:  # checked before the buffer is allocated
                raise ShardFormatError(
                    f"truncated shard: the data ends at byte {max(start, real)}, inside sample "
                    f"{self.view.key(i)} (the index puts it at [{start}, {start + size}), the "
                    f"file has {real} bytes); run `drivetrain data validate` and rebuild or "
                    "re-download it",
                    shard=shard,
                    offset=max(start, real),
                )
            data = os.pread(fd, size, start)
        else:
            data = fs.cat_file(path, start=start, end=start + size)
        if len(data) != size:
            raise ShardFormatError(
                f"truncated shard: the data ends at byte {start + len(data)}, "
                f"inside sample {self.view.key(i)}; run `drivetrain data "
                "validate` and rebuild or re-download it",
                shard=shard,
                offset=start + len(data),
            )
        return data

    def _check(self, data: bytes | memoryview, i: int, m: int) -> None:
        if hashlib.sha256(data).digest() != self.view.member_sha256[m].tobytes():
            key = self.view.key(i)
            raise SampleIntegrityError(
                f"sample {key}: member bytes do not match the index sha256 "
                "(corrupt shard); run `drivetrain data validate`",
                shard=self.view.shard_path(i),
                member=f"{key}.{self.view.member_name(m)}",
                offset=int(self.view.member_offset[m]),
            )

    def read_member(self, key: str, name: str, *, verify: bool = False) -> bytes:
        """Return the bytes of member `name` (e.g. "front_camera.jpg") of sample `key`.

        Args:
            key: sample key `<log_id>_<frame_index:06d>`.
            name: member name.
            verify: also check the bytes against the index sha256.

        Raises:
            KeyError: unknown key or member name.
            ShardFormatError: the shard is shorter than the index says.
            NotRegularFileError: the local shard is a FIFO, device, socket or folder.
            SampleIntegrityError: (verify) the bytes differ from the index.
        """
        i = self.view.row_of(key)
        for m in self.view.members_of(i):
            if self.view.member_name(m) == name:
                data = self._read_range(
                    i, int(self.view.member_offset[m]), int(self.view.member_size[m])
                )
                if verify:
                    self._check(data, i, m)
                return data
        names = [self.view.member_name(m) for m in self.view.members_of(i)]
        raise KeyError(f"sample {key!r} has no member {name!r}; it has {names}")

    def read_sample(self, key: str, *, verify: bool = False) -> dict[str, Any]:
        """Return {"__key__", "__shard__", "<ext>": bytes, ...} of `key` with one ranged read.

        Args:
            key: sample key `<log_id>_<frame_index:06d>`.
            verify: also check every member against the index sha256.

        Raises:
            KeyError: unknown key.
            ShardFormatError: truncated shard (offset: where the data ends).
            NotRegularFileError: the local shard is a FIFO, device, socket or folder.
            SampleIntegrityError: (verify) bytes differing from the index.
        """
        i = self.view.row_of(key)
        start = int(self.view.sample_offset[i])
        blob = memoryview(self._read_range(i, start, int(self.view.sample_size[i])))
        sample: dict[str, Any] = {"__key__": key, "__shard__": self.view.shard_path(i)}
        for m in self.view.members_of(i):
            begin = int(self.view.member_offset[m]) - start
            data = blob[begin : begin + int(self.view.member_size[m])]
            if verify:
                self._check(data, i, m)
            sample[self.view.member_name(m)] = bytes(data)
        return sample

    def iter_shard_samples(self, shard: str | int) -> Iterator[dict[str, Any]]:
        """Scan shard `shard` (path relative to root, or position) sequentially, sample by sample.

        Raises:
            KeyError: not a shard of this dataset.
            ShardFormatError: see `iter_tar_samples`.
            NotRegularFileError: the local shard is a FIFO, device, socket or folder.
        """
        path = self.shard_paths[shard] if isinstance(shard, int) else shard
        if path not in self.shard_paths:
            raise KeyError(
                f"{path!r} is not a shard of {self.root}; shards: {self.shard_paths[:5]}..."
            )
        sid = self.shard_paths.index(path)
        rows = (self.view.shard_id == sid).nonzero()[0]
        keys = [self.view.key(int(i)) for i in rows]
        fs, file = self._files[path]
        with open_input(fs, file) as f:
            yield from iter_tar_samples(f, shard=path, expected_keys=keys)

    def iter_samples(self) -> Iterator[dict[str, Any]]:
        """Scan every shard in manifest order (the build order of samples)."""
        for path in self.shard_paths:
            yield from self.iter_shard_samples(path)


def open_dataset(
    root: str | Path,
    *,
    storage_options: dict[str, Any] | None = None,
    shard_roots: Sequence[str] = (),
) -> DatasetReader:
    """Open the dataset at `root` (local path or fsspec URL); see `DatasetReader` for the options.

    Raises:
        ManifestMissingError: `root` holds no manifest.json (incomplete build / not a dataset).
        ManifestError: manifest.json off-contract (incl. absolute or escaping shard paths).
        ShardLocationError: a shard location outside the dataset folder and `shard_roots`.
        DatasetIndexError: index.parquet off-schema or inconsistent with the manifest.
        NotRegularFileError: a local manifest, index or shard is a FIFO, device, socket or
            folder (shards: when first read).
    """
    return DatasetReader(root, storage_options=storage_options, shard_roots=shard_roots)
