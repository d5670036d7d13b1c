"""Hung collectives: detect, make every rank dump its Flight Recorder, name the rank that never joined.

The process group's collective timeout detects the hang; the detecting rank
(`HangWatchdog.diagnose`) asks every rank for a dump (Flight Recorder buffer + main-thread
stack) through the job's TCPStore, and `analyze_dumps` (also usable offline) names the ranks
behind the newest collective and those that did not answer; see docs/faults.md, "Hangs".
torch's own analyser (`torch.distributed.flight_recorder`, torch 2.13) fails on gloo dumps
(`build_db`: KeyError, gloo's `pg_config` names its group "") and cannot name the rank behind
when another rank's dump is missing, so `analyze_dumps` stays.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import sys
import threading
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import torch.distributed as dist
from torch._C._distributed_c10d import _dump_fr_trace_json  # type: ignore[attr-defined]  # private, no stub

from platform_lib.telemetry.publish import write_json_atomic

__all__ = [
    "CollectiveHangError",
    "HangWatchdog",
    "analyze_dumps",
    "enable_flight_recorder",
    "is_collective_timeout",
]

_log = logging.getLogger(__name__)

FR_BUFFER_ENTRIES = 2000
_TIMEOUT = re.compile(r"timed out|timeout", re.IGNORECASE)


class CollectiveHangError(RuntimeError):
    """A collective did not complete within the timeout; the message names the rank(s) that never joined."""

    def __init__(self, message: str, report: dict[str, Any]) -> None:
        super().__init__(message)
        self.report = report

    def __reduce__(self) -> Any:
        return type(self), (str(self), self.report)


def enable_flight_recorder(entries: int = FR_BUFFER_ENTRIES) -> None:
    """Turn on torch's Flight Recorder (unless the environment already sizes it).

    Call before creating the process group.
    """
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", str(entries))


def is_collective_timeout(error: BaseException) -> bool:
    """Return True for a backend's collective timeout (gloo "Timed out waiting", NCCL watchdog)."""
    return isinstance(error, RuntimeError) and bool(_TIMEOUT.search(str(error)))


def _main_stack() -> list[str]:
    ident = threading.main_thread().ident
    frame = sys._current_frames().get(ident) if ident is not None else None
    return traceback.format_stack(frame) if frame is not None else []


def dump_rank(rank: int) -> dict[str, Any]:
    """Return this rank's Flight Recorder buffer, main-thread Python stack, pid and host."""
    return {
        "rank": rank,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "time": time.time(),
        "flight_recorder": json.loads(_dump_fr_trace_json(True, False)),
        "stack": _main_stack(),
    }


def analyze_dumps(dumps: dict[int, dict[str, Any]], world_size: int) -> dict[str, Any]:
    """Name the ranks a hung collective waits for, from per-rank dumps (`dump_rank`).

    Args:
        dumps: rank -> its dump; ranks that did not answer are absent.
        world_size: ranks in the job.

    Returns:
        {"never_joined": [rank...], "no_dump": [rank...], "groups": [{"pg", "name",
        "collective", "seq", "enqueued_at", "input_sizes", "entered": [rank...],
        "missing": [rank...]}]}: per process group where ranks disagree, the newest collective
        (Flight Recorder sequence number, profiling name such as "gloo:all_gather", POSIX time
        the first rank that entered it enqueued it, in s) and who entered it.
    """
    groups: list[dict[str, Any]] = []
    pg_ids = sorted(
        {pg for d in dumps.values() for pg in d["flight_recorder"].get("pg_status", {})}
    )
    for pg in pg_ids:
        last = {
            r: int(d["flight_recorder"]["pg_status"][pg]["last_enqueued_collective"])
            for r, d in dumps.items()
            if pg in d["flight_recorder"].get("pg_status", {})
        }
        newest = max(last.values())
        if min(last.values()) == newest:
            continue
        entered = sorted(r for r, seq in last.items() if seq == newest)
        entry: dict[str, Any] = next(
            (
                e
                for e in dumps[entered[0]]["flight_recorder"].get("entries", [])
                if str(e.get("pg_id")) == pg and e.get("collective_seq_id") == newest
            ),
            {},
        )
        groups.append(
            {
                "pg": pg,
                "name": (entry.get("process_group") or ["", ""])[-1],
                "collective": entry.get("profiling_name", "?"),
                "seq": newest,
                "enqueued_at": entry.get("time_created_ns", 0) / 1e9,
                "input_sizes": entry.get("input_sizes"),
                "entered": entered,
                "missing": sorted(r for r, seq in last.items() if seq < newest),
            }
        )
    never_joined = sorted({r for g in groups for r in g["missing"]})
    return {
        "never_joined": never_joined,
        "no_dump": sorted(set(range(world_size)) - set(dumps)),
        "groups": groups,
    }


def _store_client(timeout_s: float) -> dist.Store | None:
    """A TCPStore client of the job's store (torchrun / elastic agent), or None without one."""
    host, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not host or not port:
        return None
    return dist.TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=timeout_s))


class HangWatchdog:
    """Answers dump requests on this rank and, on a collective timeout, diagnoses the hang.

    Args:
        run_dir: the run folder; dumps and the report go to `run_dir/hang/`.
        rank: this process's global rank.
        world_size: ranks in the job.
        timeout_s: the collective timeout (for the messages), in s.

    A world of one rank (or no job store) needs no watchdog: the thread is not started.
    """

    wait_s = 10.0
    """how long `diagnose` waits for the other ranks' dumps, in s"""
    poll_s = 0.5
    """interval of the dump-request poll, in s"""

    def __init__(
        self, run_dir: str | os.PathLike[str], *, rank: int, world_size: int, timeout_s: float
    ) -> None:
        self.dir = Path(run_dir) / "hang"
        self.rank, self.world_size, self.timeout_s = rank, world_size, timeout_s
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        self.prefix = f"drivetrain/hang/{os.environ.get('TORCHELASTIC_RUN_ID', 'run')}/{attempt}/"
        self._stop = threading.Event()
        self._answered = threading.Event()
        self._store = _store_client(max(30.0, self.wait_s)) if world_size > 1 else None
        self._thread: threading.Thread | None = None
        if self._store is not None:
            self._thread = threading.Thread(
                target=self._poll, name="drivetrain-hang-watchdog", daemon=True
            )
            self._thread.start()

    def _poll(self) -> None:
        try:  # started only when the job has a store; a connection of its own (not `_store`)
            store = cast(dist.Store, _store_client(max(30.0, self.wait_s)))
            while not self._stop.wait(self.poll_s):
                if store.check([self.prefix + "request"]):
                    self._answer(store)
                    return
        except (RuntimeError, OSError):  # the job's store went away: the job is ending
            return

    def _answer(self, store: dist.Store) -> None:
        if self._answered.is_set():
            return
        self._answered.set()
        dump = dump_rank(self.rank)
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / f"rank-{self.rank:05d}.json").write_text(json.dumps(dump, indent=1))
        store.set(self.prefix + f"dump/{self.rank}", json.dumps(dump))
        _log.warning(
            "[drivetrain hang] rank %d pid %d: dumped Flight Recorder (%d entries) to %s",
            self.rank,
            os.getpid(),
            len(dump["flight_recorder"].get("entries", [])),
            self.dir,
        )

    def diagnose(self, error: BaseException) -> CollectiveHangError:
        """Collect every rank's dump after collective timeout `error`; return the error to raise.

        Writes `hang/report.json` and returns a CollectiveHangError naming the rank(s) that
        never joined (with pid, host and where their main thread was).
        """
        detected_at = time.time()
        dumps: dict[int, dict[str, Any]] = {}
        if self._store is not None:
            self._store.set(self.prefix + "request", str(self.rank))
            self._answer(self._store)
            keys = [self.prefix + f"dump/{r}" for r in range(self.world_size)]
            deadline = time.monotonic() + self.wait_s
            while time.monotonic() < deadline and not all(self._store.check([k]) for k in keys):
                time.sleep(0.1)
            dumps = {
                r: json.loads(self._store.get(k))
                for r, k in enumerate(keys)
                if self._store.check([k])
            }
        report = analyze_dumps(dumps, self.world_size)
        report.update(
            detected_by=self.rank,
            detected_at=detected_at,
            timeout_s=self.timeout_s,
            error=str(error)[:2000],
        )
        write_json_atomic(self.dir / "report.json", {**report, "dumps": dumps})
        return CollectiveHangError(self._message(report, dumps), report)

    def _message(self, report: dict[str, Any], dumps: dict[int, dict[str, Any]]) -> str:
        lines = [f"collective timeout ({self.timeout_s:g} s) detected on rank {self.rank}"]
        for g in report["groups"]:
            lines.append(
                f"process group {g['pg']} {g['name']!r}: rank(s) {g['missing']} never joined collective "
                f"#{g['seq']} {g['collective']} that rank(s) {g['entered']} entered"
            )
        for r in report["never_joined"]:
            d = dumps[r]
            where = "".join(d["stack"][-2:]).strip().replace("\n", " | ")
            lines.append(f"hung rank {r} (pid {d['pid']}, host {d['host']}) was at: {where}")
        if report["no_dump"]:
            lines.append(
                f"rank(s) {report['no_dump']} did not answer the dump request within {self.wait_s:g} s "
                "(dead, or stuck holding the GIL)"
            )
        if dumps and not any(d["flight_recorder"].get("entries") for d in dumps.values()):
            lines.append(
                "the Flight Recorder was off: set TORCH_FR_BUFFER_SIZE before the process group is created"
            )
        elif not report["never_joined"] and not report["no_dump"]:
            lines.append(
                "every rank entered the same collectives: a slow or stuck transport, not a missing rank"
            )
        lines.append(f"Flight Recorder dumps and report: {self.dir}")
        return "\n".join(lines)

    def close(self) -> None:
        """Stop the dump-request thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self.poll_s + 1)
