"""Tasks against a real S3-compatible server on 127.0.0.1 (moto): outages are retryable
(`FlyteRecoverableException`), bad credentials are not and name the URL."""

from __future__ import annotations

from pathlib import Path

import pytest
from flytekit.exceptions.user import FlyteRecoverableException

from tasks.data import build_log_part, dataset_config, hash_raw_logs, list_raw_logs
from tasks.errors import PipelineInputError

pytestmark = pytest.mark.timeout(240)
URL = "s3://raw/logs/002"


def _upload(endpoint: str, pandaset_002: Path) -> None:
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint)
    client.create_bucket(Bucket="raw")
    for path in sorted(p for p in pandaset_002.rglob("*") if p.is_file()):
        client.upload_file(str(path), "raw", f"logs/002/{path.relative_to(pandaset_002)}")


def test_outage_is_recoverable_in_every_storage_task(
    local_flyte, s3_env, moto_server, pandaset_002: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DRIVETRAIN_STORAGE_RETRIES", "1")  # bounded retries, kept short here
    proc, endpoint = moto_server()
    try:
        s3_env(endpoint)
        _upload(endpoint, pandaset_002)
        raw_hash = hash_raw_logs(source="pandaset", raw_logs=URL, requested=URL)  # works while up
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    config = dataset_config(source="pandaset", split="", quarantine=False)
    for down in (endpoint, "http://127.0.0.1:1"):  # the stopped server, a closed loopback port
        s3_env(down)
        with pytest.raises(FlyteRecoverableException, match=rf"while hashing raw_logs {URL}"):
            hash_raw_logs(source="pandaset", raw_logs=URL, requested=URL)
        with pytest.raises(
            FlyteRecoverableException, match=rf"while listing raw_logs {URL}.*Unreachable"
        ):
            list_raw_logs(source="pandaset", raw_logs=URL)
        with pytest.raises(
            FlyteRecoverableException,
            match=rf"while building the part of raw log {URL}.*Unreachable",
        ):
            build_log_part(source="pandaset", log=URL, log_hash=raw_hash, config=config)


def test_bad_credentials_are_not_recoverable_and_name_the_url(
    local_flyte, s3_env, moto_server, monkeypatch
) -> None:
    proc, endpoint = moto_server({"INITIAL_NO_AUTH_ACTION_COUNT": "0"})
    try:
        s3_env(endpoint)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "not-a-key")
        with pytest.raises(PipelineInputError) as info:
            hash_raw_logs(source="pandaset", raw_logs=URL, requested=URL)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert not isinstance(info.value, FlyteRecoverableException) and info.value.exit_code == 2
    assert str(info.value).startswith(
        "error: cannot access storage (ClientError InvalidAccessKeyId: "
    )
    assert f"({URL}): supply credentials that may read it: AWS_ACCESS_KEY_ID" in str(info.value)
