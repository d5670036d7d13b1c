"""Credentials never ride in a URL: URL-valued config fields and S3 endpoint URLs that hold
userinfo are refused in one line that masks them, and every s3 filesystem gets bounded
timeouts (tests/integration/test_storage_deadlines.py runs them against a silent server).
"""

from __future__ import annotations

import json

import pytest

from platform_lib.errors import UserError
from platform_lib.redact import has_userinfo, mask_userinfo
from platform_lib.storage import (
    S3_READ_TIMEOUT_S,
    check_endpoint_url,
    resolve_fs,
    s3_config_kwargs,
    storage_deadline_s,
)
from platform_lib.training.config import ConfigError, TrainConfig
from platform_lib.training.overrides import resolve_train_config

PASSWORD = "hunter2pw"


@pytest.mark.parametrize(
    ("field", "value", "shown"),
    [
        ("checkpoint.folder", f"s3://u:{PASSWORD}@127.0.0.1:9/x", "s3://***@127.0.0.1:9/x"),
        ("checkpoint.folder", f"https://{PASSWORD}@host/ckpt", "https://***@host/ckpt"),
        ("checkpoint.folder", f"s3://u:{PASSWORD}@bucket", "s3://***@bucket"),
    ],
)
def test_url_field_with_credentials_is_one_line_without_the_password(field, value, shown):
    with pytest.raises(ConfigError) as info:
        resolve_train_config("small", json.dumps({field: value}), 0)
    line = str(info.value)
    assert "\n" not in line and PASSWORD not in line
    assert line.startswith(f"{field}={shown!r} is invalid (overrides): credentials in a URL")
    assert "AWS_PROFILE" in line and info.value.fields == (field,)


def test_mixed_dataset_with_credentials_is_masked():
    overrides = {"data.mix": [{"dataset": f"gs://me:{PASSWORD}@host/ds"}]}
    with pytest.raises(ConfigError) as info:
        resolve_train_config("small", json.dumps(overrides), 0)
    line = str(info.value)
    assert PASSWORD not in line and "data.mix[0].dataset='gs://***@host/ds' is invalid" in line


def test_stored_config_with_credentials_is_refused_too():
    values = resolve_train_config("small", "", 0).to_dict()
    values["checkpoint"]["folder"] = f"s3://u:{PASSWORD}@b/x"
    with pytest.raises(ConfigError) as info:
        TrainConfig.from_dict(values)
    assert PASSWORD not in str(info.value) and "checkpoint.folder" in str(info.value)


@pytest.mark.parametrize(
    "url", ["", "s3://bucket/run/ckpt", "/tmp/a@b/ckpt", "s3://bucket/a@b", "models:/m@champion"]
)
def test_url_fields_without_userinfo_are_kept(url):
    config = resolve_train_config("small", json.dumps({"checkpoint.folder": url}), 0)
    assert config.checkpoint.folder == url


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("s3://u:pw@host:9/x", "s3://***@host:9/x"),
        ("http://token@host", "http://***@host"),
        ("http://a@b:c@host/p@q", "http://***@host/p@q"),
        ("s3://bucket/a@b", "s3://bucket/a@b"),
        ("/local/a@b", "/local/a@b"),
    ],
)
def test_mask_userinfo(url, masked):
    assert mask_userinfo(url) == masked and has_userinfo(url) == (url != masked)


def test_s3_filesystems_have_bounded_timeouts_and_tries(monkeypatch):
    import fsspec

    fs, _, _ = resolve_fs("s3://bucket/prefix", {"anon": True})
    config = fs.config_kwargs
    assert config["connect_timeout"] <= 5 and config["read_timeout"] == S3_READ_TIMEOUT_S
    assert config["retries"] == {"max_attempts": 1} and fs.retries == 1
    # a silent store costs one request at most 2 attempts x 15 s; retries stop after 60 s
    assert 2 * S3_READ_TIMEOUT_S <= 30 and storage_deadline_s() == 60
    # s3 filesystems made outside resolve_fs (checkpoints) get the timeouts too
    other = fsspec.filesystem("s3", anon=True, skip_instance_cache=True)
    assert other.config_kwargs["read_timeout"] == S3_READ_TIMEOUT_S
    monkeypatch.setenv("DRIVETRAIN_STORAGE_TIMEOUT_S", "2.5")
    assert s3_config_kwargs()["read_timeout"] == 2.5


@pytest.mark.parametrize("value", ["lots", "0", "-1", "1e9"])
def test_bad_timeout_variable_is_one_line(monkeypatch, value):
    monkeypatch.setenv("DRIVETRAIN_STORAGE_TIMEOUT_S", value)
    with pytest.raises(UserError, match=r"\(DRIVETRAIN_STORAGE_TIMEOUT_S=.*\): unset it"):
        resolve_fs("s3://bucket/prefix", {"anon": True})


def test_endpoint_option_with_credentials_is_refused_masked(monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    options = {"client_kwargs": {"endpoint_url": f"http://u:{PASSWORD}@127.0.0.1:9"}}
    with pytest.raises(UserError) as info:
        check_endpoint_url(options)
    assert PASSWORD not in str(info.value)
    assert "(client_kwargs.endpoint_url=http://***@127.0.0.1:9)" in str(info.value)
    check_endpoint_url({"endpoint_url": "http://127.0.0.1:9"})  # no credentials: fine
