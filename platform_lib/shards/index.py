"""index.parquet: one row per sample (schema `schemas.index.INDEX_SCHEMA`), written deterministically.

Fixed writer options and no pandas metadata make the same rows give the same bytes for a given
pyarrow release (recorded in the manifest build config). Readers trust an index only as the
manifest's: `load_index` checks its size and sha256, `check_index_table` its rows and keys.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from platform_lib.fsguard import open_regular
from platform_lib.shards.errors import DatasetIndexError
from platform_lib.shards.sample import check_once
from platform_lib.shards.writer import write_file_atomic
from schemas.classes import CLASS_GROUPS
from schemas.index import INDEX_SCHEMA, INDEX_SCHEMA_WITHOUT_XXH3

if TYPE_CHECKING:
    from platform_lib.shards.manifest import IndexEntry, Manifest

__all__ = [
    "INDEX_NAME",
    "PARQUET_OPTIONS",
    "build_index_table",
    "check_index_table",
    "count_classes",
    "load_index",
    "read_index",
    "write_index",
]

INDEX_NAME = "index.parquet"

#: Fixed pyarrow.parquet.write_table options (part of the determinism contract).
PARQUET_OPTIONS: dict[str, Any] = {
    "compression": "zstd",
    "compression_level": 3,
    "version": "2.6",
    "data_page_version": "1.0",
    "use_dictionary": True,
    "write_statistics": True,
    "row_group_size": 1 << 20,
    "data_page_size": 1 << 20,
    "store_schema": True,
}


def build_index_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Return the index as an Arrow table with exactly `INDEX_SCHEMA` (extra row keys ignored).

    Raises:
        pyarrow.ArrowInvalid / ArrowTypeError: a row misses a column or holds a wrong type.
    """
    columns = {f.name: [row[f.name] for row in rows] for f in INDEX_SCHEMA}
    return pa.Table.from_pydict(columns, schema=INDEX_SCHEMA)


def count_classes(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Return cuboids per class group over index rows ("other": those of no named group)."""
    counts = {g: sum(row[f"num_{g}"] for row in rows) for g in CLASS_GROUPS}
    return {**counts, "other": sum(row["num_cuboids"] for row in rows) - sum(counts.values())}


def write_index(rows: list[dict[str, Any]], path: Path) -> tuple[str, int]:
    """Write `rows` to `path` via a temporary name + fsync + rename.

    Returns:
        (sha256 hex of the file, size in bytes).
    """
    sink = pa.BufferOutputStream()
    pq.write_table(build_index_table(rows), sink, **PARQUET_OPTIONS)
    data = sink.getvalue().to_pybytes()
    write_file_atomic(Path(path), data)
    return hashlib.sha256(data).hexdigest(), len(data)


def _same_type(a: pa.DataType, b: pa.DataType) -> bool:
    """Return True for equal types, ignoring list item names and nullability flags.

    A table rewritten by other tools names list items "element" and loses the flags; nulls
    themselves are checked by `read_index`.
    """
    if pa.types.is_list(a) and pa.types.is_list(b):
        return _same_type(a.value_type, b.value_type)
    if pa.types.is_struct(a) and pa.types.is_struct(b):
        return [f.name for f in a] == [f.name for f in b] and all(
            _same_type(f.type, g.type) for f, g in zip(a, b, strict=True)
        )
    return a == b


def _same_schema(a: pa.Schema, b: pa.Schema) -> bool:
    return a.names == b.names and all(_same_type(f.type, g.type) for f, g in zip(a, b, strict=True))


def read_index(source: str | Path | bytes | Any, *, where: str = "") -> pa.Table:
    """Read index.parquet (a path, its bytes or an open binary file) and check its Arrow schema.

    Indexes built before members carried `xxh3_64` (`INDEX_SCHEMA_WITHOUT_XXH3`) are accepted.

    Raises:
        DatasetIndexError: not Parquet, or the columns or types differ from `INDEX_SCHEMA`;
            names `where`.
    """
    where = where or (INDEX_NAME if isinstance(source, bytes) else str(source))
    try:
        if isinstance(source, bytes) or hasattr(source, "read"):
            data = source if isinstance(source, bytes) else source.read()
            source = pa.BufferReader(_arrow_owned(data))
        table = pq.read_table(source)
    except (pa.ArrowException, OSError) as exc:
        raise DatasetIndexError(
            f"{where}: not a readable Parquet index ({' '.join(str(exc).split())}); "
            "rebuild the dataset"
        ) from exc
    schema = next(
        (s for s in (INDEX_SCHEMA, INDEX_SCHEMA_WITHOUT_XXH3) if _same_schema(table.schema, s)),
        None,
    )
    if schema is None:
        expected = {f.name: str(f.type) for f in INDEX_SCHEMA}
        actual = {f.name: str(f.type) for f in table.schema}
        diff = sorted(set(expected.items()) ^ set(actual.items()))
        raise DatasetIndexError(
            f"{where}: index schema differs from docs/format.md "
            f"(differing columns: {diff}); rebuild the dataset"
        )
    nulls = [name for name in table.column_names if table.column(name).null_count]
    if nulls:
        raise DatasetIndexError(f"{where}: columns {nulls} hold nulls; rebuild the dataset")
    return table if table.schema.equals(schema, check_metadata=False) else table.cast(schema)


def _read_exact(
    fs: Any, path: str, expected: int, *, is_local: bool, where: str
) -> tuple[bytes, dict[str, Any]]:
    """Return (bytes, stamp) of the index file, refusing a size other than `expected` unread."""

    def wrong_size(size: int) -> DatasetIndexError:
        return DatasetIndexError(
            f"{where}: {size} bytes, the manifest's index entry says {expected} (replaced or "
            "truncated index); rebuild the dataset or restore the manifest's index.parquet"
        )

    stamp: dict[str, Any]
    try:
        if not is_local:
            info = fs.info(path)
            if info.get("size") != expected:
                raise wrong_size(info.get("size"))
            data = fs.cat_file(path)
            stamp = {"object": repr(sorted(info.items(), key=str))}
        else:
            fd = open_regular(path, root=os.path.dirname(path))  # at the dataset's root
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(fd)
                if st.st_size != expected:
                    raise wrong_size(st.st_size)
                data = f.read(expected + 1)
            stamp = {  # ctime: an in-place rewrite changes it even when mtime is put back
                "mtime_ns": st.st_mtime_ns,
                "ctime_ns": st.st_ctime_ns,
                "inode": st.st_ino,
                "device": st.st_dev,
            }
    except FileNotFoundError:
        raise DatasetIndexError(f"{where} is missing; rebuild the dataset") from None
    if len(data) != expected:  # changed while read
        raise wrong_size(len(data))
    return data, {"size": expected, **stamp}


def load_index(
    fs: Any,
    path: str,
    entry: IndexEntry,
    *,
    is_local: bool,
    where: str,
    record: Path | None,
) -> tuple[pa.Table, bool]:
    """Read index.parquet, check that it is the manifest's, and parse it (`read_index`).

    Order: size against `entry.bytes` (before reading a byte), then sha256 against
    `entry.sha256`, at most once per node and file version (`sample.check_once` with `record`),
    then the schema. The table is parsed from the very bytes that were checked.

    Args:
        fs: fsspec filesystem of the dataset.
        path: the index file inside `fs`.
        entry: the manifest's index entry.
        is_local: a local file (opened with `fsguard.open_regular`, stamped by inode and mtime)
            or an object (stamped by its listing: size, ETag / mtime).
        where: the index location for messages.
        record: the node's verification record of this index, or None (hash on every load).

    Returns:
        (table, hashed): the index, and whether this call computed its sha256.

    Raises:
        DatasetIndexError: missing, size or sha256 other than the manifest's, or unreadable /
            off-schema (`read_index`); one line naming `where` and what differs.
        NotRegularFileError: a local index that is a FIFO, device, socket or folder.
        OSError: the store could not be read (callers retry transient ones).
    """
    data, stamp = _read_exact(fs, path, entry.bytes, is_local=is_local, where=where)
    ok, hashed = check_once(
        record,
        {**stamp, "sha256": entry.sha256},
        lambda: hashlib.sha256(data).hexdigest() == entry.sha256,
    )
    if not ok:
        raise DatasetIndexError(
            f"{where}: sha256 differs from the manifest's index sha256 {entry.sha256} (replaced "
            "or corrupt index); rebuild the dataset or restore the manifest's index.parquet"
        )
    return read_index(data, where=where), hashed


def _arrow_owned(data: bytes) -> pa.Buffer:
    """A copy of `data` in memory Arrow owns, for parsing on Arrow's thread pool.

    `pq.read_table` scans on Arrow's threads, which may drop the last reference to their
    source after the call returned; a source over a Python object (`bytes`) then takes the GIL
    on that thread, and if the interpreter is exiting by then (a script whose dataset was just
    refused) the thread is ended inside a C++ destructor: "terminate called without an active
    exception", exit 134. Memory Arrow owns is freed without the GIL.
    """
    buffer = pa.allocate_buffer(len(data))
    memoryview(buffer).cast("B")[:] = data
    return buffer


def check_index_table(table: pa.Table, manifest: Manifest, *, where: str) -> None:
    """Check the whole index against the manifest: row count and unique sample keys.

    Raises:
        DatasetIndexError: the row count differs from `manifest.num_samples` (rows dropped or
            added), or a key appears twice (names the key and its rows).
    """
    if table.num_rows != manifest.num_samples:
        raise DatasetIndexError(
            f"{where}: {table.num_rows} rows, the manifest says num_samples "
            f"{manifest.num_samples} (rows dropped or added); rebuild the dataset"
        )
    keys = table["key"]
    if pc.count_distinct(keys).as_py() != table.num_rows:
        counts = pc.value_counts(keys)
        key = counts.filter(pc.greater(counts.field("counts"), 1))[0]["values"].as_py()
        rows = pc.indices_nonzero(pc.equal(keys, key)).to_pylist()[:3]
        raise DatasetIndexError(
            f"{where}: sample key {key!r} appears more than once (rows {rows}); keys must be "
            "unique (each sample once per epoch); rebuild the dataset"
        )
