"""The training pipeline's failure node: a rank killed by a signal raises nothing, so the
node classifies the plugin's torchelastic summary (rank, pid, signal) and records the verdict
as a FAILED MLflow run (real SQLite store); a rank's own verdict and a user error pass."""

from __future__ import annotations

from collections import OrderedDict

import pytest
from flytekit.configuration import Image, ImageConfig, SerializationSettings
from flytekit.exceptions.user import FlyteUserRuntimeException
from flytekit.tools.translator import get_serializable
from flytekit.types.error import FlyteError
from mlflow.tracking import MlflowClient
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

from tasks.triage import explain_pipeline_failure, record_pipeline_failure
from workflows.training_pipeline import DEFAULT_SYNTHETIC, training_pipeline


@pytest.fixture
def client(tmp_path, monkeypatch, mlflow_db) -> MlflowClient:
    uri = mlflow_db(tmp_path / "mlflow.db")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("DRIVETRAIN_HOME", str(tmp_path / "home"))
    return MlflowClient(tracking_uri=uri)


def _failed_runs(client: MlflowClient):
    experiment = client.get_experiment_by_name("drivetrain")
    if experiment is None:
        return []
    return client.search_runs([experiment.experiment_id], "tags.`drivetrain.outcome` = 'failed'")


def _plugin_error(exitcode: int, tmp_path) -> str:
    """The kfpytorch plugin's error for rank 1 ending with `exitcode` (no error file written)."""
    failure = ProcessFailure(
        local_rank=1, pid=4242, exitcode=exitcode, error_file=str(tmp_path / "none.json")
    )
    error = ChildFailedError("train_model", {1: failure})
    return str(FlyteUserRuntimeException(error, timestamp=failure.timestamp))


def test_a_rank_killed_by_a_signal_is_classified_and_recorded(client, tmp_path, capsys):
    text = explain_pipeline_failure(_plugin_error(-9, tmp_path), tags={"preset": "small"})
    assert text is not None and "rank 1" in text and "4242" in text and "SIGKILL" in text
    assert "not proof of OOM" in text and text in capsys.readouterr().err
    (run,) = _failed_runs(client)
    assert run.info.status == "FAILED" and run.data.tags["preset"] == "small"
    tags = run.data.tags
    assert (tags["triage.rank"], tags["triage.pid"], tags["triage.signal"]) == (
        "1",
        "4242",
        "SIGKILL",
    )
    assert tags["triage.recorded_by"] == "failure node" and tags["triage.class"] == "unknown"


def test_a_segfault_names_its_signal(client, tmp_path):
    text = explain_pipeline_failure(_plugin_error(-11, tmp_path), tags={})
    assert text is not None and "SIGSEGV" in text
    (run,) = _failed_runs(client)
    assert run.data.tags["triage.signal"] == "SIGSEGV"


@pytest.mark.parametrize(
    "message",
    [
        "error: bad shard (s-0): rebuild it",  # a user error's one line
        "Root Cause (first observed failure):\n  triage: user_code (high confidence) on rank 1\n"
        "  restart policy: not restarting: budget spent",  # a rank's own verdict
    ],
)
def test_failures_explained_elsewhere_pass_untouched(client, message):
    assert explain_pipeline_failure(message, tags={}) is None
    assert _failed_runs(client) == []


def test_mlflow_down_does_not_fail_the_failure_node(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # the discard port
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    with pytest.warns(UserWarning, match="not recorded in MLflow"):
        text = explain_pipeline_failure(_plugin_error(-9, tmp_path), tags={})
    assert text is not None and "SIGKILL" in text and "MLflow run" not in text


def test_the_task_takes_the_workflow_inputs_and_the_error(client, tmp_path):
    record_pipeline_failure(
        source="synthetic",
        raw_logs="",
        preset="small",
        overrides="",
        seed=0,
        model_name="",
        synthetic=DEFAULT_SYNTHETIC,
        split="",
        quarantine=False,
        promotion="",
        err=FlyteError(message=_plugin_error(-9, tmp_path), failed_node_id="n7"),
    )
    (run,) = _failed_runs(client)
    assert run.data.tags["source"] == "synthetic" and run.data.tags["triage.signal"] == "SIGKILL"


def test_the_workflow_serialises_with_the_failure_node():
    settings = SerializationSettings(
        image_config=ImageConfig(default_image=Image(name="default", fqn="localhost/d", tag="t")),
        project="drivetrain",
        domain="development",
        version="test",
    )
    spec = get_serializable(OrderedDict(), settings, training_pipeline)
    assert spec.template.failure_node is not None
    assert spec.template.failure_node.task_node.reference_id.name.endswith(
        "record_pipeline_failure"
    )
