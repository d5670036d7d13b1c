"""Failed-run evidence: log lines with rank and time, exit codes and pod status.

Everything the classifier reads becomes a `LogLine`: worker logs (torchrun, `srun --label`,
glog, ISO, syslog and `dmesg -T` forms), torchelastic's `ChildFailedError` summary and
`error.json` files, per-rank exit codes and a Kubernetes pod status (rendered as one line
each, in torch's and the kubelet's words, so one rule table covers all). Log files are
streamed through `clean_line`, keeping at most the first and last `LINES_KEPT_PER_RULE` lines
per rule and log; what is dropped is counted in the verdict's notes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from platform_lib.errors import UserError
from platform_lib.fsguard import open_regular
from platform_lib.triage.jsonfiles import (
    MAX_TEXT_CHARS,
    UnreadableJSONError,
    as_list,
    as_mapping,
    as_text,
    read_json,
)
from platform_lib.triage.rules import rule_matcher

__all__ = [
    "Evidence",
    "LogFile",
    "LogLine",
    "ProcessExit",
    "clean_line",
    "collect_evidence_lines",
    "load_evidence",
    "parse_log",
    "save_evidence",
]

#: Log file suffixes read from a folder (plus torchelastic's `error.json`).
LOG_SUFFIXES = (".log", ".txt", ".out", ".err")
POD_STATUS_FILE = "pod_status.json"
EXIT_CODES_FILE = "exit_codes.json"
#: Bytes of one log line read; the rest of a longer line is skipped (counted in the notes).
MAX_LINE_BYTES = 16 * 1024
#: Lines kept per rule (and of pid/exit reports) per log: the first and the last this many.
LINES_KEPT_PER_RULE = 64
#: Lines kept of one torchelastic summary entry (a real one has about 8).
MAX_SUMMARY_ENTRY_LINES = 256

#: ANSI CSI (colours, cursor), OSC (titles, links; ended by BEL or ST), charset selections
#: (`ESC ( B`) and other two-byte escapes (ECMA-48).
_ANSI = re.compile(
    r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[ -/]+[0-~]|[0-~])"
    r"|\x9b[0-?]*[ -/]*[@-~]"
)
#: Every other C0 and C1 control but tab (a reset, a bell, a backspace that overprints text):
#: a verdict's quoted line is printed to a terminal, so none may reach it.
_CONTROLS = dict.fromkeys([*range(0x00, 0x09), *range(0x0A, 0x20), *range(0x7F, 0xA0)])
#: stern's `<pod> <container> ` prefix, each name coloured (a pod name holds a `-`).
_STERN_PREFIX = re.compile(
    r"^\x1b\[[0-9;]*m[a-z0-9][a-z0-9.]*-[-a-z0-9.]*\x1b\[0?m "
    r"(?:\x1b\[[0-9;]*m[a-z0-9][-a-z0-9.]*\x1b\[0?m )?"
)
#: `kubectl logs --prefix`: `[pod/<pod>/<container>] `.
_KUBECTL_PREFIX = re.compile(r"^\[pod/[^\s/\]]+/[^\s\]]+\] ")
#: Lines the classifier reads for a root's pid and signal (`classifier._rank_pid_signal`).
_PID_OR_EXIT_REPORT = re.compile(r"exitcode\s*:|received by PID|\b(?:pid:? |PID |pid=)\d+\b")

_RANK_PREFIX = re.compile(r"^(?:\[(?:rank|default)(?P<a>\d+)\]:|(?P<b>\d{1,5}): )\s?")
_RANK_IN_MESSAGE = re.compile(r"\[(?:PG [^\]]*?)?Rank (\d+)\]|\brank(\d+)\]|\brank (\d+)\b")
_RANK_IN_PATH = re.compile(r"(?:^|[/_.-])rank[-_]?(\d+)(?:[/_.-]|$)|attempt_\d+/(\d+)/")
_ISO_TIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})[T _](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?")
_GLOG_TIME = re.compile(r"^\[?[IWEF](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})\.(\d{1,9})")
_SYSLOG_TIME = re.compile(
    r"^\[?(?:[A-Z][a-z]{2} )?([A-Z][a-z]{2}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2})(?: (\d{4}))?\]?"
)
_MONTHS = {m: i for i, m in enumerate("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split(), 1)}
_SUMMARY_ENTRY = re.compile(r"^\s*\[(\d+)\]:\s*$")
_SUMMARY_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)")
_SUMMARY_TIME = re.compile(r"^\s*time\s*:\s*(\S+)")
_SUMMARY_BORDER = re.compile(r"^\s*(?:={8,}|-{8,})\s*$")
_FIRST_OBSERVED = "Root Cause (first observed failure):"
_GLOG_HEADER = re.compile(r"^\[?[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d+ +\d* *[^\]\s]*\] ?")
_CPP_FRAME = re.compile(r"^\s*(?:frame #\d+: |<omitting python frames>)")  # c10 backtraces
_TRACEBACK_FRAME = re.compile(r'^\s*File "[^"]+", line \d+, in ')


@dataclass(frozen=True)
class LogLine:
    """One line of evidence.

    Attributes:
        source: where it came from: a file path relative to the evidence root, or
            `exit_codes` / `pod_status` for structured evidence.
        lineno: 1-based line number in `source`.
        text: the line as written (trailing newline stripped); what a report quotes.
        message: `text` without the rank prefix; what the rules match.
        rank: global rank if the line names one (prefix, `[Rank N]`, summary entry, file name).
        time: wall-clock time of the line (its own, else the last one of its rank's stream);
            naive, in the writer's clock; year-less formats take the evidence's year.
        first_observed: the line is in torchelastic's "Root Cause (first observed failure)"
            section (the first process to exit, not necessarily the cause).
        is_code: the line is source code quoted by a Python traceback (indented below a
            `File "...", line N, in f` line) or a frame of a C++ backtrace (`frame #3: ...`);
            rules never match it.
    """

    source: str
    lineno: int
    text: str
    message: str
    rank: int | None = None
    time: datetime | None = None
    first_observed: bool = False
    is_code: bool = False

    @property
    def where(self) -> str:
        """`source:lineno` for reports."""
        return f"{self.source}:{self.lineno}"


@dataclass(frozen=True)
class ProcessExit:
    """How one worker process ended (torchelastic convention: exitcode -N = killed by signal N)."""

    rank: int
    """Global rank of the worker."""
    exitcode: int
    """Exit status; negative = killed by that signal; 128+N from a shell = signal N."""
    pid: int | None = None
    """Process id, when known."""

    @property
    def signal(self) -> int | None:
        """Signal number that ended the process, or None for a normal exit."""
        if self.exitcode < 0:
            return -self.exitcode
        if 128 < self.exitcode < 128 + 65:
            return self.exitcode - 128
        return None


@dataclass(frozen=True)
class Evidence:
    """Everything known about one failed attempt."""

    logs: Mapping[str, str | LogFile] = field(default_factory=dict)
    """Log source name -> full text, or the file it is streamed from."""
    exits: Sequence[ProcessExit] = ()
    """Per-worker exit codes (e.g. from torchelastic's ChildFailedError.failures)."""
    pod_status: Mapping[str, Any] | None = None
    """Kubernetes Pod or Pod `status` object (reason, conditions, containerStatuses)."""
    notes: tuple[str, ...] = ()
    """What was skipped while reading the evidence (odd files, unknown shapes), for the verdict."""


@dataclass(frozen=True)
class LogFile:
    """A log on disk, streamed line by line when classified (never read whole)."""

    path: Path

    def lines(self, stats: Counter[str] | None = None) -> Iterator[str]:
        """Yield the lines of the file (UTF-8, bad bytes replaced), split as `str.splitlines`.

        A line longer than `MAX_LINE_BYTES` is cut there (counted in `stats["cut lines"]`).

        Raises:
            NotRegularFileError: the path is a FIFO, device, socket or directory.
            OSError: it cannot be opened.
        """
        with os.fdopen(open_regular(self.path), "rb") as handle:
            while chunk := handle.readline(MAX_LINE_BYTES):
                if len(chunk) == MAX_LINE_BYTES and not chunk.endswith(b"\n"):
                    while (rest := handle.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
                        pass
                    if stats is not None:
                        stats["cut lines"] += 1
                yield from chunk.decode("utf-8", errors="replace").splitlines()


def clean_line(raw: str) -> str:
    """Return a log line as its program wrote it: no ANSI escapes, no CR, no collector prefix.

    Removes ANSI CSI sequences (7- and 8-bit: colours, cursor moves), OSC sequences (titles,
    hyperlinks) and other two-byte escapes (a terminal reset), every other C0/C1 control but
    tab (CR, backspace, bell), and the pod prefix that `kubectl logs
    --prefix` (`[pod/<pod>/<container>] `) or stern (coloured `<pod> <container> `) adds.
    This is the one place lines are cleaned; every rule sees cleaned lines only.
    """
    if "\x1b" in raw or "\x9b" in raw:
        raw = _ANSI.sub("", _STERN_PREFIX.sub("", raw, count=1))
    if not raw.isprintable():  # CR, backspaces, bells, C1 controls (tab stays)
        raw = raw.translate(_CONTROLS)
    if raw.startswith("[pod/"):
        raw = _KUBECTL_PREFIX.sub("", raw, count=1)
    return raw


def _log_lines(log: str | LogFile, stats: Counter[str]) -> Iterator[str]:
    return log.lines(stats) if isinstance(log, LogFile) else iter(log.splitlines())


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _fraction(digits: str | None) -> int:
    return int((digits or "0")[:6].ljust(6, "0"))


def parse_time(message: str, year: int) -> datetime | None:
    """Return the time stamped at the start of `message`, or None.

    Formats: ISO 8601 (`2026-12-01T10:15:32.123Z`, `2026-12-01 10:15:32,123`,
    torchelastic's `2026-12-01_10:15:32`) in the first 40 characters; glog (`E1201
    10:15:32.123456789`, torch's C++ and torchelastic's Python logs); syslog / journald
    (`Dec  1 10:15:32`) and `dmesg -T` (`[Tue Dec  1 10:15:32 2026]`). Year-less formats use
    `year`.
    """
    if m := _GLOG_TIME.match(message):
        mo, d, hh, mm, ss, frac = m.groups()
        return _safe_datetime(year, int(mo), int(d), int(hh), int(mm), int(ss), _fraction(frac))
    if m := _SYSLOG_TIME.match(message):
        mon, d, hh, mm, ss, y = m.groups()
        if mon in _MONTHS:
            return _safe_datetime(
                int(y) if y else year, _MONTHS[mon], int(d), int(hh), int(mm), int(ss), 0
            )
    if (m := _ISO_TIME.search(message[:40])) is not None:
        y, mo, d, hh, mm, ss, frac = m.groups()
        return _safe_datetime(int(y), int(mo), int(d), int(hh), int(mm), int(ss), _fraction(frac))
    return None


def _safe_datetime(*parts: int) -> datetime | None:
    try:
        return datetime(*parts)  # type: ignore[arg-type]  # (year, month, day, h, m, s[, us])
    except ValueError:
        return None


def _rank_from_path(source: str) -> int | None:
    m = _RANK_IN_PATH.search(source.replace("\\", "/"))
    if not m:
        return None
    return int(m.group(1) or m.group(2))


def parse_log(text: str, source: str, *, year: int = 1970) -> list[LogLine]:
    """Split a log into `LogLine`s with rank and time attributed.

    Args:
        text: the log's full text.
        source: its name in reports (e.g. `attempt_0/1/stderr.log`); a `rankN` or
            torchelastic `attempt_K/N/` path gives the rank of unprefixed lines.
        year: year for time formats without one (glog, syslog).

    Returns:
        One LogLine per non-empty line, in file order (each cleaned by `clean_line`).
    """
    return _scan_log(text.splitlines(), source, year, None, Counter())


class _Keeper:
    """The lines kept of one log: all, or the first and last `cap` per key, in file order."""

    def __init__(self, cap: int | None, stats: Counter[str]) -> None:
        self.cap, self.stats = cap, stats
        self.first: dict[str, list[LogLine]] = {}
        self.last: dict[str, deque[LogLine]] = {}

    def add(self, key: str, line: LogLine) -> None:
        first = self.first.setdefault(key, [])
        if self.cap is None or len(first) < self.cap:
            first.append(line)
            return
        last = self.last.setdefault(key, deque(maxlen=self.cap))
        if len(last) == self.cap:
            self.stats[f"lines of {key} between the first and last {self.cap}"] += 1
        last.append(line)

    def lines(self) -> list[LogLine]:
        kept = [ln for lines in self.first.values() for ln in lines]
        kept += [ln for lines in self.last.values() for ln in lines]
        return sorted(kept, key=lambda ln: ln.lineno)


@dataclass
class _SummaryEntry:
    """A torchelastic ChildFailedError entry (`[i]:` ...) being read: its `rank :`, `time :`."""

    first_observed: bool
    rank: int | None = None
    time: datetime | None = None
    lines: list[tuple[str, LogLine]] = field(default_factory=list)

    def attributed(self) -> Iterator[tuple[str, LogLine]]:
        for key, ln in self.lines:
            yield (
                key,
                replace(
                    ln,
                    rank=self.rank if self.rank is not None else ln.rank,
                    time=self.time or ln.time,
                    first_observed=self.first_observed,
                ),
            )


def _scan_log(
    raw_lines: Iterable[str],
    source: str,
    year: int,
    keep: Callable[[str, bool], str | None] | None,
    stats: Counter[str],
) -> list[LogLine]:
    """Parse a log's lines in one pass; return the lines `keep` names a key for, in file order.

    `keep(message, is_code)` returns the key a line is kept under (at most the first and last
    `LINES_KEPT_PER_RULE` per key), or None to drop it; `keep=None` keeps every line. Rank,
    time and traceback state follow every line, kept or not, so kept lines are attributed
    exactly as when the whole log is parsed. Lines before the log's first time stamp take it;
    lines of a torchelastic summary entry take its `rank :` and `time :`.
    """
    keeper = _Keeper(None if keep is None else LINES_KEPT_PER_RULE, stats)
    path_rank = _rank_from_path(source)
    last_time: dict[int | None, datetime] = {}
    first_time: datetime | None = None
    after_frame: dict[int | None, int | None] = {}  # indent of a preceding `File` line
    entry: _SummaryEntry | None = None
    in_first = False
    for lineno, text in enumerate(raw_lines, 1):
        raw = clean_line(text).rstrip()
        if not raw.strip():
            continue
        m = _RANK_PREFIX.match(raw)
        if m:
            rank: int | None = int(m.group("a") or m.group("b"))
            message = raw[m.end() :]
        else:
            message = raw
            inner = _RANK_IN_MESSAGE.search(message)
            rank = next((int(g) for g in inner.groups() if g), None) if inner else path_rank
        time = parse_time(message.lstrip(), year)
        if time is not None:
            last_time[rank] = time
            last_time[None] = time
            first_time = first_time or time
        else:
            time = last_time.get(rank, last_time.get(None))
        body = _GLOG_HEADER.sub("", message, count=1)  # torchelastic logs tracebacks via glog
        indent = len(body) - len(body.lstrip())
        frame_indent = after_frame.get(rank)
        is_code = (frame_indent is not None and indent > frame_indent) or bool(
            _CPP_FRAME.match(body)
        )
        after_frame[rank] = indent if _TRACEBACK_FRAME.match(body) else None

        starts_entry = _SUMMARY_ENTRY.match(message) is not None
        border = _SUMMARY_BORDER.match(message) is not None
        observed = _FIRST_OBSERVED in message
        if entry is not None and (starts_entry or border or observed):
            for kept_as, ln in entry.attributed():
                keeper.add(kept_as, ln)
            entry = None
        if entry is None:
            if observed:
                in_first = True
            elif border and message.strip().startswith("="):
                in_first = False
            if starts_entry:
                entry = _SummaryEntry(in_first)
        if entry is not None:
            if m := _SUMMARY_RANK.match(message):
                entry.rank = int(m.group(1))
            elif m := _SUMMARY_TIME.match(message):
                entry.time = parse_time(m.group(1), year)

        key: str | None = "line" if keep is None else keep(message, is_code)
        if key is None:
            continue
        line = LogLine(source, lineno, raw, message, rank, time, is_code=is_code)
        if entry is None:
            keeper.add(key, line)
        elif len(entry.lines) < MAX_SUMMARY_ENTRY_LINES:
            entry.lines.append((key, line))
        else:
            stats[f"lines of a summary entry past {MAX_SUMMARY_ENTRY_LINES}"] += 1
    if entry is not None:
        for kept_as, ln in entry.attributed():
            keeper.add(kept_as, ln)
    return [
        replace(ln, time=first_time) if ln.time is None and first_time is not None else ln
        for ln in keeper.lines()
    ]


def exit_lines(exits: Iterable[ProcessExit]) -> list[LogLine]:
    """Render exit codes as lines in torchelastic's words (`Signal 9 (SIGKILL) received by PID`)."""
    out = []
    for n, e in enumerate(sorted(exits, key=lambda e: e.rank), 1):
        pid = e.pid if e.pid is not None else "?"
        text = f"rank {e.rank} (pid: {pid}) exitcode: {e.exitcode}"
        if (sig := e.signal) is not None:
            text += f": Signal {sig} ({_signal_name(sig)}) received by PID {pid}"
        out.append(LogLine("exit_codes", n, text, text, e.rank))
    return out


def _scalar(value: Any) -> str:
    """A JSON value as the f-string of a scalar would show it; arrays and objects as ``."""
    return "" if isinstance(value, Mapping | list | tuple) else str(value)[:MAX_TEXT_CHARS]


def _fields(obj: Mapping[str, Any], **defaults: Any) -> str:
    """`key=value` of each key of `defaults` in `obj` (its default when absent), space-separated."""
    return " ".join(f"{key}={_scalar(obj.get(key, default))}" for key, default in defaults.items())


def pod_status_lines(
    pod: Mapping[str, Any], year: int = 1970, notes: list[str] | None = None
) -> list[LogLine]:
    """Render a Kubernetes Pod (or its `status`) as lines: pod reason, conditions, containers.

    Lines: `pod status: reason=Evicted message=...`, `pod condition DisruptionTarget:
    reason=PreemptionByScheduler message=...`, `container pytorch terminated: reason=OOMKilled
    exitCode=137 signal=0 message=...` (also for `lastState`, i.e. an earlier restart).
    Parts of another JSON type than the Pod API's are skipped, each with a line in `notes`.
    """
    notes = [] if notes is None else notes
    status = as_mapping(pod)
    status = as_mapping(status.get("status", status)) if status is not None else None
    if status is None:
        notes.append(f"{POD_STATUS_FILE}: not a Pod or Pod status object; skipped")
        return []
    texts: list[tuple[str, datetime | None]] = []
    if status.get("reason") or status.get("message"):
        texts.append((f"pod status: {_fields(status, phase='', reason='', message='')}", None))
    skipped = 0
    for cond in as_list(status.get("conditions")):
        if (cond := as_mapping(cond)) is None:
            skipped += 1
        elif cond.get("reason") and str(cond.get("status", "True")) == "True":
            fields = _fields(cond, reason=None, message="")
            text = f"pod condition {_scalar(cond.get('type'))}: {fields}"
            texts.append((text, parse_time(_scalar(cond.get("lastTransitionTime", "")), year)))
    containers = [
        *as_list(status.get("containerStatuses")),
        *as_list(status.get("initContainerStatuses")),
    ]
    for cs in containers:
        if (cs := as_mapping(cs)) is None:
            skipped += 1
            continue
        for key in ("lastState", "state"):
            term = as_mapping((as_mapping(cs.get(key)) or {}).get("terminated"))
            if term:
                fields = _fields(term, reason="", exitCode="", signal=0, message="")
                text = f"container {_scalar(cs.get('name'))} terminated: {fields}"
                texts.append((text, parse_time(_scalar(term.get("finishedAt", "")), year)))
    if skipped:
        notes.append(f"{POD_STATUS_FILE}: {skipped} condition(s)/container(s) not objects; skipped")
    return [LogLine("pod_status", n, t, t, None, time) for n, (t, time) in enumerate(texts, 1)]


def _evidence_year(evidence: Evidence) -> int:
    for log in evidence.logs.values():
        for line in _log_lines(log, Counter()):
            if m := _ISO_TIME.search(clean_line(line)):
                return int(m.group(1))
    return 1970


def _reading_notes(source: str, stats: Counter[str]) -> list[str]:
    return [f"{source}: {n} {what} not read" for what, n in sorted(stats.items())]


def collect_evidence_lines(evidence: Evidence) -> tuple[list[LogLine], tuple[str, ...]]:
    """Return the evidence lines the classifier reads, in time order, and the reading notes.

    Each log is streamed once (twice when it must be searched for the year of year-less time
    stamps); a line is kept when a rule of `RULES` claims it or it names a pid or an exit
    code, at most the first and last `LINES_KEPT_PER_RULE` per rule and log. Lines without
    any time keep their place relative to their neighbours (the sort key of a line is the
    last known time of its source). The notes say what was skipped or not read, and why.

    Raises:
        NotRegularFileError, OSError: a log file cannot be opened.
    """
    year = _evidence_year(evidence)
    matcher = rule_matcher()

    def keep(message: str, is_code: bool) -> str | None:
        rule = None if is_code else matcher.match(message)
        if rule is not None:
            return rule.name
        return "pid/exit reports" if _PID_OR_EXIT_REPORT.search(message) else None

    notes = list(evidence.notes)
    lines: list[LogLine] = []
    for source in sorted(evidence.logs):
        stats: Counter[str] = Counter()
        lines.extend(_scan_log(_log_lines(evidence.logs[source], stats), source, year, keep, stats))
        notes.extend(_reading_notes(source, stats))
    lines.extend(exit_lines(evidence.exits))
    if evidence.pod_status:
        lines.extend(pod_status_lines(evidence.pod_status, year, notes))
    keyed = [((line.time or datetime.max), seq, line) for seq, line in enumerate(lines)]
    keyed.sort(key=lambda k: (k[0], k[1]))
    return [k[2] for k in keyed], tuple(notes)


def _error_json_text(data: Any, name: str, notes: list[str]) -> str | None:
    """Return the message and traceback of a torchelastic `error.json` (ErrorHandler format)."""
    if (data := as_mapping(data)) is None:
        notes.append(f"{name}: not a torchelastic error object; skipped")
        return None
    message = data.get("message", "")
    if isinstance(message, Mapping):
        extra = as_mapping(message.get("extraInfo")) or {}
        body = as_text(extra.get("py_callstack")) or as_text(message.get("message", ""))
        stamp = _timestamp(extra.get("timestamp"))
        if stamp is not None:
            body = "\n".join(f"{stamp} {line}" for line in body.splitlines())
        return body
    return _scalar(message)


def _timestamp(value: Any) -> str | None:
    """A Unix time stamp (seconds, int or digit string) as local ISO time; None if not one."""
    try:
        return datetime.fromtimestamp(int(value)).isoformat(sep=" ") if value else None
    except (TypeError, ValueError, OverflowError, OSError):
        return None


def _exit_records(data: Any, path: Path, notes: list[str]) -> list[ProcessExit]:
    """`exit_codes.json` entries as exits; entries that are not objects are skipped (noted).

    Raises:
        UserError: an entry object lacks `rank` or `exitcode` or holds a non-integer there.
    """
    if not isinstance(data, list):
        notes.append(f"{path.name}: not a list of exit records; skipped")
        return []
    exits, skipped = [], 0
    for e in data:
        if (e := as_mapping(e)) is None:
            skipped += 1
            continue
        try:
            rank, exitcode = _integer(e["rank"]), _integer(e["exitcode"])
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise UserError(
                f"not a valid {path.name} entry {json.dumps(e)[:200]} ({exc!r})",
                str(path),
                'write [{"rank": 1, "exitcode": -9, "pid": 4321}, ...]; see '
                "platform_lib/triage/README.md",
            ) from exc
        pid = e.get("pid")
        exits.append(ProcessExit(rank, exitcode, pid if type(pid) is int else None))
    if skipped:
        notes.append(f"{path.name}: {skipped} entr(y/ies) not objects; skipped")
    return exits


def _integer(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TypeError(f"expected an integer, got {type(value).__name__}")
    return int(value)


def load_evidence(path: str | Path) -> Evidence:
    """Read the evidence of one failed attempt from a log file or a folder.

    A folder contributes every `*.log`/`*.txt`/`*.out`/`*.err` file (recursively), torchelastic
    `error.json` files, `pod_status.json` (a Pod or Pod status) and `exit_codes.json`
    (`[{"rank": 1, "exitcode": -9, "pid": 4321}, ...]`). When it holds torchelastic
    `attempt_N/` folders (a `log_dir`), only the newest attempt is read. Logs are not read
    here: they are streamed when classified (`LogFile`). JSON files are read bounded
    (`jsonfiles.read_json`); one that cannot be used, or holds another JSON type than
    expected, is skipped with a note in `Evidence.notes`.

    Raises:
        FileNotFoundError: `path` does not exist.
        NotRegularFileError: `path` is a FIFO, device or socket.
        UserError (a ValueError): an exit record lacks its rank or exit code (names the
            file), or a folder holds no evidence.
    """
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"no log file or folder at {root}")
    if root.is_dir():
        files = sorted(p for p in root.rglob("*") if not p.is_dir())
    else:
        os.close(open_regular(root))  # a FIFO or device fails here, in one line
        files = [root]
    attempts = sorted(
        {
            int(m.group(1))
            for p in files
            if (m := re.search(r"attempt_(\d+)", str(p.relative_to(root))))
        }
    )
    if attempts:
        newest = f"attempt_{attempts[-1]}"
        files = [
            p
            for p in files
            if "attempt_" not in str(p.relative_to(root)) or newest in p.relative_to(root).parts
        ]
    logs: dict[str, str | LogFile] = {}
    exits: list[ProcessExit] = []
    pod_status = None
    notes: list[str] = []
    for p in files:
        name = p.name if p == root else str(p.relative_to(root))
        is_json = p.name in (POD_STATUS_FILE, EXIT_CODES_FILE, "error.json")
        if not (is_json or p == root or p.suffix in LOG_SUFFIXES):
            continue
        if p != root and not p.is_file():
            notes.append(f"{name}: not a regular file (a FIFO, device or socket); skipped")
            continue
        if not is_json:
            logs[name] = LogFile(p)
            continue
        try:
            data = read_json(p)
        except UnreadableJSONError as exc:
            notes.append(f"{name}: {exc}; skipped")
            continue
        if p.name == POD_STATUS_FILE:
            if as_mapping(data) is None:
                notes.append(f"{name}: not a Pod or Pod status object; skipped")
            else:
                pod_status = data
        elif p.name == EXIT_CODES_FILE:
            exits.extend(_exit_records(data, p, notes))
        elif (text := _error_json_text(data, name, notes)) is not None:
            logs[name] = text
    if not (logs or exits or pod_status):
        raise UserError(
            "no evidence: expected log files ("
            + ", ".join(LOG_SUFFIXES)
            + f"), error.json, {EXIT_CODES_FILE} or {POD_STATUS_FILE}"
            + (f"; {'; '.join(notes)}" if notes else ""),
            str(root),
            "pass the run's log file or log folder",
        )
    return Evidence(logs=logs, exits=tuple(exits), pod_status=pod_status, notes=tuple(notes))


def save_evidence(evidence: Evidence, folder: str | Path) -> Path:
    """Write `evidence` as a folder that `load_evidence` reads back (for MLflow artifacts).

    Logs keep their relative names (with `/` kept as subfolders, `..` refused); a `LogFile`
    is copied byte for byte; exits go to `exit_codes.json`, the pod status to
    `pod_status.json`.

    Raises:
        ValueError: a log name would escape `folder`.
    """
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    for name, log in evidence.logs.items():
        rel = Path(name if Path(name).suffix in LOG_SUFFIXES else f"{name}.log")
        if rel.is_absolute() or ".." in rel.parts:
            raise ValueError(f"log name {name!r} would be written outside {root}")
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(log, LogFile):
            with os.fdopen(open_regular(log.path), "rb") as src, (root / rel).open("wb") as dst:
                shutil.copyfileobj(src, dst)
        else:
            (root / rel).write_text(log)
    if evidence.exits:
        (root / EXIT_CODES_FILE).write_text(
            json.dumps(
                [{"rank": e.rank, "exitcode": e.exitcode, "pid": e.pid} for e in evidence.exits],
                indent=1,
            )
        )
    if evidence.pod_status:
        (root / POD_STATUS_FILE).write_text(json.dumps(evidence.pod_status, indent=1))
    return root
