"""DatasetReader: random access by byte range (through the index) and sequential shard scans.

A folder without manifest.json is refused (`ManifestMissingError`). Works on local paths and
fsspec URLs (e.g. s3://bucket/ds): a member is one ranged read `[offset, offset + size)`, a
sample one ranged read `[sample_offset, sample_offset + sample_size)`.
"""

from __future__ import annotations

import hashlib
import re
import tarfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import fsspec
import pyarrow as pa

from platform_lib.shards.errors import DatasetError, ShardFormatError
from platform_lib.shards.index import INDEX_NAME, read_index
from platform_lib.shards.manifest import load_manifest, shard_location
from platform_lib.shards.tar import check_member_name, split_member_name

__all__ = ["DatasetReader", "iter_tar_samples", "open_dataset"]

_SHARD_PATH = re.compile(r"^shards/shard-\d{6}\.tar$")


def iter_tar_samples(fileobj: IO[bytes], *, shard: str,
                     expected_keys: Sequence[str] | None = None) -> Iterator[dict[str, Any]]:
    """Scan a shard stream sequentially and yield one WebDataset-style dict per sample.

    Args:
        fileobj: readable binary stream positioned at the start of a shard (no seeking needed).
        shard: shard name used in samples (`__shard__`) and error messages.
        expected_keys: the shard's keys in order (from the index). Python's tarfile ends a
            scan quietly at a corrupt header; with the keys, a scan that yields other or fewer
            samples raises instead of dropping them silently.

    Yields:
        {"__key__": key, "__shard__": shard, "<ext>": bytes, ...} with members in tar order.

    Raises:
        ShardFormatError: unsafe member name (absolute, `..`, separators), non-file member,
            a truncated/corrupt tar, or samples differing from `expected_keys`; names the
            shard, member and byte offset.
    """
    yielded = 0

    def check_next(sample: dict[str, Any], offset: int) -> dict[str, Any]:
        nonlocal yielded
        if expected_keys is not None and (yielded >= len(expected_keys)
                                          or expected_keys[yielded] != sample["__key__"]):
            want = expected_keys[yielded] if yielded < len(expected_keys) else "no more samples"
            raise ShardFormatError(f"sample {sample['__key__']} found where the index expects "
                                   f"{want}; run `drivetrain data validate` and rebuild",
                                   shard=shard, offset=offset)
        yielded += 1
        return sample

    current: dict[str, Any] | None = None
    current_offset = 0
    end_offset = 0
    try:
        with tarfile.open(fileobj=fileobj, mode="r|") as tar:
            for info in tar:
                problem = check_member_name(info.name)
                if problem:
                    raise ShardFormatError(f"{problem}; refusing to read this shard, rebuild it",
                                           shard=shard, member=info.name, offset=info.offset)
                if not info.isreg():
                    raise ShardFormatError("member is not a regular file; rebuild the shard",
                                           shard=shard, member=info.name, offset=info.offset)
                key, ext = split_member_name(info.name)
                extracted = tar.extractfile(info)
                assert extracted is not None  # regular files always extract
                data = extracted.read()
                if len(data) != info.size:
                    raise ShardFormatError(f"member data ends after {len(data)} of {info.size} "
                                           "bytes (truncated shard); rebuild or re-download it",
                                           shard=shard, member=info.name, offset=info.offset_data)
                if current is not None and current["__key__"] != key:
                    yield check_next(current, current_offset)
                    current = None
                if current is None:
                    current = {"__key__": key, "__shard__": shard}
                    current_offset = info.offset
                end_offset = info.offset_data + info.size
                if ext in current:
                    raise ShardFormatError(f"duplicate member {ext!r} in sample {key}",
                                           shard=shard, member=info.name, offset=info.offset)
                current[ext] = data
    except tarfile.TarError as exc:
        raise ShardFormatError(f"corrupt or truncated tar ({exc}); rebuild or re-download it",
                               shard=shard) from exc
    if current is not None:
        yield check_next(current, current_offset)
    if expected_keys is not None and yielded < len(expected_keys):
        raise ShardFormatError(f"tar ends (or has a corrupt header) after {yielded} of "
                               f"{len(expected_keys)} samples; first missing sample "
                               f"{expected_keys[yielded]}; run `drivetrain data validate` and "
                               "rebuild or re-download the shard", shard=shard, offset=end_offset)


class DatasetReader:
    """Read samples of a published dataset by key (random access) or by shard (sequential).

    Attributes:
        root: dataset folder or URL as given.
        manifest: parsed manifest.json.
        index: index.parquet as an Arrow table (`schemas.index.INDEX_SCHEMA`).
    """

    def __init__(self, root: str | Path) -> None:
        self.root = str(root).rstrip("/")
        self.manifest = load_manifest(self.root)
        self._fs, self._path = fsspec.core.url_to_fs(self.root)
        with self._fs.open(f"{self._path}/{INDEX_NAME}", "rb") as f:
            self.index: pa.Table = read_index(f, where=f"{self.root}/{INDEX_NAME}")
        self._files = {e["path"]: fsspec.core.url_to_fs(shard_location(self.root, e))
                       for e in self.manifest["shards"]}  # path -> (filesystem, file)
        self._row_of = {k: i for i, k in enumerate(self.index.column("key").to_pylist())}
        self._keys_of_shard: dict[str, list[str]] = {p: [] for p in self.shard_paths}
        for key, shard in zip(self.index.column("key").to_pylist(),
                              self.index.column("shard").to_pylist(), strict=True):
            self._keys_of_shard.setdefault(shard, []).append(key)
        listed = set(self.shard_paths)
        bad = sorted(p for p in listed if not _SHARD_PATH.match(p))
        bad += sorted(set(self.index.column("shard").to_pylist()) - listed)
        if bad:
            raise DatasetError(f"{self.root}: shard paths {bad[:5]} are not shards/shard-NNNNNN"
                               ".tar entries of the manifest (tampered index or manifest); "
                               "rebuild the dataset")

    def __len__(self) -> int:
        return self.index.num_rows

    @property
    def keys(self) -> list[str]:
        """Sample keys in index (build) order."""
        return self.index.column("key").to_pylist()

    @property
    def shard_paths(self) -> list[str]:
        """Shard paths relative to the root, in manifest order."""
        return [s["path"] for s in self.manifest["shards"]]

    def _row(self, key: str) -> dict[str, Any]:
        try:
            i = self._row_of[key]
        except KeyError:
            raise KeyError(f"sample {key!r} is not in {self.root}/{INDEX_NAME}") from None
        return self.index.slice(i, 1).to_pylist()[0]

    def _read_range(self, shard: str, start: int, size: int, what: str) -> bytes:
        fs, path = self._files[shard]
        data = fs.cat_file(path, start=start, end=start + size)
        if len(data) != size:
            raise ShardFormatError(f"{what}: got {len(data)} of {size} bytes (truncated "
                                   "shard); run `drivetrain data validate` and rebuild",
                                   shard=shard, offset=start)
        return data

    @staticmethod
    def _verify(data: bytes | memoryview, member: dict[str, Any], key: str, shard: str) -> None:
        if hashlib.sha256(data).hexdigest() != member["sha256"]:
            raise ShardFormatError(f"sample {key}: member bytes do not match the index sha256 "
                                   "(corrupt shard); run `drivetrain data validate`",
                                   shard=shard, member=f"{key}.{member['name']}",
                                   offset=member["offset"])

    def read_member(self, key: str, name: str, *, verify: bool = False) -> bytes:
        """Return the bytes of member `name` (e.g. "front_camera.jpg") of sample `key`.

        Args:
            key: sample key `<log_id>_<frame_index:06d>`.
            name: member name.
            verify: also check the bytes against the index sha256.

        Raises:
            KeyError: unknown key or member name.
            ShardFormatError: the shard is shorter than the index says, or (verify) the bytes
                differ from the index.
        """
        row = self._row(key)
        for member in row["members"]:
            if member["name"] == name:
                data = self._read_range(row["shard"], member["offset"], member["size"],
                                        f"sample {key} member {name}")
                if verify:
                    self._verify(data, member, key, row["shard"])
                return data
        names = [m["name"] for m in row["members"]]
        raise KeyError(f"sample {key!r} has no member {name!r}; it has {names}")

    def read_sample(self, key: str, *, verify: bool = False) -> dict[str, Any]:
        """Return {"__key__", "__shard__", "<ext>": bytes, ...} of `key` with one ranged read.

        Args:
            key: sample key `<log_id>_<frame_index:06d>`.
            verify: also check every member against the index sha256.

        Raises:
            KeyError: unknown key.
            ShardFormatError: truncated shard, or (verify) bytes differing from the index.
        """
        row = self._row(key)
        start = row["sample_offset"]
        blob = self._read_range(row["shard"], start, row["sample_size"], f"sample {key}")
        view = memoryview(blob)
        sample: dict[str, Any] = {"__key__": key, "__shard__": row["shard"]}
        for member in row["members"]:
            begin = member["offset"] - start
            data = view[begin:begin + member["size"]]
            if verify:
                self._verify(data, member, key, row["shard"])
            sample[member["name"]] = bytes(data)
        return sample

    def iter_shard_samples(self, shard: str | int) -> Iterator[dict[str, Any]]:
        """Scan shard `shard` (path relative to root, or position) sequentially, sample by sample.

        Raises:
            ShardFormatError: see `iter_tar_samples`.
        """
        path = self.shard_paths[shard] if isinstance(shard, int) else shard
        if path not in self._keys_of_shard:
            raise KeyError(f"{path!r} is not a shard of {self.root}; shards: "
                           f"{self.shard_paths[:5]}...")
        fs, file = self._files[path]
        with fs.open(file, "rb") as f:
            yield from iter_tar_samples(f, shard=path, expected_keys=self._keys_of_shard[path])

    def iter_samples(self) -> Iterator[dict[str, Any]]:
        """Scan every shard in manifest order (the build order of samples)."""
        for path in self.shard_paths:
            yield from self.iter_shard_samples(path)


def open_dataset(root: str | Path) -> DatasetReader:
    """Open the dataset at `root` (local path or fsspec URL).

    Raises:
        ManifestMissingError: `root` holds no manifest.json (incomplete build / not a dataset).
        DatasetError: manifest or index do not match docs/format.md.
    """
    return DatasetReader(root)
