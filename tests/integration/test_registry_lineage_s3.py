"""The raw-data hash on object storage (a real moto S3 server on loopback) uses ETags; the local
lineage tests are in tests/unit/test_registry_lineage.py.
"""

from __future__ import annotations

from pathlib import Path

import fsspec
import pytest

from platform_lib.errors import UserError
from platform_lib.sources.hashing import hash_raw_location


@pytest.fixture
def s3_endpoint(moto_server, s3_env) -> str:
    """A real moto S3 server on 127.0.0.1 (no AWS involved); boto and s3fs point at it."""
    _, endpoint = moto_server()
    s3_env(endpoint)
    return endpoint


def test_object_storage_hash_uses_etags(s3_endpoint: str, tmp_path: Path) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=s3_endpoint)
    s3.create_bucket(Bucket="raw")
    s3.put_object(Bucket="raw", Key="logs/log-a/lidar/00.bin", Body=b"abc")
    s3.put_object(Bucket="raw", Key="logs/log-a/poses.json", Body=b"[]")
    fsspec.filesystem("s3").invalidate_cache()
    first = hash_raw_location("s3://raw/logs")
    fsspec.filesystem("s3").invalidate_cache()
    assert hash_raw_location("s3://raw/logs/") == first
    s3.put_object(Bucket="raw", Key="logs/log-a/lidar/00.bin", Body=b"abd")  # new bytes, new ETag
    fsspec.filesystem("s3").invalidate_cache()
    assert hash_raw_location("s3://raw/logs") != first
    with pytest.raises(UserError, match=r"does not exist or is not a folder \(s3://raw/missing\)"):
        hash_raw_location("s3://raw/missing")
