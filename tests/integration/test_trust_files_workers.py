"""Only regular files, only inside their root, across processes: loader workers, the
`drivetrain` command, and a manifest served by an S3-compatible server (moto, started here).

Every wait has a deadline: a FIFO opened the old way blocks forever, so a regression fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))
sys.path.insert(0, str(Path(__file__).parents[1]))
from loading_helpers import write_test_dataset  # noqa: E402
from s3_helpers import start_moto_server  # noqa: E402

from platform_lib.fsguard import NotRegularFileError  # noqa: E402
from platform_lib.loading.config import LoaderConfig  # noqa: E402
from platform_lib.loading.loader import build_loader  # noqa: E402
from platform_lib.shards.manifest import ShardLocationError  # noqa: E402
from platform_lib.shards.reader import open_dataset  # noqa: E402

pytestmark = pytest.mark.timeout(180)
SHARD = "shards/shard-000000.tar"
BUCKET = "drivetrain-trust"
REPO = Path(__file__).parents[2]


@pytest.fixture()
def dataset(tmp_path: Path) -> Path:
    return write_test_dataset(tmp_path / "data", {"loga": 4, "logb": 4})


def _keys(loader) -> list[str]:
    return [k for b in loader for k in b["__key__"]]


def test_fifo_shard_fails_a_multi_worker_loader_with_its_one_line(dataset):
    (dataset / SHARD).unlink()
    os.mkfifo(dataset / SHARD)
    loader = build_loader(
        str(dataset),
        rank=0,
        world_size=1,
        batch_size=2,
        num_workers=2,
        seed=0,
        config=LoaderConfig(error_policy="skip", worker_timeout_s=60),
    )
    with pytest.raises(NotRegularFileError) as info:  # raised in a worker, re-raised here
        _keys(loader)
    assert str(info.value).startswith(f"not a regular file: it is a FIFO ({dataset / SHARD})")
    assert "\n" not in str(info.value) and "Traceback" not in str(info.value)  # one line


def test_validate_command_prints_one_error_line_for_a_fifo_shard(dataset):
    (dataset / SHARD).unlink()
    os.mkfifo(dataset / SHARD)
    result = subprocess.run(
        [sys.executable, "-m", "platform_lib.cli", "data", "validate", str(dataset)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO), "DRIVETRAIN_HOME": str(dataset.parent)},
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(lines) == 1, result.stderr[-2000:]
    assert lines[0].startswith(f"error: not a regular file: it is a FIFO ({dataset / SHARD})")


@pytest.fixture(scope="module")
def moto_endpoint():
    proc, endpoint = start_moto_server()
    yield endpoint
    proc.terminate()
    proc.wait(timeout=30)


def _upload(client, local: Path, prefix: str, *, manifest: dict) -> str:
    for path in sorted(p for p in local.rglob("*") if p.is_file() and p.name != "manifest.json"):
        client.upload_file(str(path), BUCKET, f"{prefix}/{path.relative_to(local)}")
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/manifest.json", Body=json.dumps(manifest))
    return f"s3://{BUCKET}/{prefix}"


def test_remote_manifest_may_name_shards_only_under_its_own_prefix(
    dataset, moto_endpoint, s3_env, tmp_path
):
    s3_env(moto_endpoint)
    client = boto3.client("s3", endpoint_url=moto_endpoint)
    client.create_bucket(Bucket=BUCKET)
    manifest = json.loads((dataset / "manifest.json").read_text())
    cfg = LoaderConfig(cache_dir=str(tmp_path / "cache"))

    # a local path (here a FIFO: opening it would hang the node) is refused before any open
    os.mkfifo(tmp_path / "trap.tar")
    manifest["shards"][0]["location"] = str(tmp_path / "trap.tar")
    url = _upload(client, dataset, "local-path", manifest=manifest)
    with pytest.raises(ShardLocationError) as info:
        open_dataset(url)
    assert str(tmp_path / "trap.tar") in str(info.value) and f"{url}/manifest.json" in str(
        info.value
    )
    with pytest.raises(ShardLocationError):
        build_loader(url, rank=0, world_size=1, batch_size=4, num_workers=0, seed=0, config=cfg)

    # another prefix of the same bucket: refused unless the user allows it
    manifest["shards"][0]["location"] = f"s3://{BUCKET}/other/{SHARD}"
    url = _upload(client, dataset, "other-prefix", manifest=manifest)
    client.upload_file(str(dataset / SHARD), BUCKET, f"other/{SHARD}")
    with pytest.raises(ShardLocationError):
        open_dataset(url)
    allowed = open_dataset(url, shard_roots=[f"s3://{BUCKET}/other"])
    assert len([allowed.read_sample(k, verify=True) for k in allowed.keys]) == 8

    # a shard moved under the manifest's own prefix: read by the reader and the loader
    manifest["shards"][0]["location"] = "moved/a.tar"
    url = _upload(client, dataset, "own-prefix", manifest=manifest)
    client.upload_file(str(dataset / SHARD), BUCKET, "own-prefix/moved/a.tar")
    reader = open_dataset(url)
    assert len([reader.read_sample(k, verify=True) for k in reader.keys]) == 8
    loader = build_loader(
        url, rank=0, world_size=1, batch_size=4, num_workers=0, seed=0, config=cfg
    )
    assert sorted(_keys(loader)) == sorted(reader.keys)
