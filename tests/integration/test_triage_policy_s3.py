"""The restart policy's attempt history on object storage (a real moto S3 server on loopback);
the policy itself is tested in tests/unit/test_triage_policy.py.
"""

from __future__ import annotations

import boto3

from platform_lib.triage.policy import Attempt, append_attempt, decide_restart, load_history
from platform_lib.triage.taxonomy import FailureClass

C = FailureClass


def test_history_on_object_storage(s3_env, moto_server) -> None:
    """The history next to checkpoints on S3: two attempts, read back and decided on."""
    _, endpoint = moto_server()
    s3_env(endpoint)
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="ckpt")
    url = "s3://ckpt/run-7/triage_history.json"
    assert load_history(url) == []
    append_attempt(url, Attempt(C.HARDWARE, "hardware/xid-fatal/abc", 300))
    history = append_attempt(url, Attempt(C.HARDWARE, "hardware/xid-fatal/abc", 300, False))
    assert load_history(url) == history and len(history) == 2
    stop = decide_restart(C.HARDWARE, "hardware/xid-fatal/abc", 300, history[:1])
    assert not stop.restart and stop.recurrences == 1
