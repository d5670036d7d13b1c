"""Fault injection for real multi-process runs: one environment switch, read by every rank.

    DRIVETRAIN_FAULTS='[{"kind": "kill", "rank": 1, "step": 7}]'

A JSON list of faults (crash, kill, hang, nan, sigterm, kill_in_save, storage_error, disk_full,
batch_delay; what each does and its fields: docs/faults.md), each firing once on rank `rank`
at optimizer step `step` of elastic attempt `attempt`. `train()` installs its rank's
`FaultPlan` (`FaultPlan.from_env`: read once per process; unknown kinds or fields raise
ValueError naming the variable) in the loop's injection seam (`platform_lib.training.hooks`);
a test may pass one to `train(..., hooks=[...])`. For tests and game days only.
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

__all__ = ["ENV_VAR", "KINDS", "FaultPlan", "FaultSpec", "InjectedFault"]

ENV_VAR = "DRIVETRAIN_FAULTS"
STEP_KINDS = ("crash", "kill", "hang", "nan", "sigterm")
SAVE_KINDS = ("kill_in_save", "storage_error", "disk_full")
KINDS = (*STEP_KINDS, *SAVE_KINDS, "batch_delay")


class InjectedFault(RuntimeError):
    """The `crash` fault: an exception raised on purpose."""


class FaultSpec(BaseModel):
    """One fault: what, on which rank, at which step, in which elastic attempt."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    kind: str
    """one of KINDS (see the module docstring)"""
    step: int = Field(ge=1)
    """optimizer step (1-based) at whose start, or at whose checkpoint save, it fires"""
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
        if self.kind == "batch_delay" and not (self.seconds > 0 and self.step == 1):
            raise ValueError(
                f"batch_delay needs seconds > 0 and step 1, got {self.seconds}, {self.step}"
            )
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
    def from_env(cls, *, rank: int, environ: dict[str, str] | None = None) -> FaultPlan:
        """Parse `DRIVETRAIN_FAULTS` (empty or unset: no faults).

        Raises:
            ValueError: the value is not a JSON list of fault objects, or names an unknown
                kind or field.
        """
        text = (os.environ if environ is None else environ).get(ENV_VAR, "").strip()
        if not text:
            return cls([], rank=rank)
        try:
            items = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"{ENV_VAR} is not JSON ({error}); expected e.g. "
                '[{"kind": "kill", "rank": 1, "step": 7}]'
            ) from error
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise ValueError(f"{ENV_VAR} must be a JSON list of objects, got {text!r}")
        try:
            faults = _FAULT_LIST.validate_python(items)
        except ValidationError as error:
            problems = "; ".join(_describe(e) for e in error.errors())
            raise ValueError(f"invalid fault in {ENV_VAR}: {problems}") from None
        return cls(faults, rank=rank)

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
