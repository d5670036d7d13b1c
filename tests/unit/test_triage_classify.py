"""Triage engine: line parsing (rank, time, launcher summary), root vs. cascade, confidence, CLI."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from platform_lib.cli import main
from platform_lib.triage.attempt import evidence_from_child_failure, failure_message
from platform_lib.triage.classifier import classify, classify_text
from platform_lib.triage.logs import Evidence, ProcessExit, load_evidence, parse_log, save_evidence
from platform_lib.triage.rules import RULES, Rule
from platform_lib.triage.taxonomy import FailureClass, Role

C = FailureClass

WATCHDOG = (
    "[rank{r}]:[E1201 10:{m}:32.123456789 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog "
    "caught collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, "
    "NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) ran for 600060 "
    "milliseconds before timing out."
)

SUMMARY = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-01_10:20:02
  host      : node-a
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 4322)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 4322
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-01_10:20:01
  host      : node-a
  rank      : 0 (local_rank: 0)
  exitcode  : -6 (pid: 4321)  (SIGABRT)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 4321
============================================================
"""


def test_rules_table_is_valid_data() -> None:
    names = [r.name for r in RULES]
    assert len(names) == len(set(names))
    assert {r.role for r in RULES} == set(Role)
    assert {r.failure_class for r in RULES if r.role is Role.ROOT} >= set(C) - {C.UNKNOWN}
    with pytest.raises(ValueError, match="does not compile"):
        Rule("bad", C.DATA, Role.ROOT, "(unclosed")
    with pytest.raises(ValueError, match="strength"):
        Rule("bad", C.DATA, Role.ROOT, "x", strength=0)


def test_parse_rank_prefixes_times_and_summary_entries() -> None:
    lines = parse_log(
        WATCHDOG.format(r=3, m=15) + "\n2: plain srun line\n" + SUMMARY, "job.log", year=2026
    )
    assert lines[0].rank == 3 and lines[0].time == datetime(2026, 12, 1, 10, 15, 32, 123456)
    assert lines[0].message.startswith("[E1201")
    assert lines[1].rank == 2 and lines[1].message == "plain srun line"
    sigkill = next(ln for ln in lines if "Signal 9" in ln.message)
    assert sigkill.rank == 1 and sigkill.time == datetime(2026, 12, 1, 10, 20, 2)
    assert not sigkill.first_observed
    abort = next(ln for ln in lines if "Signal 6" in ln.message)
    assert abort.rank == 0 and abort.first_observed


def test_cascade_only_watchdog_is_communication_with_low_confidence() -> None:
    log = "\n".join(WATCHDOG.format(r=r, m=15) for r in (0, 1, 2, 3))
    verdict = classify_text(log)
    assert verdict.failure_class is C.COMMUNICATION
    assert verdict.confidence_level == "low" and verdict.from_cascades_only
    assert verdict.root_line == WATCHDOG.format(r=0, m=15)
    assert len(verdict.cascades) == 3


def test_first_observed_abort_is_a_cascade_of_the_bare_sigkill() -> None:
    verdict = classify_text(SUMMARY)
    assert verdict.failure_class is C.UNKNOWN  # a bare SIGKILL is not proof of OOM
    assert verdict.confidence_level == "low"
    assert "Signal 9 (SIGKILL)" in verdict.root_line or "-9" in verdict.root_line
    assert (verdict.rank, verdict.pid, verdict.signal) == (1, 4322, "SIGKILL")
    assert any("SIGABRT" in f.line.text for f in verdict.cascades)


def test_sigkill_with_kernel_oom_confirmation_becomes_host_oom() -> None:
    dmesg = "[Tue Dec  1 10:20:01 2026] python invoked oom-killer: gfp_mask=0x140cca, order=0\n"
    verdict = classify(Evidence(logs={"launcher.log": SUMMARY, "dmesg.log": dmesg}))
    assert verdict.failure_class is C.OOM_HOST
    assert verdict.confirmations and verdict.rank == 1


def test_earliest_of_equal_roots_wins_by_time_not_file_order() -> None:
    log = (
        "[rank1]:2026-12-01 10:00:05,000 ERROR step 40 failed\n"
        "[rank1]:KeyError: 'camera_front'\n"
        "[rank3]:2026-12-01 10:00:02,000 ERROR step 40 failed\n"
        "[rank3]:ZeroDivisionError: division by zero\n"
    )
    verdict = classify_text(log)
    assert verdict.failure_class is C.USER_CODE and verdict.rank == 3
    assert [f.line.rank for f in verdict.other_roots] == [1]


def test_exit_codes_and_pod_status_are_evidence() -> None:
    pod = {
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "pytorch",
                    "state": {
                        "terminated": {
                            "reason": "OOMKilled",
                            "exitCode": 137,
                            "finishedAt": "2026-12-01T10:20:03Z",
                        }
                    },
                }
            ],
        }
    }
    verdict = classify(
        Evidence(exits=(ProcessExit(1, -9, 4322), ProcessExit(0, 1, 4321)), pod_status=pod)
    )
    assert verdict.failure_class is C.OOM_HOST and verdict.confidence_level == "high"
    assert verdict.root_line.startswith("container pytorch terminated: reason=OOMKilled")
    bare = classify(Evidence(exits=(ProcessExit(2, 137, 99),)))
    assert bare.failure_class is C.UNKNOWN and bare.signal == "SIGKILL" and bare.rank == 2


def test_nothing_matched_is_unknown_without_root() -> None:
    verdict = classify_text("step 10 loss 0.52\nstep 11 loss 0.51\n")
    assert verdict.failure_class is C.UNKNOWN and verdict.root_line is None
    assert verdict.confidence == 0.0 and verdict.fingerprint == "none"
    assert "no rule matched" in verdict.describe()


class _FakeFailure:  # the attributes of torchelastic's ProcessFailure that triage reads
    def __init__(self, pid: int, exitcode: int) -> None:
        self.pid, self.exitcode = pid, exitcode


class _FakeChildFailed(Exception):
    def __init__(self) -> None:
        super().__init__(SUMMARY)
        self.failures = {1: _FakeFailure(4322, -9), 0: _FakeFailure(4321, -6)}


def test_evidence_from_child_failure_and_message(tmp_path) -> None:
    (tmp_path / "attempt_0" / "1").mkdir(parents=True)
    (tmp_path / "attempt_0" / "1" / "stderr.log").write_text("old attempt: ValueError: x\n")
    (tmp_path / "attempt_1" / "1").mkdir(parents=True)
    (tmp_path / "attempt_1" / "1" / "stderr.log").write_text(
        "2026-12-01 10:20:00,500 platform_lib.loading.errors.ShardReadError: shard "
        "train-000003.tar truncated at byte 81920\n"
    )
    evidence = evidence_from_child_failure(_FakeChildFailed(), log_dir=tmp_path)
    assert set(evidence.logs) == {"attempt_1/1/stderr.log", "launcher"}
    verdict = classify(evidence)
    assert verdict.failure_class is C.DATA and verdict.rank == 1
    from platform_lib.triage.policy import RestartDecision

    msg = failure_message(verdict, RestartDecision(True, "restart 1 of 2", 0, 0, 2))
    assert "rank 1" in msg and "ShardReadError" in msg and "restarting" in msg
    tags = verdict.mlflow_tags()
    assert tags["triage.class"] == "data" and tags["triage.rank"] == "1"


def test_save_and_load_evidence_roundtrip(tmp_path) -> None:
    evidence = Evidence(
        logs={"rank0.log": WATCHDOG.format(r=0, m=1), "launcher": SUMMARY},
        exits=(ProcessExit(1, -9, 4322),),
        pod_status={"status": {"reason": "Evicted", "message": "x"}},
    )
    loaded = load_evidence(save_evidence(evidence, tmp_path / "ev"))
    assert set(loaded.logs) == {"rank0.log", "launcher.log"}
    assert loaded.exits == evidence.exits and loaded.pod_status == evidence.pod_status
    assert classify(loaded).failure_class is classify(evidence).failure_class
    with pytest.raises(ValueError, match="outside"):
        save_evidence(Evidence(logs={"../x.log": ""}), tmp_path / "ev2")
    with pytest.raises(FileNotFoundError):
        load_evidence(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "metrics.jsonl").write_text("{}")
    with pytest.raises(ValueError, match="no evidence"):
        load_evidence(tmp_path / "empty")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "exit_codes.json").write_text('[{"rank": 1}]')
    with pytest.raises(ValueError, match="exit_codes.json"):
        load_evidence(tmp_path / "bad")


def test_time_formats() -> None:
    from platform_lib.triage.logs import parse_time

    expect = datetime(2026, 12, 1, 10, 15, 32)
    for text in (
        "2026-12-01T10:15:32Z rest",
        "2026-12-01 10:15:32,000 INFO x",
        "[rank0]: 2026-12-01_10:15:32 x",
        "E1201 10:15:32.000000 12 api.py:1] x",
        "[W1201 10:15:32.000000000 ProcessGroupNCCL.cpp:1] x",
        "Dec  1 10:15:32 host kernel: x",
        "[Tue Dec  1 10:15:32 2026] NVRM: x",
    ):
        assert parse_time(text.removeprefix("[rank0]: "), 2026) == expect, text
    assert parse_time("[12345.678901] kernel uptime only", 2026) is None
    assert parse_time("step 5 loss 0.1", 2026) is None


def test_cli_triage_text_json_and_errors(tmp_path, capsys) -> None:
    log = tmp_path / "failed.log"
    log.write_text("\n".join(WATCHDOG.format(r=r, m=15) for r in (0, 1)))
    assert main(["triage", str(log)]) == 0
    assert "communication (low confidence" in capsys.readouterr().out
    assert main(["triage", str(log), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["class"] == "communication" and data["from_cascades_only"] is True
    assert main(["triage", str(tmp_path / "nope.log")]) == 2
    assert "neither a log file" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.distributed
def test_evidence_from_a_real_child_failed_error(tmp_path) -> None:
    """The hook's path end to end: a real 2-rank elastic launch fails, its exception is triaged."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    from platform_lib.training.config import replace
    from platform_lib.training.launch import launch_local
    from platform_lib.training.presets import get_preset

    cfg = get_preset("small")
    cfg = replace(cfg, optimizer=replace(cfg.optimizer, max_steps=2, warmup_steps=1))
    with pytest.raises(ChildFailedError) as failed:
        launch_local(cfg, str(tmp_path / "no-dataset"), str(tmp_path / "run"), nproc=2)
    evidence = evidence_from_child_failure(failed.value)
    assert {e.rank for e in evidence.exits} <= {0, 1} and evidence.exits
    verdict = classify(evidence)
    assert verdict.failure_class is C.DATA and verdict.rank in (0, 1)
    assert "ManifestMissingError" in verdict.root_line and verdict.pid is not None


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "[rank0]:platform_lib.loading.errors.RingError: /dev/shm has 64 MiB free but the "
            "loader's shared-memory ring needs 402653184 bytes; give the pod a larger /dev/shm",
            C.OOM_HOST,
        ),
        (
            "[rank1]:platform_lib.shards.errors.ManifestError: manifest.json of /data/ds: "
            "shards[3].path '../etc/passwd' is not of the form shards/shard-NNNNNN.tar",
            C.DATA,
        ),
    ],
)
def test_loader_ring_and_manifest_errors_are_classified(line: str, expected: FailureClass) -> None:
    verdict = classify(Evidence(logs={"rank.log": "noise before\n" + line + "\nnoise after\n"}))
    assert verdict.failure_class is expected
    assert verdict.root and "Error: " in verdict.root[0].line.text
    assert verdict.root[0].line.rank is not None
