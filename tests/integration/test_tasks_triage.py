"""The training task's failure hook on real failed elastic launches (2 gloo ranks): the
verdict becomes the error message (rank, pid, signal), MLflow tags on a FAILED run (real
SQLite store) and the retry decision (FlyteRecoverableException or not)."""

from __future__ import annotations

import json

import pytest
from flytekit.exceptions.user import FlyteRecoverableException
from mlflow.tracking import MlflowClient
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

from tasks.triage import HISTORY_FILE, TrainingFailedError, explain_training_failure
from tests.support.launches import launch_failing

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(300)]


@pytest.fixture
def mlflow_store(tmp_path, monkeypatch, mlflow_db) -> MlflowClient:
    uri = mlflow_db(tmp_path / "mlflow.db")  # a real, empty SQLite store
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("DRIVETRAIN_HOME", str(tmp_path / "home"))
    return MlflowClient(tracking_uri=uri)


def _failed_runs(client: MlflowClient):
    experiment = client.get_experiment_by_name("drivetrain")
    return client.search_runs([experiment.experiment_id], "tags.`drivetrain.outcome` = 'failed'")


def test_preempted_workers_become_a_recoverable_error_with_the_verdict(mlflow_store, tmp_path):
    failure = launch_failing("preempted")
    assert isinstance(failure, ChildFailedError)
    error = explain_training_failure(
        failure,
        checkpoint_folder=str(tmp_path / "ckpt"),
        tags={"preset": "small", "dataset_hash": "d" * 64},
    )
    assert isinstance(error, FlyteRecoverableException)
    text = str(error)
    assert "preemption" in text and "PreemptedError" in text and "pid" in text
    (run,) = _failed_runs(mlflow_store)
    assert run.info.status == "FAILED" and run.data.tags["triage.class"] == "preemption_platform"
    assert (
        run.data.tags["dataset_hash"] == "d" * 64
        and "PreemptedError" in run.data.tags["triage.root_line"]
    )
    assert (tmp_path / "ckpt" / HISTORY_FILE).is_file()  # the attempt is in the run's history


def test_killed_rank_is_named_with_pid_and_signal(mlflow_store, tmp_path):
    failure = launch_failing("killed")
    pid = failure.failures[1].pid
    error = explain_training_failure(
        failure, checkpoint_folder=str(tmp_path / "ckpt"), tags={"preset": "small"}
    )
    text = str(error)
    assert "rank 1" in text and str(pid) in text and "SIGKILL" in text
    (run,) = _failed_runs(mlflow_store)
    assert run.data.tags["triage.rank"] == "1" and run.data.tags["triage.signal"] == "SIGKILL"
    assert isinstance(error, FlyteRecoverableException | TrainingFailedError)


def test_mlflow_down_does_not_hide_the_failure(tmp_path, monkeypatch):
    monkeypatch.setenv(
        "MLFLOW_TRACKING_URI", "http://127.0.0.1:9"
    )  # nothing listens on the discard port
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    failure = launch_failing("preempted")
    with pytest.warns(UserWarning, match="not recorded in MLflow"):
        error = explain_training_failure(failure, checkpoint_folder=None)
    assert isinstance(error, FlyteRecoverableException) and "MLflow run" not in str(error)


def test_a_rank_raises_its_own_verdict_and_the_first_one_records_it(
    mlflow_store, tmp_path, monkeypatch
):
    from platform_lib.errors import UserError
    from platform_lib.training.preemption import PreemptedError
    from tasks.errors import PipelineInputError, task_errors
    from tasks.triage import explain_failures

    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    preempted = PreemptedError(
        "rank 1 pid 4242: preempted by SIGTERM after step 3; restart to resume (recoverable)",
        step=3,
        checkpoint=None,
        signal_name="SIGTERM",
    )
    errors = []
    for rank in ("1", "0"):  # rank 1 fails first; rank 0 after it, in the same attempt
        monkeypatch.setenv("RANK", rank)
        with pytest.raises(FlyteRecoverableException) as info:
            with explain_failures(tmp_path, checkpoint_folder=str(tmp_path / "ckpt"), tags={}):
                raise preempted
        errors.append(info.value)
    assert all("preemption" in str(e) and "restart policy:" in str(e) for e in errors)
    assert errors[0].__cause__ is preempted
    (run,) = _failed_runs(mlflow_store)  # recorded once, by the first failing rank
    assert run.data.tags["triage.rank"] == "1"
    assert len(json.loads((tmp_path / "ckpt" / HISTORY_FILE).read_text())) == 1
    # a user error keeps its one line: no verdict, nothing recorded
    with pytest.raises(PipelineInputError, match="error: bad shard"):
        with explain_failures(tmp_path, checkpoint_folder=None, tags={}):
            with task_errors("training"):
                raise UserError("bad shard", "s-0", "rebuild it")
    assert len(_failed_runs(mlflow_store)) == 1
