"""The train loop's injection seam: hooks `train()` calls at three named points of every step.

A hook is any object with the three methods of `StepHooks`; `train(..., hooks=[...])` takes
them (tests install theirs there) and, in every rank, adds those the environment switches on
(`DRIVETRAIN_FAULTS`: `platform_lib.faults`, docs/faults.md). With no hook the loop runs
unchanged. Hooks run in order; each gets what the previous one returned.

    at_step(step)                 start of optimizer step `step` (1-based), before its batch
    on_batch(step, batch)         the batch `forward_backward` trains on in `step`
    wrap_storage(writer, step)    the DCP storage writer of the checkpoint saved at `step`
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from torch.distributed.checkpoint import FileSystemWriter

__all__ = ["HookChain", "StepHooks"]


class StepHooks(Protocol):
    """What the loop calls; each method returns its input (or a replacement) unchanged by default."""

    def at_step(self, step: int) -> None:
        """Called at the start of optimizer step `step` (1-based), before its batch is read."""

    def on_batch(self, step: int, batch: dict[str, Any]) -> dict[str, Any]:
        """Return the batch (`__key__` and tensors on the device) step `step` trains on."""

    def wrap_storage(self, writer: FileSystemWriter, step: int) -> FileSystemWriter:
        """Return the storage writer the checkpoint of `step` is written through."""


class HookChain:
    """The hooks of one run, called in order (`StepHooks` itself)."""

    def __init__(self, hooks: Sequence[StepHooks]) -> None:
        self.hooks = tuple(hooks)

    def at_step(self, step: int) -> None:
        """Call every hook's `at_step`."""
        for hook in self.hooks:
            hook.at_step(step)

    def on_batch(self, step: int, batch: dict[str, Any]) -> dict[str, Any]:
        """Pass the batch through every hook's `on_batch`; return the last result."""
        for hook in self.hooks:
            batch = hook.on_batch(step, batch)
        return batch

    def wrap_storage(self, writer: FileSystemWriter, step: int) -> FileSystemWriter:
        """Pass the writer through every hook's `wrap_storage`; return the last result."""
        for hook in self.hooks:
            writer = hook.wrap_storage(writer, step)
        return writer
