"""Classify a failed run: root cause vs. cascades, class, confidence, evidence.

All knowledge is in `rules.RULES`; this module only ranks the matches: each evidence line is
claimed by the first rule whose pattern it contains, the root is the strongest `root`
candidate (the earliest among equals), and with no root the strongest `cascade` stands in at
capped confidence. The algorithm step by step, with the confidence rule: `classify_attempts`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from platform_lib.triage.fingerprints import fingerprint, normalise_line
from platform_lib.triage.logs import Evidence, LogLine, collect_evidence_lines
from platform_lib.triage.rules import Rule, rule_matcher
from platform_lib.triage.taxonomy import CLASS_INFO, FailureClass, Role

__all__ = [
    "AMBIGUITY_FACTOR",
    "CASCADE_ONLY_CONFIDENCE",
    "Finding",
    "Verdict",
    "classify",
    "classify_attempts",
    "classify_lines",
    "classify_text",
    "match_line",
    "split_attempts",
]

#: Highest confidence of a verdict built from cascades only.
CASCADE_ONLY_CONFIDENCE = 0.35
#: Confidence factor when a root of another known class is within `AMBIGUITY_MARGIN`.
AMBIGUITY_FACTOR = 0.7
AMBIGUITY_MARGIN = 0.1
#: Most root lines kept (the same error repeated on several ranks).
MAX_ROOT_LINES = 8
HIGH, MEDIUM = 0.75, 0.5

_PID = re.compile(r"\b(?:PID|pid)[:= ]\s*'?(\d+)|\(pid (\d+)\)|Killed process (\d+)")
_SIGNAL = re.compile(
    r"\((SIG[A-Z]+)\)|signal: (Bus error|Killed|Aborted)|got signal: (\d+)|with signal (SIG[A-Z]+)"
)
_SIGNAL_NAMES = {
    "Bus error": "SIGBUS",
    "Killed": "SIGKILL",
    "Aborted": "SIGABRT",
    "15": "SIGTERM",
    "1": "SIGHUP",
    "2": "SIGINT",
}
_EXIT_REPORT = re.compile(r"exitcode\s*:|received by PID")
_NO_MATCH: re.Match[str] = re.compile("").fullmatch("")  # type: ignore[assignment]  # always matches
#: Rules whose lines report a worker killed by a signal (rank/pid/signal of last resort).
_KILL_RULES = ("sigkill", "sigbus", "worker-sigterm", "native-crash")


@dataclass(frozen=True)
class Finding:
    """A line claimed by a rule."""

    line: LogLine
    rule: Rule

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: where, rank, time, rule, role, class, text."""
        return {
            "where": self.line.where,
            "rank": self.line.rank,
            "time": self.line.time.isoformat() if self.line.time else None,
            "rule": self.rule.name,
            "role": str(self.rule.role),
            "class": str(self.rule.failure_class),
            "text": self.line.text,
        }


@dataclass(kw_only=True, frozen=True)
class Verdict:
    """The triage of one failed attempt.

    Attributes:
        failure_class: the class of the root cause (UNKNOWN when nothing matched).
        confidence: 0-1; see `confidence_level`.
        root: the root-cause line(s): the chosen line first, then the same error (same rule,
            same normalised text) on other ranks. Empty when nothing matched.
        cascades: lines that are symptoms of the root (collective timeouts, aborts, the
            launcher's summary), in time order.
        confirmations: lines corroborating the class.
        other_roots: root candidates not chosen (weaker or later), in time order.
        rank, pid, signal: of the root, when the evidence names them.
        action: what to do (the root rule's advice, else the class's).
        fingerprint: normalised identity of the root cause (`fingerprints.fingerprint`).
    """

    failure_class: FailureClass
    confidence: float
    action: str
    fingerprint: str
    root: tuple[Finding, ...] = ()
    cascades: tuple[Finding, ...] = ()
    confirmations: tuple[Finding, ...] = ()
    other_roots: tuple[Finding, ...] = ()
    rank: int | None = None
    pid: int | None = None
    signal: str | None = None
    from_cascades_only: bool = False
    attempt: int = 0
    """Index of the attempt classified (0 = first), when one log holds several (elastic
    restarts); `classify` classifies the last one, `classify_attempts` each."""
    notes: tuple[str, ...] = ()
    """What the evidence reader skipped or did not read (odd JSON files, lines past the
    per-rule cap, cut lines), one sentence each."""

    @property
    def confidence_level(self) -> str:
        """`high` (>= 0.75), `medium` (>= 0.5) or `low`."""
        return (
            "high" if self.confidence >= HIGH else "medium" if self.confidence >= MEDIUM else "low"
        )

    @property
    def root_line(self) -> str | None:
        """The root-cause line as written, or None when nothing matched."""
        return self.root[0].line.text if self.root else None

    @property
    def runbook(self) -> str:
        """The runbook page of the class."""
        return CLASS_INFO[self.failure_class].runbook

    def describe(self) -> str:
        """Multi-line report for a terminal or a task's error message (names rank, pid, signal)."""
        info = CLASS_INFO[self.failure_class]
        who = ", ".join(
            p
            for p in (
                f"rank {self.rank}" if self.rank is not None else "",
                f"pid {self.pid}" if self.pid is not None else "",
                self.signal or "",
            )
            if p
        )
        head = (
            f"triage: {info.title} ({self.confidence_level} confidence, "
            f"{self.confidence:.2f}){' on ' + who if who else ''}"
        )
        lines = [head]
        if self.root:
            cause = (
                "no root cause in the evidence; strongest symptom"
                if self.from_cascades_only
                else "root cause"
            )
            lines.append(f"  {cause} [{self.root[0].line.where}]: {self.root[0].line.text.strip()}")
        else:
            lines.append("  no rule matched the evidence")
        if self.cascades:
            ranks = sorted({f.line.rank for f in self.cascades if f.line.rank is not None})
            lines.append(
                f"  cascades: {len(self.cascades)} line(s)"
                + (f" on ranks {', '.join(map(str, ranks))}" if ranks else "")
                + f", first [{self.cascades[0].line.where}]: "
                + self.cascades[0].line.text.strip()[:200]
            )
        lines.append(f"  action: {self.action}")
        lines.append(f"  runbook: {info.runbook}; fingerprint {self.fingerprint}")
        lines.extend(f"  note: {note}" for note in self.notes)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (what `drivetrain triage --json` prints)."""
        return {
            "class": str(self.failure_class),
            "confidence": round(self.confidence, 3),
            "confidence_level": self.confidence_level,
            "root_line": self.root_line,
            "rank": self.rank,
            "pid": self.pid,
            "signal": self.signal,
            "action": self.action,
            "runbook": self.runbook,
            "fingerprint": self.fingerprint,
            "from_cascades_only": self.from_cascades_only,
            "root": [f.to_dict() for f in self.root],
            "cascades": [f.to_dict() for f in self.cascades],
            "confirmations": [f.to_dict() for f in self.confirmations],
            "other_roots": [f.to_dict() for f in self.other_roots],
            "notes": list(self.notes),
        }

    def mlflow_tags(self, prefix: str = "triage.") -> dict[str, str]:
        """Tags for the MLflow run of the failed attempt (values cut to 500 characters)."""
        tags = {
            "class": str(self.failure_class),
            "confidence": f"{self.confidence:.2f}",
            "confidence_level": self.confidence_level,
            "fingerprint": self.fingerprint,
            "root_line": (self.root_line or "").strip(),
            "root_source": self.root[0].line.where if self.root else "",
            "rank": "" if self.rank is None else str(self.rank),
            "pid": "" if self.pid is None else str(self.pid),
            "signal": self.signal or "",
            "cascades": str(len(self.cascades)),
            "action": self.action,
            "runbook": self.runbook,
        }
        return {prefix + k: v[:500] for k, v in tags.items()}


def match_line(line: LogLine) -> Rule | None:
    """Return the first rule of `RULES` (table order) whose pattern is found in `line.message`.

    Only the first `rules.MAX_MATCH_CHARS` characters of the message are searched.
    """
    return rule_matcher().match(line.message)


def _pid_signal(message: str) -> tuple[int | None, str | None]:
    pid = signal = None
    if m := _PID.search(message):
        pid = int(next(g for g in m.groups() if g))
    if m := _SIGNAL.search(message):
        value = next(g for g in m.groups() if g)
        signal = _SIGNAL_NAMES.get(value, value)
    return pid, signal


def _rank_pid_signal(
    root: Finding, findings: Sequence[Finding], lines: Sequence[LogLine]
) -> tuple[int | None, int | None, str | None]:
    """Rank, pid and signal of the root cause.

    Looked up in order: the root line; lines of the same rule class in the same source (the
    DataLoader's "worker (pid N) is killed by signal: Bus error" after the bus error); the
    line that names the pid together with a rank (a launcher summary entry); the exit report
    of the rank (`exitcode : -9 (pid: N)`, `Signal 9 (SIGKILL) received by PID N`); when the
    root names no rank (a kernel or pod-level report), the first worker killed by a signal.
    """
    rank = root.line.rank
    pid, signal = _pid_signal(root.line.message)
    named = {
        k: v
        for k, v in (root.rule.regex.search(root.line.message) or _NO_MATCH).groupdict().items()
        if v is not None
    }
    if named.get("rank", named.get("rank2")) is not None:  # the rule names the culprit rank
        rank = int(named.get("rank") or named["rank2"])
        pid = int(named["pid"]) if "pid" in named else None

    def fill(message: str) -> None:
        nonlocal pid, signal
        p, s = _pid_signal(message)
        pid, signal = pid or p, signal or s

    for f in findings:
        if pid is not None and signal is not None:
            break
        if f.line.source == root.line.source and f.rule.failure_class is root.rule.failure_class:
            fill(f.line.message)
    if rank is None and pid is not None:
        names_pid = re.compile(rf"\b(?:pid:? |PID |pid=){pid}\b")
        rank = next(
            (ln.rank for ln in lines if ln.rank is not None and names_pid.search(ln.message)), None
        )
    if rank is None:
        killed = next((f for f in findings if f.rule.name in _KILL_RULES), None)
        if killed is not None:
            rank = killed.line.rank
            fill(killed.line.message)
    if rank is not None:
        for ln in lines:
            if pid is not None and signal is not None:
                break
            if ln.rank == rank and _EXIT_REPORT.search(ln.message):
                fill(ln.message)
    return rank, pid, signal


def split_attempts(lines: Sequence[LogLine]) -> list[int]:
    """Return the attempt index of each line (lines in time order, as `collect_evidence_lines`).

    torch elastic reports each failed worker group with an error block (`failed (exitcode: N)
    local_rank: R (pid: P) of fn: ...` and the traceback it logs with the same time stamp); with
    `max_restarts` the group restarts after it. A line belongs to the attempt after the last
    block that ended before it; the last block closes the last attempt.
    """
    ends: list[int] = []
    n = 0
    while n < len(lines):
        rule = match_line(lines[n])
        if rule is not None and rule.ends_attempt:
            first, end = lines[n], n
            while (
                end + 1 < len(lines)
                and lines[end + 1].source == first.source
                and lines[end + 1].time == first.time
            ):
                end += 1
            ends.append(end)
            n = end + 1
            continue
        n += 1
    last = max(len(ends) - 1, 0)
    attempt, out = 0, []
    for n in range(len(lines)):
        out.append(min(attempt, last))
        while attempt < len(ends) and ends[attempt] <= n:
            attempt += 1
    return out


def classify(evidence: Evidence) -> Verdict:
    """Classify the failure of the last attempt in `evidence` (see `classify_attempts`).

    Args:
        evidence: logs, exit codes and pod status (see `load_evidence`).

    Returns:
        The verdict; class UNKNOWN with confidence 0 and no root when nothing matched.
    """
    return classify_attempts(evidence)[-1]


def classify_attempts(evidence: Evidence) -> list[Verdict]:
    """Classify each attempt of the worker group found in `evidence`, oldest first.

    One log of an elastic launch with `max_restarts` holds every attempt; each failed attempt
    gets its own verdict (for the restart policy's history); exit codes and pod status belong
    to the last one. Per attempt:

    1. Read every evidence line (logs, exit codes, pod status), ordered by time where known.
    2. Each line is claimed by the first rule (table order) whose pattern it contains.
    3. Root candidates are lines claimed by `root` rules. The root is the strongest candidate,
       the earliest among equals: a specific report (an Xid, an OOM report, a dataset error)
       beats a generic exception, and the first rank to fail beats the ranks that failed
       because of it. A root of class `unknown` (a bare SIGKILL) takes the class of a
       `confirmation` present in the evidence (the kernel's oom-kill lines), never a guess.
    4. With no root, the strongest `cascade` stands in (an NCCL watchdog timeout alone ->
       communication), with confidence capped at `CASCADE_ONLY_CONFIDENCE`: the cause is
       elsewhere (another node's log, a rank that hung).
    5. Confidence starts at the root's strength, rises with each confirming rule
       (1 - (1 - c) / 2 per rule) and drops by `AMBIGUITY_FACTOR` when a root of another known
       class is nearly as strong.
    """
    lines, notes = collect_evidence_lines(evidence)
    index = split_attempts(lines)
    structured = {"exit_codes", "pod_status"}
    last = max(index, default=0)
    groups: list[list[LogLine]] = [[] for _ in range(last + 1)]
    for line, attempt in zip(lines, index, strict=True):
        groups[last if line.source in structured else attempt].append(line)
    return [
        dataclasses.replace(classify_lines(group), attempt=n, notes=notes)
        for n, group in enumerate(groups)
    ]


def classify_lines(lines: Sequence[LogLine]) -> Verdict:
    """Classify one attempt from its evidence lines (time order)."""
    findings = [
        Finding(line, rule)
        for line in lines
        if not line.is_code
        if (rule := match_line(line)) is not None
    ]
    order = {id(f): n for n, f in enumerate(findings)}
    roots = [f for f in findings if f.rule.role is Role.ROOT]
    cascades = [f for f in findings if f.rule.role is Role.CASCADE]
    confirmations = [f for f in findings if f.rule.role is Role.CONFIRMATION]

    def strongest(candidates: list[Finding]) -> Finding:
        return min(candidates, key=lambda f: (-f.rule.strength, order[id(f)]))

    from_cascades = False
    if roots:
        chosen = strongest(roots)
    elif cascades:
        chosen, from_cascades = strongest(cascades), True
    else:
        return Verdict(
            failure_class=FailureClass.UNKNOWN,
            confidence=0.0,
            action=CLASS_INFO[FailureClass.UNKNOWN].action,
            fingerprint=fingerprint(None, None),
            confirmations=tuple(confirmations),
        )

    klass, confidence = chosen.rule.failure_class, chosen.rule.strength
    if klass is FailureClass.UNKNOWN and confirmations:
        best = max(confirmations, key=lambda f: f.rule.strength)
        klass, confidence = best.rule.failure_class, max(confidence, 0.8 * best.rule.strength)
    supporting = {f.rule.name for f in confirmations if f.rule.failure_class is klass}
    for _ in supporting:
        confidence = 1.0 - (1.0 - confidence) / 2.0
    rivals = [
        f
        for f in roots
        if f.rule.failure_class not in (klass, FailureClass.UNKNOWN)
        and f.rule.strength >= chosen.rule.strength - AMBIGUITY_MARGIN
    ]
    if rivals:
        confidence *= AMBIGUITY_FACTOR
    if from_cascades:
        confidence = min(confidence, CASCADE_ONLY_CONFIDENCE)

    same = normalise_line(chosen.line.message)
    root = [chosen] + (
        []
        if from_cascades
        else [
            f
            for f in roots
            if f.rule is chosen.rule and f is not chosen and normalise_line(f.line.message) == same
        ][: MAX_ROOT_LINES - 1]
    )
    root_ids = {id(f) for f in root}
    rank, pid, signal = _rank_pid_signal(chosen, findings, lines)
    action = (
        chosen.rule.action
        if chosen.rule.failure_class is klass and chosen.rule.action
        else CLASS_INFO[klass].action
    )
    return Verdict(
        failure_class=klass,
        confidence=round(confidence, 3),
        root=tuple(root),
        cascades=tuple(f for f in cascades if id(f) not in root_ids),
        confirmations=tuple(confirmations),
        other_roots=tuple(f for f in roots if id(f) not in root_ids),
        rank=rank,
        pid=pid,
        signal=signal,
        action=action,
        fingerprint=fingerprint(klass, chosen.rule.name, chosen.line.message),
        from_cascades_only=from_cascades,
    )


def classify_text(text: str, source: str = "log") -> Verdict:
    """Classify one log given as text (convenience for tests and notebooks)."""
    return classify(Evidence(logs={source: text}))
