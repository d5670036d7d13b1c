"""The pipeline against real services on 127.0.0.1: MLflow (basic auth, NO_PERMISSIONS by
default) on PostgreSQL, artifacts and dataset shards on moto's standalone S3 server.

- an unauthenticated or wrongly authenticated request is refused; a user cannot read another
  user's experiment until granted;
- incremental retraining: 3 logs, then a 4th -> only the 4th log's part is built, the dataset
  hash changes, version 2 is registered with lineage listing all 4 log hashes; the model's
  artifacts are in the bucket and load back;
- the MLflow password (handed over as a Flyte secret) appears in no log, Deck, tag, param,
  output or serialised spec.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import urllib.error
import urllib.request
from base64 import b64encode
from pathlib import Path

import boto3
import pytest
import torch

from platform_lib.sources.synthetic import write_synthetic_logs
from tests.support.pipeline import STEPS, tiny_synthetic
from tests.support.services import (
    MlflowServer,
    create_pg_database,
    drop_pg_database,
    pg_unavailable_reason,
    start_mlflow,
    start_moto,
    stop,
)

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(900)]

BUCKET = "drivetrain"
REPO = Path(__file__).resolve().parents[2]
TINY = tiny_synthetic(num_logs=4)


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> MlflowServer:
    reason = pg_unavailable_reason()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("services")
    moto, endpoint = start_moto(tmp / "moto.log")
    try:
        boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        ).create_bucket(Bucket=BUCKET)
        db = create_pg_database(("mlflow", "mlflow_auth"))
        try:
            proc, running = start_mlflow(tmp, db, endpoint, BUCKET)
            try:
                yield running
            finally:
                stop(proc)
        finally:
            drop_pg_database(db)
    finally:
        stop(moto)


def _request(
    server: MlflowServer, path: str, user: str | None = None, password: str | None = None
) -> int:
    request = urllib.request.Request(f"{server.url}{path}")
    if user is not None:
        token = b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _as(monkeypatch: pytest.MonkeyPatch, user: str, password: str) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", user)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", password)


def _create_user(server: MlflowServer, monkeypatch: pytest.MonkeyPatch, user: str) -> str:
    from mlflow.server import get_app_client

    password = os.urandom(12).hex()
    _as(monkeypatch, server.admin_user, server.admin_password)
    get_app_client("basic-auth", tracking_uri=server.url).create_user(user, password)
    return password


def test_unauthenticated_and_wrong_password_requests_are_refused(server: MlflowServer) -> None:
    path = "/api/2.0/mlflow/experiments/search?max_results=1"
    assert _request(server, path) == 401
    assert _request(server, path, server.admin_user, "not-the-password") == 401
    assert _request(server, path, server.admin_user, server.admin_password) == 200


def test_a_user_cannot_read_another_users_experiment(
    server: MlflowServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    from mlflow.server import get_app_client

    alice, bob = (
        _create_user(server, monkeypatch, "alice"),
        _create_user(server, monkeypatch, "bob"),
    )
    _as(monkeypatch, "alice", alice)
    experiment = MlflowClient(server.url).create_experiment("alice-private")
    assert MlflowClient(server.url).get_experiment(experiment).name == "alice-private"
    _as(monkeypatch, "bob", bob)
    with pytest.raises(MlflowException, match="403 != 200.*Permission denied"):
        MlflowClient(server.url).get_experiment(experiment)
    _as(monkeypatch, server.admin_user, server.admin_password)
    get_app_client("basic-auth", tracking_uri=server.url).grant_user_permission(
        "bob", "experiment", experiment, "READ"
    )
    _as(monkeypatch, "bob", bob)
    assert MlflowClient(server.url).get_experiment(experiment).name == "alice-private"


def _run_pipeline(raw: Path) -> str:
    from workflows.training_pipeline import training_pipeline

    return training_pipeline(
        source="synthetic",
        raw_logs=str(raw),
        preset="small",
        overrides=STEPS,
        seed=0,
        model_name="services-test",
    )


def test_incremental_retraining_on_postgres_and_s3_keeps_the_password_secret(
    server: MlflowServer,
    local_flyte: Path,
    parts_built: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    from mlflow import MlflowClient

    import tasks.data
    from platform_lib.registry.register import load_model_version
    from platform_lib.sources.hashing import hash_raw_log

    password = _create_user(server, monkeypatch, "trainer")
    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        monkeypatch.delenv(name)  # the task gets the login as Flyte secrets only
    monkeypatch.setenv("_FSEC_MLFLOW_USERNAME", "trainer")
    monkeypatch.setenv("_FSEC_MLFLOW_PASSWORD", password)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server.url)
    for name, value in (
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
        ("AWS_ENDPOINT_URL", server.s3_endpoint),
    ):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DRIVETRAIN_PART_STORE", f"s3://{BUCKET}/parts")
    # the merged manifests as the merge task wrote them (wherever flytekit's local sandbox is)
    merged_manifests: list[dict] = []
    original_merge = tasks.data.merge_parts

    def recording_merge(parts, out, *args, **kwargs):
        result = original_merge(parts, out, *args, **kwargs)
        merged_manifests.append(json.loads((Path(out) / "manifest.json").read_text()))
        return result

    monkeypatch.setattr(tasks.data, "merge_parts", recording_merge)
    all_logs = tmp_path / "all"
    write_synthetic_logs(TINY, all_logs, progress=False)
    raw = tmp_path / "incoming"
    raw.mkdir()
    names = sorted(p.name for p in all_logs.iterdir())
    for name in names[:3]:
        shutil.copytree(all_logs / name, raw / name)

    assert _run_pipeline(raw) == "models:/services-test/1"
    assert sorted(parts_built) == names[:3]
    parts_built.clear()
    shutil.copytree(all_logs / names[3], raw / names[3])  # a new log arrives
    assert _run_pipeline(raw) == "models:/services-test/2"
    assert parts_built == [names[3]]  # the 3 unchanged logs were not rebuilt

    _as(monkeypatch, "trainer", password)
    client = MlflowClient(server.url)
    first, second = (client.get_model_version("services-test", v) for v in ("1", "2"))
    assert first.tags["dataset_hash"] != second.tags["dataset_hash"]
    assert json.loads(second.tags["source_log_hashes"]) == {
        name: hash_raw_log(raw / name) for name in names
    }
    assert len(json.loads(first.tags["source_log_hashes"])) == 3
    # the dataset's shards are in the bucket (parts), its manifest points there
    s3 = boto3.client("s3", endpoint_url=server.s3_endpoint)
    keys = [
        o["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
        for o in page.get("Contents", [])
    ]
    assert sum(k.startswith("parts/synthetic/") and k.endswith("/manifest.json") for k in keys) == 4
    merged = [m for m in merged_manifests if m["dataset_hash"] == second.tags["dataset_hash"]]
    assert merged and all(
        s["location"].startswith(f"s3://{BUCKET}/parts/") for s in merged[0]["shards"]
    )
    # the registered model's artifacts are in the bucket and load back
    assert any(k.startswith("mlartifacts/") and k.endswith("model.safetensors") for k in keys)
    from safetensors.torch import load_file

    model, _, local = load_model_version("models:/services-test/2")
    weights = load_file(local / "model.safetensors")
    assert weights and all(torch.equal(model.state_dict()[k], v) for k, v in weights.items())
    stored = next(
        k
        for k in keys
        if k.startswith("mlartifacts/") and k.endswith("model.safetensors") and second.run_id in k
    )
    assert (
        s3.get_object(Bucket=BUCKET, Key=stored)["Body"].read()
        == (local / "model.safetensors").read_bytes()
    )

    # the password is nowhere: logs, Decks and outputs (every file the runs wrote), MLflow
    # tags/params of runs and versions, and the serialised specs
    secret = password.encode()
    captured = capfd.readouterr()
    assert password not in captured.out + captured.err + caplog.text
    assert secret not in server.log.read_bytes()
    for path in (p for p in local_flyte.rglob("*") if p.is_file()):
        assert secret not in path.read_bytes(), path
    for version in (first, second):
        run = client.get_run(version.run_id)
        texts = [*version.tags.values(), *run.data.tags.values(), *run.data.params.values()]
        assert not any(password in text for text in texts)
    package = tmp_path / "pkg.tgz"
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "pyflyte"),
            "--pkgs",
            "workflows",
            "package",
            "--image",
            "localhost/drivetrain:dev",
            "--output",
            str(package),
            "--force",
        ],
        cwd=REPO,
        env={**os.environ, "HOME": str(tmp_path), "MLFLOW_TRACKING_PASSWORD": password},
        capture_output=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with tarfile.open(package) as tar:
        specs = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    assert not any(secret in data for data in specs.values())
    register = next(data for name, data in specs.items() if "tasks.register.register_model" in name)
    assert b"mlflow" in register and b"password" in register  # names the secret, not its value
