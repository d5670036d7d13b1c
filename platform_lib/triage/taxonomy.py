"""Failure classes, rule roles and what each class means for a restart.

The classes follow the split used by fleet reports (Llama 3 report, sec. 3.3.4: GPU/host
hardware, network, software, planned/unplanned maintenance) and NVIDIA's resiliency
extension (root cause vs. cascade attribution), narrowed to what a training platform can act
on: who owns the fix (the user or the platform) and whether a restart can help.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["CLASS_INFO", "ClassInfo", "FailureClass", "Owner", "Role"]


class FailureClass(StrEnum):
    """What failed, at the level a restart policy and a runbook act on."""

    USER_CODE = "user_code"
    CONFIGURATION = "configuration"
    DATA = "data"
    OOM_ACCELERATOR = "oom_accelerator"
    OOM_HOST = "oom_host"
    COMMUNICATION = "communication"
    HARDWARE = "hardware"
    #: preemption, eviction, node shutdown, time limit, storage
    PREEMPTION_PLATFORM = "preemption_platform"
    UNKNOWN = "unknown"


class Role(StrEnum):
    """What a matching line says about the failure.

    root: the line can be the cause by itself (an exception, an Xid, an OOM report).
    cascade: a symptom of a failure elsewhere (a collective timeout on every rank after one
        rank died, an abort of the surviving ranks, the launcher's failure summary); used as
        the verdict only when no root exists, and then with low confidence.
    confirmation: corroborates a root of the rule's class (raises confidence) and explains a
        root that on its own is ambiguous (a bare SIGKILL plus the kernel's oom-kill line).
    context: names rank, pid, signal or step but says nothing about the cause.
    """

    ROOT = "root"
    CASCADE = "cascade"
    CONFIRMATION = "confirmation"
    CONTEXT = "context"


class Owner(StrEnum):
    """Who fixes a class: the user (code, config, data, sizing) or the platform."""

    USER = "user"
    PLATFORM = "platform"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class ClassInfo:
    """Fixed facts about a failure class (used by the verdict and the runbooks)."""

    title: str
    """Human title of the class, as in docs/runbooks/."""
    owner: Owner
    """Who fixes it."""
    action: str
    """Default action shown to the user when the matching rule gives none."""
    runbook: str
    """Runbook page under docs/runbooks/."""


CLASS_INFO: dict[FailureClass, ClassInfo] = {
    FailureClass.USER_CODE: ClassInfo(
        "user code",
        Owner.USER,
        "fix the exception at the root line (file and line in its traceback), then re-run",
        "docs/runbooks/user_code.md",
    ),
    FailureClass.CONFIGURATION: ClassInfo(
        "configuration",
        Owner.USER,
        "fix the named config field or launch setting; a restart with the same config fails "
        "the same way",
        "docs/runbooks/configuration.md",
    ),
    FailureClass.DATA: ClassInfo(
        "data",
        Owner.USER,
        "check the named dataset, shard or sample (drivetrain data validate); rebuild or "
        "restore it, or retry if the storage error was transient",
        "docs/runbooks/data.md",
    ),
    FailureClass.OOM_ACCELERATOR: ClassInfo(
        "out of memory (accelerator)",
        Owner.USER,
        "lower the per-rank batch size or activation memory (activation checkpointing), or "
        "shard more (FSDP); see the allocator advice in the root line",
        "docs/runbooks/oom_accelerator.md",
    ),
    FailureClass.OOM_HOST: ClassInfo(
        "out of memory (host)",
        Owner.USER,
        "raise the pod's memory request or /dev/shm, or lower loader workers, prefetch depth "
        "or batch size",
        "docs/runbooks/oom_host.md",
    ),
    FailureClass.COMMUNICATION: ClassInfo(
        "communication",
        Owner.PLATFORM,
        "restart from the last checkpoint; if it recurs on the same node pair, check the "
        "network fabric (NCCL_DEBUG=INFO) and exclude the node",
        "docs/runbooks/communication.md",
    ),
    FailureClass.HARDWARE: ClassInfo(
        "hardware",
        Owner.PLATFORM,
        "cordon the node, restart from the last checkpoint on other nodes, file a hardware "
        "ticket with the Xid/ECC line",
        "docs/runbooks/hardware.md",
    ),
    FailureClass.PREEMPTION_PLATFORM: ClassInfo(
        "preemption / platform",
        Owner.PLATFORM,
        "nothing to fix for a preemption: the job resumes from its last checkpoint when it is "
        "re-admitted; for a time limit or full storage, raise the limit or free space",
        "docs/runbooks/preemption_platform.md",
    ),
    FailureClass.UNKNOWN: ClassInfo(
        "unknown",
        Owner.UNKNOWN,
        "retry once; if it fails again read the first error of the first rank to fail and the "
        "node's kernel log (dmesg) and pod status",
        "docs/runbooks/unknown.md",
    ),
}
