"""The storage layer against a real moto S3 server on 127.0.0.1 (running, stopped, checking
credentials) and a closed loopback port; the classifier cases are in tests/unit/test_storage.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from platform_lib.storage import (
    StorageAccessError,
    StorageUnreachableError,
    fetch_folder,
    is_transient,
)


@pytest.mark.timeout(120)
def test_s3_server_up_then_stopped_then_closed_port(s3_env, moto_server, tmp_path: Path):
    import boto3

    proc, endpoint = moto_server()
    try:
        s3_env(endpoint)
        client = boto3.client("s3", endpoint_url=endpoint)
        client.create_bucket(Bucket="raw")
        client.put_object(Bucket="raw", Key="logs/002/meta.json", Body=b"{}")
        local = fetch_folder("s3://raw/logs/002", tmp_path / "work")
        assert local == tmp_path / "work" / "002" and (local / "meta.json").read_bytes() == b"{}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    for url_endpoint in (endpoint, "http://127.0.0.1:1"):  # stopped server, closed port
        s3_env(url_endpoint)
        start = time.monotonic()
        with pytest.raises(
            StorageUnreachableError, match=r"listing s3://raw/logs/002 failed after 2 attempts"
        ) as info:
            fetch_folder("s3://raw/logs/002", tmp_path / "again", max_retries=1)
        assert is_transient(info.value) and time.monotonic() - start < 60


@pytest.mark.timeout(120)
def test_bad_credentials_are_not_transient_and_name_the_url(s3_env, moto_server, tmp_path: Path):
    proc, endpoint = moto_server({"INITIAL_NO_AUTH_ACTION_COUNT": "0"})
    try:
        s3_env(endpoint)
        with pytest.raises(StorageAccessError) as info:
            fetch_folder("s3://raw/logs", tmp_path / "work", max_retries=3)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    message = str(info.value)
    assert not is_transient(info.value) and "\n" not in message
    assert "(s3://raw/logs): supply credentials" in message and "InvalidAccessKeyId" in message
