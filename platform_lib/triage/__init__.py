"""Failed-run triage: root cause vs. cascades, failure class, restart policy (see README.md)."""

from platform_lib.triage.attempt import (
    assess_failure,
    evidence_from_child_failure,
    failure_message,
)
from platform_lib.triage.classifier import (
    Finding,
    Verdict,
    classify,
    classify_attempts,
    classify_text,
)
from platform_lib.triage.fingerprints import fingerprint
from platform_lib.triage.logs import (
    Evidence,
    LogLine,
    ProcessExit,
    load_evidence,
    save_evidence,
)
from platform_lib.triage.policy import (
    Attempt,
    RestartDecision,
    RestartPolicy,
    append_attempt,
    decide_restart,
    load_history,
)
from platform_lib.triage.record import record_verdict
from platform_lib.triage.rules import (
    RULES,
    Rule,
)
from platform_lib.triage.taxonomy import (
    CLASS_INFO,
    FailureClass,
    Role,
)

__all__ = [
    "CLASS_INFO",
    "RULES",
    "Attempt",
    "Evidence",
    "FailureClass",
    "Finding",
    "LogLine",
    "ProcessExit",
    "RestartDecision",
    "RestartPolicy",
    "Role",
    "Rule",
    "Verdict",
    "append_attempt",
    "assess_failure",
    "classify",
    "classify_attempts",
    "classify_text",
    "decide_restart",
    "evidence_from_child_failure",
    "failure_message",
    "fingerprint",
    "load_evidence",
    "load_history",
    "record_verdict",
    "save_evidence",
]
