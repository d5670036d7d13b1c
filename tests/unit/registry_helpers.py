"""Fixtures for registry tests: an isolated, real MLflow store (SQLite) per test."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest


@pytest.fixture(scope="module")
def mlflow_home(tmp_path_factory: pytest.TempPathFactory):
    """Point DRIVETRAIN_HOME at a temp folder and clear MLFLOW_TRACKING_URI (restored after).

    One store per test module (creating the SQLite schema takes seconds); tests use distinct
    run and model names.
    """
    home = tmp_path_factory.mktemp("drivetrain-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DRIVETRAIN_HOME", str(home))
        mp.setenv("MLFLOW_TRACKING_URI", "placeholder")  # recorded so teardown restores it
        mp.delenv("MLFLOW_TRACKING_URI")
        yield home


def write_index(root: Path, rows: list[tuple[str, str, str]]) -> Path:
    """Write an index.parquet with (key, split, content_hash) rows: what hash_val_split reads."""
    root.mkdir(parents=True, exist_ok=True)
    keys, splits, hashes = zip(*rows, strict=True)
    table = pa.table({"key": list(keys), "split": list(splits), "content_hash": list(hashes)})
    pq.write_table(table, root / "index.parquet")
    return root
