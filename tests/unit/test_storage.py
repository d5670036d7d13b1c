"""The storage layer: one transient-error rule, bounded retries, one-line credential errors.

Classifier cases use the real exception classes of botocore and s3fs; the cases against a real
moto S3 server are in tests/integration/test_storage_s3.py.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from botocore.exceptions import (
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)

from platform_lib.errors import UserError
from platform_lib.storage import (
    StorageAccessError,
    StorageUnreachableError,
    call_with_retries,
    explain_storage_error,
    fetch_folder,
    is_transient,
    resolve_fs,
)


def _client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "GetObject",
    )


def _wrapped(outer: BaseException, cause: BaseException) -> BaseException:
    try:
        raise outer from cause
    except BaseException as exc:  # noqa: BLE001 - returns it
        return exc


@pytest.mark.parametrize(
    "error",
    [
        ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),
        ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"),
        TimeoutError("timed out"),
        OSError(errno.ETIMEDOUT, "timed out"),
        EndpointConnectionError(endpoint_url="http://127.0.0.1:9"),
        ConnectTimeoutError(endpoint_url="http://127.0.0.1:9"),
        ReadTimeoutError(endpoint_url="http://127.0.0.1:9"),
        _client_error("SlowDown", 503),
        _client_error("ThrottlingException", 400),
        _client_error("TooManyRequests", 429),
        _wrapped(
            OSError(errno.EBUSY, "SlowDown"), _client_error("SlowDown", 503)
        ),  # how s3fs raises it
        StorageUnreachableError("gave up"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_transient(error):
    assert is_transient(error)


@pytest.mark.parametrize(
    "error",
    [
        FileNotFoundError(errno.ENOENT, "missing"),
        PermissionError(errno.EACCES, "denied"),
        OSError(errno.ENOSPC, "No space left on device"),
        NoCredentialsError(),
        _client_error("AccessDenied", 403),
        _client_error("InvalidAccessKeyId", 403),
        _wrapped(PermissionError("denied"), _client_error("AccessDenied", 403)),
        ValueError("bad frame"),
        UserError("bad", "input", "fix it"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_not_transient(error):
    assert not is_transient(error)


def test_credential_errors_name_the_url_and_how_to_supply_credentials():
    error = explain_storage_error(NoCredentialsError(), "s3://bucket/logs")
    assert isinstance(error, StorageAccessError) and "\n" not in str(error)
    assert str(error).startswith(
        "cannot access storage (NoCredentialsError: Unable to locate credentials) "
        "(s3://bucket/logs): supply credentials"
    )
    assert "AWS_ACCESS_KEY_ID" in str(error)
    assert "GOOGLE_APPLICATION_CREDENTIALS" in str(
        explain_storage_error(_client_error("AccessDenied", 403), "gs://b/x")
    )
    assert explain_storage_error(ConnectionResetError(), "s3://b/x") is None
    assert explain_storage_error(PermissionError("local"), "/data/logs") is None  # local: as is


def test_retries_are_bounded_and_only_for_transient_errors():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionResetError(errno.ECONNRESET, "reset")
        return "ok"

    assert (
        call_with_retries(flaky, what="reading", url="s3://b/k", max_retries=4, backoff_s=0.001)
        == "ok"
    )
    assert len(calls) == 3

    calls.clear()

    def down():
        calls.append(1)
        raise ConnectionRefusedError(errno.ECONNREFUSED, "refused")

    with pytest.raises(StorageUnreachableError, match=r"reading s3://b/k failed after 3 attempts"):
        call_with_retries(down, what="reading", url="s3://b/k", max_retries=2, backoff_s=0.001)
    assert len(calls) == 3

    calls.clear()

    def missing():
        calls.append(1)
        raise FileNotFoundError("s3://b/k")

    with pytest.raises(FileNotFoundError):
        call_with_retries(missing, what="reading", url="s3://b/k", max_retries=5, backoff_s=0.001)
    assert len(calls) == 1


def test_resolve_fs_local_and_s3_defaults(tmp_path: Path):
    fs, root, local = resolve_fs(tmp_path.as_uri())
    assert local and root == str(tmp_path) and fs.isdir(root)
    _, root, local = resolve_fs("s3://bucket/prefix/", {"anon": True})
    assert not local and root == "bucket/prefix"
    assert fetch_folder(str(tmp_path), tmp_path / "work") == tmp_path
    with pytest.raises(FileNotFoundError, match="no-such"):
        fetch_folder(str(tmp_path / "no-such"), tmp_path / "work")
