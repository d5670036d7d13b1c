"""A store that is down when `evaluate_version` downloads the dataset (after `hash_dataset` read
its manifest): one line naming the store and saying to retry, and still a retryable failure.

The outage is real: the dataset URL's S3 endpoint is a loopback port where nothing listens
(port 9, discard), so the download's connection is refused; retries are set to 0 so the task
gives up at once. `pyflyte run` of the task shows what a local user sees; the in-process call
shows the class a cluster's entrypoint sees (`FlyteRecoverableException`: Flyte retries it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DATASET = "s3://eval-bucket/datasets/ds"
#: The start of the line: the task, the store, the retried request's error.
LINE = (
    rf"^error: transient storage error while evaluating the model on the dataset {DATASET} "
    rf"\(StorageUnreachableError: listing {DATASET} failed after 1 attempts "
    r"\(EndpointConnectionError: .*\)\) "
    rf"\({DATASET}\): check the endpoint and the network, then retry; on a cluster Flyte "
    r"retries this task$"
)
INPUTS = {
    "model_version": "models:/eval-outage/1",
    "dataset": DATASET,
    "dataset_hash": "0" * 64,
    "spec": "",
    "split": "val",
}
DOWN = {
    "DRIVETRAIN_STORAGE_RETRIES": "0",  # give up at the first refused connection
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9",  # nothing listens on port 9 (discard)
    "AWS_ACCESS_KEY_ID": "test",
    "AWS_SECRET_ACCESS_KEY": "test",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_MAX_ATTEMPTS": "1",
}


def test_a_store_down_at_the_download_is_retryable_with_one_line(
    local_flyte: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import re

    from flytekit.exceptions.user import FlyteRecoverableException

    from tasks.evaluation import evaluate_version

    for name, value in DOWN.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(FlyteRecoverableException) as caught:
        evaluate_version(**INPUTS)
    assert re.match(LINE, str(caught.value)), str(caught.value)


def test_pyflyte_run_prints_one_line_naming_the_store_and_no_traceback(
    isolated_env: dict[str, str],
) -> None:
    import re

    args = [f"--{name}={value}" for name, value in INPUTS.items()]
    result = subprocess.run(
        [str(Path(sys.executable).parent / "pyflyte"), "run", "tasks/evaluation.py"]
        + ["evaluate_version", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**isolated_env, **DOWN, "PYTHONPATH": str(REPO), "AWS_CONFIG_FILE": os.devnull},
    )
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output[-4000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and re.match(LINE, errors[0]), output[-4000:]
    assert result.returncode == 1, output[-4000:]
