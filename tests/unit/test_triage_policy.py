"""Restart policy: fingerprints, recurrence without checkpoint progress, per-class budgets."""

from __future__ import annotations

import json

import pytest

from platform_lib.triage.attempt import assess_failure
from platform_lib.triage.classifier import classify_text
from platform_lib.triage.fingerprints import fingerprint, normalise_line
from platform_lib.triage.logs import Evidence
from platform_lib.triage.policy import (
    Attempt,
    RestartPolicy,
    append_attempt,
    decide_restart,
    load_history,
)
from platform_lib.triage.taxonomy import FailureClass

C = FailureClass

OOM_RANK3 = (
    "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
    "GPU 3 has a total capacity of 79.15 GiB of which 1.06 GiB is free."
)
OOM_RANK5 = (
    "[rank5]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
    "GPU 5 has a total capacity of 79.15 GiB of which 0.98 GiB is free."
)


def test_fingerprint_ignores_rank_numbers_and_addresses() -> None:
    a, b = classify_text(OOM_RANK3), classify_text(OOM_RANK5)
    assert a.failure_class is C.OOM_ACCELERATOR
    assert a.fingerprint == b.fingerprint
    assert a.fingerprint.startswith("oom_accelerator/cuda-oom/")
    other = classify_text("[rank0]: ValueError: bad value")
    assert other.fingerprint != a.fingerprint
    assert (
        normalise_line(
            "[Rank 7] pid 4321 at 0x7f00deadbeef on 10.0.0.12:29500 2026-12-01T10:00:01Z"
        )
        == "<rank> pid <n> at <hex> on <ip> <time>"
    )
    assert fingerprint(None, None) == "none"


def test_recurrence_without_checkpoint_progress_stops() -> None:
    fp = fingerprint(C.COMMUNICATION, "nccl-net-error", "NET/IB : Got completion with error 12")
    first = decide_restart(C.COMMUNICATION, fp, 100, [])
    assert first.restart and first.recurrences == 0
    history = [Attempt(C.COMMUNICATION, fp, 100)]
    again = decide_restart(C.COMMUNICATION, fp, 100, history)
    assert not again.restart and again.recurrences == 1
    assert "without checkpoint progress" in again.reason
    # the same failure after the checkpoint advanced: worth another restart
    progressed = decide_restart(C.COMMUNICATION, fp, 200, history)
    assert progressed.restart, progressed.reason


def test_recurrence_with_no_checkpoint_at_all_stops() -> None:
    fp = fingerprint(C.DATA, "storage-unreachable", "ObjectStoreUnreachableError: s3 timed out")
    assert decide_restart(C.DATA, fp, None, []).restart  # transient data error: one more try
    assert not decide_restart(C.DATA, fp, None, [Attempt(C.DATA, fp, None)]).restart


def test_user_owned_class_is_not_automatically_unrecoverable() -> None:
    fp = fingerprint(C.USER_CODE, "non-finite-loss", "non-finite loss nan at step 812")
    first = decide_restart(C.USER_CODE, fp, 800, [])
    assert first.restart and first.budget == 1
    # a second, different user-code failure without progress exceeds the budget of 1
    fp2 = fingerprint(C.USER_CODE, "python-exception", "KeyError: 'x'")
    second = decide_restart(C.USER_CODE, fp2, 800, [Attempt(C.USER_CODE, fp, 800)])
    assert not second.restart and "budget 1" in second.reason
    # configuration has no budget: the same config fails the same way
    cfg = decide_restart(
        C.CONFIGURATION, fingerprint(C.CONFIGURATION, "config-invalid", "x"), 0, []
    )
    assert not cfg.restart


def test_budget_counts_only_failures_since_checkpoint_progress() -> None:
    policy = RestartPolicy(budgets={c: 2 for c in FailureClass})
    history = [
        Attempt(C.HARDWARE, f"hardware/xid/{n}", step) for n, step in enumerate((100, 300, 300))
    ]
    # two hardware failures at step 300 without progress since: budget 2 spent
    assert not decide_restart(C.HARDWARE, "hardware/xid/new", 300, history, policy).restart
    # the checkpoint advanced to 400: the budget is available again
    assert decide_restart(C.HARDWARE, "hardware/xid/new", 400, history, policy).restart


def test_preemption_recurrence_is_exempt_but_capped() -> None:
    fp = fingerprint(C.PREEMPTION_PLATFORM, "kueue-preempted", "Preempted to accommodate")
    history = [Attempt(C.PREEMPTION_PLATFORM, fp, 50)] * 3
    assert decide_restart(C.PREEMPTION_PLATFORM, fp, 50, history).restart
    capped = RestartPolicy(max_restarts=3)
    assert not decide_restart(C.PREEMPTION_PLATFORM, fp, 50, history, capped).restart


def test_policy_rejects_missing_or_negative_budgets() -> None:
    with pytest.raises(ValueError, match="budgets missing"):
        RestartPolicy(budgets={C.DATA: 1})
    with pytest.raises(ValueError, match="negative"):
        RestartPolicy(budgets={c: -1 for c in FailureClass})


def test_history_file_roundtrip_and_assess_failure(tmp_path) -> None:
    path = tmp_path / "ckpt" / "triage_history.json"
    evidence = Evidence(logs={"rank3.log": OOM_RANK3})
    verdict, decision = assess_failure(evidence, checkpoint_step=40, history_path=path)
    assert verdict.failure_class is C.OOM_ACCELERATOR and decision.restart
    verdict2, decision2 = assess_failure(
        Evidence(logs={"rank5.log": OOM_RANK5}), checkpoint_step=40, history_path=path
    )
    assert verdict2.fingerprint == verdict.fingerprint
    assert not decision2.restart and decision2.recurrences == 1
    history = load_history(path)
    assert [a.restarted for a in history] == [True, False]
    assert history[0] == Attempt(C.OOM_ACCELERATOR, verdict.fingerprint, 40, True)
    assert append_attempt(path, Attempt(C.DATA, "data/x/1", 41))[-1].checkpoint_step == 41
    path.write_text(json.dumps([{"failure_class": "nonsense"}]))
    with pytest.raises(ValueError, match="not a triage attempt history"):
        load_history(path)


def test_history_on_object_storage(s3_env) -> None:
    """The history next to checkpoints on S3 (real moto server on loopback): two attempts."""
    import boto3
    from s3_helpers import start_moto_server

    proc, endpoint = start_moto_server()
    try:
        s3_env(endpoint)
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="ckpt")
        url = "s3://ckpt/run-7/triage_history.json"
        assert load_history(url) == []
        append_attempt(url, Attempt(C.HARDWARE, "hardware/xid-fatal/abc", 300))
        history = append_attempt(url, Attempt(C.HARDWARE, "hardware/xid-fatal/abc", 300, False))
        assert load_history(url) == history and len(history) == 2
        stop = decide_restart(C.HARDWARE, "hardware/xid-fatal/abc", 300, history[:1])
        assert not stop.restart and stop.recurrences == 1
    finally:
        proc.kill()
        proc.wait()
