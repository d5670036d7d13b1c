"""The triage corpus (tests/data/triage/): every case's class and root line, negatives, real runs.

`expectations.json` maps each case (a log file or a folder of evidence, relative to
tests/data/triage/) to its expected class, root line (exact text), the source file of the
root line, and where it matters the culprit rank and the confidence level.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from platform_lib.triage.classifier import classify, classify_attempts, match_line
from platform_lib.triage.logs import load_evidence, parse_log
from platform_lib.triage.rules import RULES
from platform_lib.triage.taxonomy import FailureClass, Role

CORPUS = Path(__file__).resolve().parents[1] / "data" / "triage"
EXPECTATIONS: dict[str, dict] = json.loads((CORPUS / "expectations.json").read_text())


def _cases(kind: str) -> list[str]:
    return sorted(k for k in EXPECTATIONS if k.startswith(kind + "/"))


def test_corpus_is_complete_and_large_enough() -> None:
    on_disk = {
        str(p.relative_to(CORPUS))
        for d in ("public", "real")
        if (CORPUS / d).is_dir()
        for p in (CORPUS / d).iterdir()
    }
    assert on_disk == set(EXPECTATIONS), "every corpus case needs an expectation and vice versa"
    public = [k for k in _cases("public") if EXPECTATIONS[k]["root_line"] is not None]
    negatives = [k for k in _cases("public") if EXPECTATIONS[k]["root_line"] is None]
    assert len(public) >= 30 and len(negatives) >= 2
    assert {EXPECTATIONS[k]["class"] for k in public} == {str(c) for c in FailureClass}
    assert len(_cases("real")) >= 4


@pytest.mark.parametrize("case", sorted(EXPECTATIONS))
def test_corpus_case_class_and_root_line(case: str) -> None:
    expected = EXPECTATIONS[case]
    verdict = classify(load_evidence(CORPUS / case))
    assert str(verdict.failure_class) == expected["class"], verdict.describe()
    assert verdict.root_line == expected["root_line"], verdict.describe()
    if "root_source" in expected:
        assert verdict.root[0].line.source == expected["root_source"]
    if "rank" in expected:
        assert verdict.rank == expected["rank"], verdict.describe()
    if "confidence_level" in expected:
        assert verdict.confidence_level == expected["confidence_level"], verdict.describe()
    if "attempts" in expected:  # one log, several elastic attempts: each classified alone
        attempts = classify_attempts(load_evidence(CORPUS / case))
        assert [str(v.failure_class) for v in attempts] == expected["attempts"]
        assert [v.attempt for v in attempts] == list(range(len(attempts)))


def test_corpus_accuracy_is_total() -> None:
    right = 0
    for case, expected in EXPECTATIONS.items():
        verdict = classify(load_evidence(CORPUS / case))
        right += (str(verdict.failure_class), verdict.root_line) == (
            expected["class"],
            expected["root_line"],
        )
    assert right == len(EXPECTATIONS), f"{right}/{len(EXPECTATIONS)} cases right"


def test_cascade_only_watchdog_log_is_low_confidence_communication() -> None:
    verdict = classify(load_evidence(CORPUS / "public" / "04_nccl_watchdog_only_4ranks.log"))
    assert verdict.failure_class is FailureClass.COMMUNICATION
    assert verdict.from_cascades_only and verdict.confidence_level == "low"
    assert verdict.other_roots == () and len(verdict.cascades) >= 3
    # the same watchdog lines after a real root on another rank are cascades, not the cause
    after = classify(load_evidence(CORPUS / "public" / "05_nccl_watchdog_after_data_error.log"))
    assert after.failure_class is FailureClass.DATA and after.rank == 3
    assert {f.rule.name for f in after.cascades} == {"nccl-watchdog-timeout"}


def test_first_observed_failure_is_not_taken_as_root_cause() -> None:
    case = CORPUS / "public" / "16_childfailed_first_observed_is_abort_cascade.log"
    verdict = classify(load_evidence(case))
    first = [f for f in verdict.cascades if f.line.first_observed]
    assert first and all(f.rule.name in ("sigabrt", "elastic-summary") for f in first)
    assert not verdict.root[0].line.first_observed and verdict.rank == 1


@pytest.mark.parametrize(
    ("case", "pid"),
    [("public/17_childfailed_bare_sigkill.log", 7713), ("real/kill9_rank1.log", None)],
)
def test_bare_sigkill_is_not_reported_as_oom(case: str, pid: int | None) -> None:
    verdict = classify(load_evidence(CORPUS / case))
    assert verdict.failure_class is FailureClass.UNKNOWN and verdict.confidence_level == "low"
    assert (verdict.rank, verdict.signal) == (1, "SIGKILL") and verdict.pid is not None
    assert pid is None or verdict.pid == pid
    assert "not proof of OOM" in verdict.action


def test_negative_lines_match_no_cause_rule() -> None:
    lines = [
        ln
        for ln in (CORPUS / "negative_lines.txt").read_text().splitlines()
        if ln and not ln.startswith("#")
    ]
    assert len(lines) >= 15
    for line in parse_log("\n".join(lines), "negative_lines.txt", year=2026):
        rule = match_line(line)
        assert rule is None or rule.role is Role.CONTEXT, (line.text, rule and rule.name)


def test_every_rule_that_can_decide_is_exercised_by_the_corpus() -> None:
    """Keeps the table honest: each root/cascade/confirmation rule claims a line of some case."""
    used: set[str] = set()
    for case in EXPECTATIONS:
        verdict = classify(load_evidence(CORPUS / case))
        used |= {
            f.rule.name
            for f in verdict.root + verdict.other_roots + verdict.cascades + verdict.confirmations
        }
    deciding = {r.name for r in RULES if r.role is not Role.CONTEXT}
    assert deciding - used == set()
