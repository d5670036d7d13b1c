"""Finishing a run's goodput in the launching process: the hand-off from rank 0, the finisher
thread that overlaps the workers' exit, its errors, and the exit-time collection skip."""

from __future__ import annotations

import json
import logging
import os
import socket
import time

import pytest
from mlflow.tracking import MlflowClient

from platform_lib.registry.goodput import (
    MLFLOW_RUN_JSON,
    GoodputFinisher,
    MlflowMetricsStream,
    finish_goodput,
    hand_off_run,
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


def _wait_for(predicate, finisher, timeout_s=120.0):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert finisher._error is None, finisher._error
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_finisher_publishes_as_soon_as_rank_0_hands_off(run_dir):
    finisher = GoodputFinisher(run_dir, config=small())
    time.sleep(0.3)
    assert not (run_dir / GOODPUT_HTML).exists()  # nothing before the hand-off
    assert hand_off_run(run_dir, dataset_hash=DATASET_HASH, stream=None) is None
    handed = run_dir / MLFLOW_RUN_JSON
    # finished in the background, before anyone asks for the result (the overlap)
    _wait_for(lambda: "finish_goodput_s" in json.loads(handed.read_text()), finisher)
    report = finisher.result(run_dir)
    record = json.loads(handed.read_text())
    assert record["dataset_hash"] == DATASET_HASH and record["run_id"]
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


def test_finisher_ignores_a_past_runs_hand_off(run_dir):
    hand_off_run(run_dir, dataset_hash="cd" * 32, stream=None)  # left by an earlier launch
    handed = run_dir / MLFLOW_RUN_JSON
    os.utime(handed, (time.time() - 60, time.time() - 60))
    finisher = GoodputFinisher(run_dir, config=small())
    time.sleep(0.5)
    assert "finish_goodput_s" not in json.loads(handed.read_text())
    hand_off_run(run_dir, dataset_hash=DATASET_HASH, stream=None)
    report = finisher.result(run_dir)
    assert report["baseline"]["workload_key"].split("/")[1] == DATASET_HASH[:12]


def test_a_restart_after_the_hand_off_is_finished_again(run_dir):
    finisher = GoodputFinisher(run_dir, config=small())
    hand_off_run(run_dir, dataset_hash=DATASET_HASH, stream=None)
    handed = run_dir / MLFLOW_RUN_JSON
    _wait_for(lambda: "finish_goodput_s" in json.loads(handed.read_text()), finisher)
    first = json.loads(handed.read_text())
    # rank 1 died at exit: the agent restarted the workers, and rank 0 handed off again
    hand_off_run(run_dir, dataset_hash=DATASET_HASH, stream=None)
    second = json.loads(handed.read_text())["hand_off_id"]
    report = finisher.result(run_dir)
    last = json.loads(handed.read_text())
    assert second != first["hand_off_id"] and last["hand_off_id"] == second
    assert "finish_goodput_s" in last and last["run_id"] != first["run_id"]
    assert report["baseline"]["runs"] == 1  # compared with the first attempt's summary


def test_a_stream_that_cannot_start_is_reported_not_raised(run_dir, monkeypatch, caplog):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "bogus-scheme://nowhere")
    stream = MlflowMetricsStream(run_name="train-x", tags={})
    stream._thread.join(timeout=60)
    stream(1, {"loss": 1.0})  # dropped: nothing drains the queue any more
    assert stream._queue.qsize() == 0
    with caplog.at_level(logging.WARNING, logger="platform_lib.registry.goodput"):
        assert hand_off_run(run_dir, dataset_hash=DATASET_HASH, stream=stream) is None
    record = json.loads((run_dir / MLFLOW_RUN_JSON).read_text())
    assert record["run_id"] is None and "bogus-scheme" in record["stream_error"]
    assert "MLflow metrics stream of run None failed" in caplog.text


def test_a_stream_that_does_not_drain_does_not_fail_training(monkeypatch, caplog):
    with socket.socket() as server:  # accepts connections, never answers
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{server.getsockname()[1]}")
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        stream = MlflowMetricsStream(run_name="train-x", tags={})
        stream(1, {"loss": 1.0})
        with caplog.at_level(logging.WARNING, logger="platform_lib.registry.goodput"):
            assert stream.close(timeout_s=0.5) is None
    assert isinstance(stream.error, TimeoutError)
    assert "did not drain within 0.5 s" in caplog.text


def test_finisher_that_waited_elsewhere_finishes_in_the_caller(run_dir, tmp_path):
    hand_off_run(run_dir, dataset_hash=DATASET_HASH, stream=None)
    for waited_on in (None, tmp_path / "another-run"):
        finisher = GoodputFinisher(waited_on, config=small())
        report = finisher.result(run_dir)
        assert report["baseline"]["workload_key"].split("/")[1] == DATASET_HASH[:12]
    # the second finish compared with the first one's summary
    assert report["baseline"]["runs"] == 1


def test_finisher_raises_what_its_thread_raised(run_dir):
    (run_dir / GOODPUT_JSON).unlink()
    finisher = GoodputFinisher(run_dir, config=small())
    hand_off_run(run_dir, dataset_hash=DATASET_HASH, stream=None)
    with pytest.raises(FileNotFoundError, match=r"goodput\.json is missing"):
        finisher.result(run_dir)


def test_finish_without_a_hand_off_names_the_missing_file(run_dir):
    with pytest.raises(FileNotFoundError, match=r"mlflow_run\.json is missing"):
        finish_goodput(run_dir, config=small())


def test_stop_ends_the_wait_of_a_failed_launch(run_dir):
    finisher = GoodputFinisher(run_dir, config=small())
    finisher.stop()
    finisher._thread.join(timeout=60)
    assert not finisher._thread.is_alive()
    assert not (run_dir / MLFLOW_RUN_JSON).exists()
