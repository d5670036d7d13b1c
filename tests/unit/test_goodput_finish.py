"""Finishing a run's goodput after training (baseline, MLflow, plots, the record registration
continues) from what rank 0 left (`record_streamed_run`), the MLflow metrics stream on MLflow's asynchronous logging (failures and a stuck
server are warnings, bounded), and the exit-time collection skip (in
tests/integration/test_goodput_finish_processes.py)."""

from __future__ import annotations

import json
import logging
import shutil
import socket
import time
from concurrent.futures import Future

import pytest
from mlflow.tracking import MlflowClient

from platform_lib.telemetry.mlflow_goodput import (
    MLFLOW_RUN_JSON,
    MlflowMetricsStream,
    finish_goodput,
    record_streamed_run,
)
from platform_lib.telemetry.publish import GOODPUT_HTML, GOODPUT_JSON, write_run_report
from platform_lib.telemetry.report import build_report
from platform_lib.training.presets import small
from tests.support.timelines import restart_timeline

DATASET_HASH = "ab" * 32


@pytest.fixture
def run_dir(tmp_path, monkeypatch, mlflow_db):
    """A finished run folder as `train()` leaves it, and an empty MLflow store in tmp_path."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_db(tmp_path / "mlflow.db"))
    monkeypatch.setenv("DRIVETRAIN_HOME", str(tmp_path / "home"))
    timeline = restart_timeline()
    timeline.meta.update(model="bev_fusion_small", precision="fp32", batch_size=2)
    run = tmp_path / "run"
    write_run_report(run, timeline, build_report(timeline, min_step_s=0.0), html=False)
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": n, "loss": 1 / n}) + "\n" for n in range(1, 9))
    )
    return run


def test_finish_publishes_the_report_and_records_the_run_for_registration(run_dir):
    assert record_streamed_run(run_dir, dataset_hash=DATASET_HASH) == {
        "run_id": None,  # training did not stream
        "dataset_hash": DATASET_HASH,
    }
    report = finish_goodput(run_dir, config=small())
    record = json.loads((run_dir / MLFLOW_RUN_JSON).read_text())
    assert record["dataset_hash"] == DATASET_HASH and record["run_id"]
    assert record["finish_goodput_s"] > 0 and "stream_error" not in record
    assert report["baseline"]["runs"] == 0 and report["baseline"]["flags"] == {}
    assert report["baseline"]["workload_key"].split("/")[1] == DATASET_HASH[:12]
    assert json.loads((run_dir / GOODPUT_JSON).read_text())["baseline"] == json.loads(
        json.dumps(report["baseline"])
    )
    assert (run_dir / GOODPUT_HTML).read_text().count("<img ") == 6
    mlflow_run = MlflowClient().get_run(record["run_id"])  # a new run: training did not stream
    assert mlflow_run.data.tags["goodput.input_verdict"] == report["input"]["verdict"]
    assert mlflow_run.data.metrics["goodput_compatible"] == pytest.approx(
        report["goodput"]["compatible"]
    )
    # a retried registration neither compares the run with itself nor adds it twice
    again = finish_goodput(run_dir, config=small())
    assert again["baseline"]["runs"] == 0
    # the next run of the workload is compared with this one
    following = run_dir.with_name("next-run")
    shutil.copytree(run_dir, following)
    record_streamed_run(following, dataset_hash=DATASET_HASH)
    assert finish_goodput(following, config=small())["baseline"]["runs"] == 1
    assert finish_goodput(following, config=small())["baseline"]["runs"] == 1


def test_finish_continues_the_streamed_run(run_dir):
    stream = MlflowMetricsStream(run_name="train-x", tags={"preset": "small"})
    for step in range(1, 6):
        stream(step, {"loss": 1.0 / step})
    streamed = record_streamed_run(run_dir, dataset_hash=DATASET_HASH, stream=stream)
    assert streamed["run_id"] == stream.run_id and stream.error is None
    # what rank 0 left is all the finish needs: the stream is closed, its points are in MLflow
    finish_goodput(run_dir, config=small())
    record = json.loads((run_dir / MLFLOW_RUN_JSON).read_text())
    assert record["run_id"] == stream.run_id and record["finish_goodput_s"] > 0
    client = MlflowClient()
    history = client.get_metric_history(stream.run_id, "loss")
    assert [(m.step, m.value) for m in history] == [(n, 1.0 / n) for n in range(1, 6)]
    assert "goodput_compatible" in client.get_run(stream.run_id).data.metrics


def test_a_stream_that_cannot_start_is_reported_not_raised(run_dir, monkeypatch, caplog):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "bogus-scheme://nowhere")
    stream = MlflowMetricsStream(run_name="train-x", tags={})
    with pytest.raises(Exception, match="bogus-scheme"):
        stream._run.result(timeout=60)
    stream(1, {"loss": 1.0})  # dropped and counted: there is no run
    with caplog.at_level(logging.WARNING, logger="platform_lib.telemetry.mlflow_goodput"):
        assert stream.close() is None
    assert "bogus-scheme" in repr(stream.error) and stream.dropped == 1
    assert "MLflow metrics stream of run None failed" in caplog.text
    assert "(1 points dropped)" in caplog.text


def test_a_stream_that_does_not_drain_does_not_fail_training(monkeypatch, caplog):
    with socket.socket() as server:  # accepts connections, never answers
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{server.getsockname()[1]}")
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "3")
        stream = MlflowMetricsStream(run_name="train-x", tags={})
        stream(1, {"loss": 1.0})
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="platform_lib.telemetry.mlflow_goodput"):
            assert stream.close(timeout_s=0.5) is None
        assert time.monotonic() - started < 2.0  # bounded by timeout_s, not by MLflow's timeout
    assert isinstance(stream.error, TimeoutError)
    assert "did not drain within 0.5 s" in caplog.text


def test_points_before_the_run_exists_are_bounded(run_dir):
    stream = MlflowMetricsStream(run_name="train-x", tags={}, max_pending=4)
    created = stream._run
    stream._run = Future()  # the run is still being created
    for step in range(1, 5):
        stream(step, {"loss": float(step), "lr": 0.1})
    assert len(stream._pending) == 4 and stream.dropped == 4
    stream._run = created
    stream.close()
    history = MlflowClient().get_metric_history(stream.run_id, "loss")
    assert [m.step for m in history] == [1, 2] and stream.dropped == 4


def test_a_failed_stream_is_recorded_for_registration(run_dir, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "bogus-scheme://nowhere")
    stream = MlflowMetricsStream(run_name="train-x", tags={})
    record = record_streamed_run(run_dir, dataset_hash=DATASET_HASH, stream=stream)
    assert record["run_id"] is None and "bogus-scheme" in record["stream_error"]
    assert json.loads((run_dir / MLFLOW_RUN_JSON).read_text()) == record


def test_finish_without_a_report_names_the_missing_file(run_dir):
    with pytest.raises(FileNotFoundError, match=r"mlflow_run\.json is missing"):
        finish_goodput(run_dir, config=small())  # rank 0 did not record its run
    record_streamed_run(run_dir, dataset_hash=DATASET_HASH)
    (run_dir / GOODPUT_JSON).unlink()
    with pytest.raises(FileNotFoundError, match=r"goodput\.json is missing"):
        finish_goodput(run_dir, config=small())


@pytest.mark.parametrize(
    "content",
    [
        "fifo",
        "x" * (64 * 1024 + 1),
        '{"run_id": "../../etc"}',
        '["not", "an", "object"]',
        "[" * 100_000,
    ],
    ids=["fifo", "too-big", "bad-run-id", "not-an-object", "deep"],
)
def test_a_hostile_streamed_run_record_is_one_line(tmp_path, content):
    import os

    from platform_lib.errors import UserError
    from platform_lib.telemetry.mlflow_goodput import MLFLOW_RUN_JSON, load_streamed_run

    path = tmp_path / MLFLOW_RUN_JSON
    if content == "fifo":
        os.mkfifo(path)
    else:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(UserError) as info:
        load_streamed_run(tmp_path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_a_streamed_run_record_reads_back(tmp_path):
    from platform_lib.telemetry.mlflow_goodput import MLFLOW_RUN_JSON, load_streamed_run

    assert load_streamed_run(tmp_path) is None
    (tmp_path / MLFLOW_RUN_JSON).write_text('{"run_id": "' + "a" * 32 + '", "dataset_hash": "d"}')
    assert load_streamed_run(tmp_path)["run_id"] == "a" * 32
