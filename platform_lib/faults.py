"""Fault injection for real multi-process runs: one environment switch, read by every rank.

    DRIVETRAIN_FAULTS='[{"kind": "kill", "rank": 1, "step": 7}]'

A JSON list of faults (kinds and fields: docs/faults.md), each firing once on rank `rank` at
optimizer step `step` of elastic attempt `attempt`, installed by `train()` in the loop's
injection seam (`platform_lib.training.hooks`). A bad value raises `FaultSpecError`, one line
naming the variable; the pipeline checks it in its first task (`check_faults`). For tests and
game days only.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator
from pydantic_core import ErrorDetails

from platform_lib.errors import UserError

__all__ = [
    "ENV_VAR",
    "KINDS",
    "FaultPlan",
    "FaultSpec",
    "FaultSpecError",
    "InjectedFault",
    "check_faults",
    "record_faults",
    "skipped_faults_warning",
]

ENV_VAR = "DRIVETRAIN_FAULTS"
#: In a run folder: the value of the variable the run trained with, and when it started.
RECORD = "faults.json"
STEP_KINDS = ("crash", "kill", "hang", "nan", "sigterm")
SAVE_KINDS = ("kill_in_save", "storage_error", "disk_full")
KINDS = (*STEP_KINDS, *SAVE_KINDS, "batch_delay")


#: How a valid value looks (in every error about the variable).
EXAMPLE = '[{"kind": "kill", "rank": 1, "step": 7}]'


class InjectedFault(RuntimeError):
    """The `crash` fault: an exception raised on purpose."""


class FaultSpecError(UserError):
    """`DRIVETRAIN_FAULTS` is not a valid fault list; `str()` is one line naming the variable."""

    def __init__(self, what: str) -> None:
        """Name the variable as the culprit and say how to fix it."""
        super().__init__(
            what,
            ENV_VAR,
            f"fix or unset the variable: a JSON list like {EXAMPLE} (kinds, fields: docs/faults.md)",
        )


class FaultSpec(BaseModel):
    """One fault: what, on which rank, at which step, in which elastic attempt."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    kind: str
    """one of KINDS (see the module docstring)"""
    step: int = Field(None, ge=1)  # type: ignore[assignment]  # required but for batch_delay
    """optimizer step (1-based) at whose start, or at whose checkpoint save, it fires;
    batch_delay: 1 (its default: it holds every batch from the first)"""
    rank: int = Field(0, ge=0)
    """global rank it fires on"""
    attempt: int = Field(0, ge=0)
    """elastic restart count (TORCHELASTIC_RESTART_COUNT) it fires in"""
    times: int = Field(1, ge=1)
    """storage_error: consecutive failing save attempts"""
    after_bytes: int = Field(0, ge=0)
    """disk_full: bytes written before ENOSPC"""
    target: Literal["agent", "self"] = "agent"
    """sigterm: "agent" (the elastic agent, which forwards it to every rank) or "self" """
    seconds: float = 0.0
    """batch_delay: wait before each batch, in s"""

    @model_validator(mode="after")
    def _check_kind(self) -> FaultSpec:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.kind == "batch_delay":
            if self.step is None:
                object.__setattr__(self, "step", 1)  # frozen; pydantic's own validation is done
            if not (self.seconds > 0 and self.step == 1):
                raise ValueError(
                    f"batch_delay needs seconds > 0 and step 1, got {self.seconds}, {self.step}"
                )
        elif self.step is None:
            raise ValueError(f"{self.kind} needs step (the 1-based optimizer step it fires at)")
        return self


def _describe(error: ErrorDetails) -> str:
    """One problem of a fault list, in the words of the variable's documentation."""
    name = ".".join(str(part) for part in error["loc"][1:])  # loc[0]: the fault's index
    if error["type"] == "extra_forbidden":
        return f"unknown fault field {name!r}; known: {sorted(FaultSpec.model_fields)}"
    if error["type"] == "value_error":
        return str(error.get("ctx", {})["error"])
    return f"{name}: {error['msg']}, got {error['input']!r}"


_FAULT_LIST = TypeAdapter(list[FaultSpec])


def check_faults(
    environ: dict[str, str] | None = None, *, world_size: int | None = None
) -> list[FaultSpec]:
    """Return the faults `DRIVETRAIN_FAULTS` asks for (unset or empty: none).

    Args:
        environ: the environment to read; default `os.environ`.
        world_size: the run's number of ranks, once known: a fault on a rank beyond it is
            refused (it would never fire).

    Raises:
        FaultSpecError: the value is not JSON, not a list of objects, names an unknown kind
            or field, has a value of the wrong type or out of range, or a rank >= world_size.
    """
    text = (os.environ if environ is None else environ).get(ENV_VAR, "").strip()
    if not text:
        return []
    try:
        items = json.loads(text)
    except json.JSONDecodeError as error:
        raise FaultSpecError(f"value is not JSON ({error.msg} at character {error.pos})") from None
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise FaultSpecError(f"value must be a JSON list of objects, got {text[:80]!r}")
    try:
        faults = _FAULT_LIST.validate_python(items)
    except ValidationError as error:
        problems = "; ".join(
            f"fault {e['loc'][0]}: {_describe(e)}" for e in error.errors(include_url=False)
        )
        raise FaultSpecError(f"invalid fault list: {problems}") from None
    for index, fault in enumerate(faults):
        if world_size is not None and fault.rank >= world_size:
            raise FaultSpecError(
                f"fault {index} ({fault.kind}) is on rank {fault.rank}, but the run has "
                f"{world_size} rank(s) (0..{world_size - 1}): it would never fire"
            )
    return faults


def record_faults(run_dir: str | os.PathLike[str], environ: dict[str, str] | None = None) -> None:
    """Write `RECORD` in `run_dir`: the variable's value this training saw and when (s since epoch).

    A cached training output was trained by an earlier run; `skipped_faults_warning` compares
    this record with the time the pipeline checked the variable.
    """
    text = (os.environ if environ is None else environ).get(ENV_VAR, "").strip()
    record = {"faults": text, "started_at": time.time()}
    path = os.path.join(run_dir, RECORD)
    with open(f"{path}.tmp", "w", encoding="utf-8") as out:
        json.dump(record, out)
    os.replace(f"{path}.tmp", path)


def skipped_faults_warning(
    run: str, checked_at: float, environ: dict[str, str] | None = None
) -> str | None:
    """Return a warning line when `DRIVETRAIN_FAULTS` is set but the run did not train with it.

    Args:
        run: the training task's run folder (local path or fsspec URL).
        checked_at: when this pipeline checked the variable (`time.time()`), before training:
            a run that started earlier (or has no `RECORD`) is a cached output of an earlier run.
        environ: the environment to read; default `os.environ`.

    Returns:
        The warning line, or None when the variable is unset or the run trained with it.
    """
    if not (os.environ if environ is None else environ).get(ENV_VAR, "").strip():
        return None
    import fsspec  # a run folder may be on object storage

    try:
        with fsspec.open(f"{run.rstrip('/')}/{RECORD}", "rb") as file:
            started = float(json.loads(file.read())["started_at"])
    except (OSError, ValueError, KeyError, TypeError):
        started = None  # trained before runs recorded it
    if started is not None and started >= checked_at:
        return None
    return (
        f"warning: {ENV_VAR} is set but no fault was injected: train_model was a cache hit (its "
        "output was trained by an earlier run); to inject faults, change the seed or the "
        "overrides, or run with --overwrite-cache"
    )


class _FaultyStream:
    """A write stream that raises ENOSPC once `budget` bytes have been written."""

    def __init__(self, stream: Any, budget: int, path: str) -> None:
        self._stream, self._budget, self._path = stream, budget, path

    def write(self, data: Any) -> int:
        size = len(memoryview(data).cast("B"))
        if size > self._budget:
            self._stream.write(memoryview(data).cast("B")[: self._budget])
            self._budget = 0
            raise OSError(errno.ENOSPC, "No space left on device (injected disk_full)", self._path)
        self._budget -= size
        return self._stream.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _FaultyFileSystem:
    """Wraps a DCP storage writer's file system: the save faults of one rank and step."""

    def __init__(self, fs: Any, plan: FaultPlan, faults: list[FaultSpec]) -> None:
        self._fs, self._plan, self._faults = fs, plan, faults

    @contextlib.contextmanager
    def create_stream(self, path: str | os.PathLike[str], mode: str) -> Iterator[Any]:
        data_file = "w" in mode and os.fspath(path).endswith(".distcp")
        for fault in self._faults if data_file else ():
            if fault.kind == "kill_in_save":
                with self._fs.create_stream(path, mode) as stream:
                    stream.write(b"partial")
                    stream.flush()
                    self._plan.announce(fault, f"SIGKILL while writing {os.fspath(path)}")
                    os.kill(os.getpid(), signal.SIGKILL)
            if fault.kind == "storage_error" and self._plan.consume(fault):
                raise ConnectionResetError(
                    errno.ECONNRESET,
                    "Connection reset by peer (injected storage_error)",
                    os.fspath(path),
                )
            if fault.kind == "disk_full":
                self._plan.announce(
                    fault, f"ENOSPC after {fault.after_bytes} bytes of {os.fspath(path)}"
                )
                with self._fs.create_stream(path, mode) as stream:
                    yield _FaultyStream(stream, fault.after_bytes, os.fspath(path))
                return
        with self._fs.create_stream(path, mode) as stream:
            yield stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)


class FaultPlan:
    """The faults of this process (its rank and elastic attempt) and the hooks that fire them.

    Args:
        faults: every fault of the run (all ranks, all attempts).
        rank: this process's global rank.
        attempt: this process's elastic restart count; default: TORCHELASTIC_RESTART_COUNT.
    """

    def __init__(self, faults: list[FaultSpec], *, rank: int, attempt: int | None = None) -> None:
        if attempt is None:
            attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        self.rank = rank
        self.faults = [f for f in faults if f.rank == rank and f.attempt == attempt]
        self._left = {id(f): f.times for f in self.faults}

    @classmethod
    def from_env(
        cls,
        *,
        rank: int,
        environ: dict[str, str] | None = None,
        world_size: int | None = None,
    ) -> FaultPlan:
        """Parse `DRIVETRAIN_FAULTS` (empty or unset: no faults); see `check_faults`.

        Raises:
            FaultSpecError: a bad value (a `ValueError`), in one line naming the variable.
        """
        return cls(check_faults(environ, world_size=world_size), rank=rank)

    def __bool__(self) -> bool:
        return bool(self.faults)

    def announce(self, fault: FaultSpec, what: str) -> None:
        """Print one line saying which fault fires (the log shows cause next to effect)."""
        sys.stderr.write(
            f"[drivetrain fault] rank {self.rank} pid {os.getpid()} step {fault.step}: injecting "
            f"{fault.kind}: {what}\n"
        )  # one write: ranks share the stream
        sys.stderr.flush()

    def consume(self, fault: FaultSpec) -> bool:
        """Return True (and count it) while `fault` has firings left."""
        if self._left[id(fault)] <= 0:
            return False
        self._left[id(fault)] -= 1
        self.announce(fault, f"firing {fault.times - self._left[id(fault)]} of {fault.times}")
        return True

    def at_step(self, step: int) -> None:
        """Fire the step faults of `step` (call at the start of the step, before its batch)."""
        for fault in self.faults:
            if fault.step != step or fault.kind not in ("crash", "kill", "hang", "sigterm"):
                continue
            if not self.consume(fault):
                continue
            if fault.kind == "crash":
                raise InjectedFault(f"injected crash on rank {self.rank} at step {step}")
            if fault.kind == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if fault.kind == "sigterm":
                agent = fault.target == "agent" and "TORCHELASTIC_RUN_ID" in os.environ
                os.kill(os.getppid() if agent else os.getpid(), signal.SIGTERM)
            if fault.kind == "hang":
                while (
                    True
                ):  # never joins the next collective; the watchdog sees the others time out
                    time.sleep(3600)

    def batch_delay_s(self) -> float:
        """Return how long each batch of this rank waits (its `batch_delay` faults), in s."""
        delays = [f for f in self.faults if f.kind == "batch_delay"]
        for fault in delays:
            self.announce(fault, f"{fault.seconds} s before every batch")
        return sum(f.seconds for f in delays)

    def on_batch(self, step: int, batch: dict[str, Any]) -> dict[str, Any]:
        """Return `batch`, with every float tensor set to NaN when a `nan` fault fires at `step`."""
        for fault in self.faults:
            if fault.kind == "nan" and fault.step == step and self.consume(fault):
                return {
                    k: torch.full_like(v, float("nan"))
                    if torch.is_tensor(v) and v.is_floating_point()
                    else v
                    for k, v in batch.items()
                }
        return batch

    def wrap_storage(self, writer: Any, step: int) -> Any:
        """Wrap a DCP storage writer's file system with the save faults of `step` (if any)."""
        faults = [f for f in self.faults if f.kind in SAVE_KINDS and f.step == step]
        if faults:
            writer.fs = _FaultyFileSystem(writer.fs, self, faults)
        return writer
