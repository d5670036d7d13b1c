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

from schemas.index import INDEX_SCHEMA

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


def read_index(source: str | Path | Any, *, where: str = "") -> pa.Table:
    """Read index.parquet (a path or an open binary file) and check its Arrow schema.

    Raises:
        ValueError: the columns or types differ from `INDEX_SCHEMA`; names `where`.
    """
    table = pq.read_table(source)
    if not table.schema.equals(INDEX_SCHEMA, check_metadata=False):
        expected = {f.name: str(f.type) for f in INDEX_SCHEMA}
        actual = {f.name: str(f.type) for f in table.schema}
        diff = sorted(set(expected.items()) ^ set(actual.items()))
        raise ValueError(f"{where or source}: index schema differs from docs/format.md "
                         f"(differing columns: {diff}); rebuild the dataset")
    return table
