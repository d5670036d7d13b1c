"""Failed-run evidence: log lines with rank and time, exit codes and pod status.

Everything the classifier reads becomes a `LogLine`: worker logs (torchrun's `[rank3]:`
prefixes, `srun --label` `3:` prefixes, glog `E1201 10:15:32.123456` headers, ISO and syslog
times, `dmesg -T` stamps), torchelastic's `ChildFailedError` summary (each `[i]:` entry is
attributed to its `rank :` and `time :` fields), torchelastic `error.json` files, per-rank
exit codes and a Kubernetes pod status. Exit codes and pod status are rendered as one line
each, in the words torch and the kubelet use, so that one rule table covers logs and
structured evidence alike.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = [
    "Evidence",
    "LogLine",
    "ProcessExit",
    "load_evidence",
    "parse_log",
    "read_evidence_lines",
    "save_evidence",
]

#: Log file suffixes read from a folder (plus torchelastic's `error.json`).
LOG_SUFFIXES = (".log", ".txt", ".out", ".err")
POD_STATUS_FILE = "pod_status.json"
EXIT_CODES_FILE = "exit_codes.json"

_RANK_PREFIX = re.compile(r"^(?:\[(?:rank|default)(?P<a>\d+)\]:|(?P<b>\d{1,5}): )\s?")
_RANK_IN_MESSAGE = re.compile(r"\[(?:PG [^\]]*?)?Rank (\d+)\]|\brank(\d+)\]|\brank (\d+)\b")
_RANK_IN_PATH = re.compile(r"(?:^|[/_.-])rank[-_]?(\d+)(?:[/_.-]|$)|attempt_\d+/(\d+)/")
_ISO_TIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})[T _](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?")
_GLOG_TIME = re.compile(r"^\[?[IWEF](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})\.(\d{1,9})")
_SYSLOG_TIME = re.compile(
    r"^\[?(?:[A-Z][a-z]{2} )?([A-Z][a-z]{2}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2})(?: (\d{4}))?\]?"
)
_MONTHS = {
    m: i
    for i, m in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}
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

    logs: Mapping[str, str] = field(default_factory=dict)
    """Log source name -> full text."""
    exits: Sequence[ProcessExit] = ()
    """Per-worker exit codes (e.g. from torchelastic's ChildFailedError.failures)."""
    pod_status: Mapping[str, Any] | None = None
    """Kubernetes Pod or Pod `status` object (reason, conditions, containerStatuses)."""


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
        One LogLine per non-empty line, in file order.
    """
    path_rank = _rank_from_path(source)
    lines: list[LogLine] = []
    last_time: dict[int | None, datetime] = {}
    after_frame: dict[int | None, int | None] = {}  # indent of a preceding `File` line
    for lineno, raw in enumerate(text.splitlines(), 1):
        raw = raw.rstrip()
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
        else:
            time = last_time.get(rank, last_time.get(None))
        body = _GLOG_HEADER.sub("", message, count=1)  # torchelastic logs tracebacks via glog
        indent = len(body) - len(body.lstrip())
        frame_indent = after_frame.get(rank)
        is_code = (frame_indent is not None and indent > frame_indent) or bool(
            _CPP_FRAME.match(body)
        )
        after_frame[rank] = indent if _TRACEBACK_FRAME.match(body) else None
        lines.append(LogLine(source, lineno, raw, message, rank, time, is_code=is_code))
    # lines before the first time stamp of the file take the next one (keeps file order)
    next_time = None
    for k in range(len(lines) - 1, -1, -1):
        if lines[k].time is None and next_time is not None:
            lines[k] = replace(lines[k], time=next_time)
        next_time = lines[k].time or next_time
    return _attribute_summary_entries(lines, year)


def _attribute_summary_entries(lines: list[LogLine], year: int) -> list[LogLine]:
    """Give each line of a ChildFailedError entry (`[i]:` ... ) its `rank :` and `time :`."""
    out = list(lines)
    in_first = False
    i = 0
    while i < len(out):
        msg = out[i].message
        if _FIRST_OBSERVED in msg:
            in_first = True
        elif _SUMMARY_BORDER.match(msg) and msg.strip().startswith("="):
            in_first = False
        if not _SUMMARY_ENTRY.match(msg):
            i += 1
            continue
        j = i + 1
        while j < len(out) and not (
            _SUMMARY_ENTRY.match(out[j].message)
            or _SUMMARY_BORDER.match(out[j].message)
            or _FIRST_OBSERVED in out[j].message
        ):
            j += 1
        rank, time = None, None
        for line in out[i:j]:
            if m := _SUMMARY_RANK.match(line.message):
                rank = int(m.group(1))
            elif m := _SUMMARY_TIME.match(line.message):
                time = parse_time(m.group(1), year)
        for k in range(i, j):
            out[k] = replace(
                out[k],
                rank=rank if rank is not None else out[k].rank,
                time=time or out[k].time,
                first_observed=in_first,
            )
        i = j
    return out


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


def pod_status_lines(pod: Mapping[str, Any], year: int = 1970) -> list[LogLine]:
    """Render a Kubernetes Pod (or its `status`) as lines: pod reason, conditions, containers.

    Lines: `pod status: reason=Evicted message=...`, `pod condition DisruptionTarget:
    reason=PreemptionByScheduler message=...`, `container pytorch terminated: reason=OOMKilled
    exitCode=137 signal=0 message=...` (also for `lastState`, i.e. an earlier restart).
    """
    status = pod.get("status", pod)
    texts: list[tuple[str, datetime | None]] = []
    if status.get("reason") or status.get("message"):
        texts.append(
            (
                f"pod status: phase={status.get('phase', '')} reason={status.get('reason', '')}"
                f" message={status.get('message', '')}",
                None,
            )
        )
    for cond in status.get("conditions") or ():
        if cond.get("reason") and str(cond.get("status", "True")) == "True":
            texts.append(
                (
                    f"pod condition {cond.get('type')}: reason={cond.get('reason')} "
                    f"message={cond.get('message', '')}",
                    parse_time(str(cond.get("lastTransitionTime", "")), year),
                )
            )
    for cs in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
        for key in ("lastState", "state"):
            term = (cs.get(key) or {}).get("terminated")
            if term:
                texts.append(
                    (
                        f"container {cs.get('name')} terminated: reason={term.get('reason', '')} "
                        f"exitCode={term.get('exitCode', '')} signal={term.get('signal', 0)} "
                        f"message={term.get('message', '')}",
                        parse_time(str(term.get("finishedAt", "")), year),
                    )
                )
    return [LogLine("pod_status", n, t, t, None, time) for n, (t, time) in enumerate(texts, 1)]


def _evidence_year(evidence: Evidence) -> int:
    for text in evidence.logs.values():
        if m := _ISO_TIME.search(text):
            return int(m.group(1))
    return 1970


def read_evidence_lines(evidence: Evidence) -> list[LogLine]:
    """Return every line of `evidence`, ordered by time where known (file order otherwise).

    Lines without any time (no stamp in their stream so far) keep their place relative to
    their neighbours: the sort key of a line is the last known time of its source.
    """
    year = _evidence_year(evidence)
    lines: list[LogLine] = []
    for source in sorted(evidence.logs):
        lines.extend(parse_log(evidence.logs[source], source, year=year))
    lines.extend(exit_lines(evidence.exits))
    if evidence.pod_status:
        lines.extend(pod_status_lines(evidence.pod_status, year))
    keyed = []
    for seq, line in enumerate(lines):
        keyed.append(((line.time or datetime.max), seq, line))
    keyed.sort(key=lambda k: (k[0], k[1]))
    return [k[2] for k in keyed]


def _error_json_text(path: Path) -> str:
    """Return the message and traceback of a torchelastic `error.json` (ErrorHandler format)."""
    data = json.loads(path.read_text())
    message = data.get("message", "")
    if isinstance(message, dict):
        extra = message.get("extraInfo", {})
        body = extra.get("py_callstack") or message.get("message", "")
        ts = extra.get("timestamp")
        if ts:
            stamp = datetime.fromtimestamp(int(ts)).isoformat(sep=" ")
            body = "\n".join(f"{stamp} {line}" for line in str(body).splitlines())
        return str(body)
    return str(message)


def load_evidence(path: str | Path) -> Evidence:
    """Read the evidence of one failed attempt from a log file or a folder.

    A folder contributes every `*.log`/`*.txt`/`*.out`/`*.err` file (recursively), torchelastic
    `error.json` files, `pod_status.json` (a Pod or Pod status) and `exit_codes.json`
    (`[{"rank": 1, "exitcode": -9, "pid": 4321}, ...]`). When it holds torchelastic
    `attempt_N/` folders (a `log_dir`), only the newest attempt is read.

    Raises:
        FileNotFoundError: `path` does not exist.
        ValueError: a JSON file is malformed (names the file), or a folder holds no evidence.
    """
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"no log file or folder at {root}")
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
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
    logs: dict[str, str] = {}
    exits: list[ProcessExit] = []
    pod_status = None
    for p in files:
        name = p.name if p == root else str(p.relative_to(root))
        try:
            if p.name == POD_STATUS_FILE:
                pod_status = json.loads(p.read_text())
            elif p.name == EXIT_CODES_FILE:
                exits.extend(
                    ProcessExit(int(e["rank"]), int(e["exitcode"]), e.get("pid"))
                    for e in json.loads(p.read_text())
                )
            elif p.name == "error.json":
                logs[name] = _error_json_text(p)
            elif p == root or p.suffix in LOG_SUFFIXES:
                logs[name] = p.read_text(errors="replace")
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(
                f"{p}: not a valid {p.name} ({exc}); see platform_lib/triage/README.md"
            ) from exc
    if not (logs or exits or pod_status):
        raise ValueError(
            f"{root}: no evidence: expected log files ({', '.join(LOG_SUFFIXES)}), error.json, "
            f"{EXIT_CODES_FILE} or {POD_STATUS_FILE}"
        )
    return Evidence(logs=logs, exits=tuple(exits), pod_status=pod_status)


def save_evidence(evidence: Evidence, folder: str | Path) -> Path:
    """Write `evidence` as a folder that `load_evidence` reads back (for MLflow artifacts).

    Logs keep their relative names (with `/` kept as subfolders, `..` refused); exits go to
    `exit_codes.json`, the pod status to `pod_status.json`.

    Raises:
        ValueError: a log name would escape `folder`.
    """
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    for name, text in evidence.logs.items():
        rel = Path(name if Path(name).suffix in LOG_SUFFIXES else f"{name}.log")
        if rel.is_absolute() or ".." in rel.parts:
            raise ValueError(f"log name {name!r} would be written outside {root}")
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
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
