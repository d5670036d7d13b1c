"""index.parquet: one row per sample (schema `schemas.index.INDEX_SCHEMA`), written deterministically.

The writer options are fixed so the same rows give the same file bytes: no pandas metadata
(the table is built from Python rows with an explicit schema), fixed compression, page and
row-group settings. Parquet stores no creation time; `created_by` names the pyarrow version,
so byte identity holds for a fixed pyarrow release (recorded in the manifest build config).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from platform_lib.shards.errors import DatasetIndexError
from schemas.index import INDEX_SCHEMA, INDEX_SCHEMA_WITHOUT_XXH3

__all__ = ["INDEX_NAME", "PARQUET_OPTIONS", "build_index_table", "read_index", "write_index"]

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


def write_index(rows: list[dict[str, Any]], path: Path) -> tuple[str, int]:
    """Write `rows` to `path` via a temporary name + fsync + rename.

    Returns:
        (sha256 hex of the file, size in bytes).
    """
    sink = pa.BufferOutputStream()
    pq.write_table(build_index_table(rows), sink, **PARQUET_OPTIONS)
    data = sink.getvalue().to_pybytes()
    path = Path(path)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    with open(tmp, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
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


def read_index(source: str | Path | Any, *, where: str = "") -> pa.Table:
    """Read index.parquet (a path or an open binary file) and check its Arrow schema.

    Indexes built before members carried `xxh3_64` (`INDEX_SCHEMA_WITHOUT_XXH3`) are accepted.

    Raises:
        DatasetIndexError: not Parquet, or the columns or types differ from `INDEX_SCHEMA`;
            names `where`.
    """
    try:
        table = pq.read_table(source)
    except (pa.ArrowException, OSError) as exc:
        raise DatasetIndexError(
            f"{where or source}: not a readable Parquet index ({exc}); rebuild the dataset"
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
            f"{where or source}: index schema differs from docs/format.md "
            f"(differing columns: {diff}); rebuild the dataset"
        )
    nulls = [name for name in table.column_names if table.column(name).null_count]
    if nulls:
        raise DatasetIndexError(
            f"{where or source}: columns {nulls} hold nulls; rebuild the dataset"
        )
    return table if table.schema.equals(schema, check_metadata=False) else table.cast(schema)
