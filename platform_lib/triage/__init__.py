"""Failed-run triage: root cause vs. cascades, failure class, restart policy (see README.md)."""

from platform_lib.lazy import lazy_exports

# Submodules are imported on first use (PEP 562): `drivetrain --help` stays fast.
_EXPORTS = {
    "assess_failure": "platform_lib.triage.attempt",
    "evidence_from_child_failure": "platform_lib.triage.attempt",
    "failure_message": "platform_lib.triage.attempt",
    "Finding": "platform_lib.triage.classifier",
    "Verdict": "platform_lib.triage.classifier",
    "classify": "platform_lib.triage.classifier",
    "classify_attempts": "platform_lib.triage.classifier",
    "classify_text": "platform_lib.triage.classifier",
    "Evidence": "platform_lib.triage.logs",
    "LogLine": "platform_lib.triage.logs",
    "ProcessExit": "platform_lib.triage.logs",
    "load_evidence": "platform_lib.triage.logs",
    "save_evidence": "platform_lib.triage.logs",
    "Attempt": "platform_lib.triage.policy",
    "RestartDecision": "platform_lib.triage.policy",
    "RestartPolicy": "platform_lib.triage.policy",
    "append_attempt": "platform_lib.triage.policy",
    "decide_restart": "platform_lib.triage.policy",
    "fingerprint": "platform_lib.triage.fingerprints",
    "load_history": "platform_lib.triage.policy",
    "record_verdict": "platform_lib.triage.record",
    "RULES": "platform_lib.triage.rules",
    "Rule": "platform_lib.triage.rules",
    "CLASS_INFO": "platform_lib.triage.taxonomy",
    "FailureClass": "platform_lib.triage.taxonomy",
    "Role": "platform_lib.triage.taxonomy",
}

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

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
