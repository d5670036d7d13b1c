"""The triage rule table: each rule is a regular expression with a class, a role and a strength.

`RULES` is read top to bottom; the first rule whose pattern is found in a line claims it, so
specific rules come before generic ones and harmless look-alikes are claimed first by
`context` rules. To teach triage a new failure, add a row. Message formats come from the
producers' own sources: torch (CUDACachingAllocator OOM, ProcessGroupNCCL watchdog, gloo,
torchelastic), NVIDIA's Xid catalog, the Linux OOM killer, Kubernetes pod status, Kueue, Slurm
and this platform's own exceptions (platform_lib.loading.errors, platform_lib.shards.errors).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import re2

from platform_lib.triage.taxonomy import FailureClass, Role

__all__ = ["MAX_MATCH_CHARS", "RULES", "Rule", "RuleMatcher", "rule_matcher"]

#: Characters of a line the rules see (config dumps and tensors printed on one line are long).
MAX_MATCH_CHARS = 2000

C = FailureClass


@dataclass(frozen=True)
class Rule:
    """One row of the rule table.

    Raises:
        ValueError: bad strength or a pattern that does not compile (names the rule).
    """

    name: str
    """Stable id (used in fingerprints and reports)."""
    failure_class: FailureClass
    """Class the line supports."""
    role: Role
    """root / cascade / confirmation / context (see `Role`)."""
    pattern: str
    """Regular expression searched in the line's message (rank prefix stripped)."""
    strength: float = 0.5
    """How strongly one such line supports the class, 0-1."""
    action: str | None = None
    """What to do, when more specific than the class's default action."""
    ends_attempt: bool = False
    """The line closes an attempt of the worker group (torch elastic's report of a failed
    worker; with `max_restarts` the group restarts after it and one log holds several
    attempts)."""
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not 0.0 < self.strength <= 1.0:
            raise ValueError(f"rule {self.name}: strength must be in (0, 1], got {self.strength}")
        try:
            object.__setattr__(self, "regex", re.compile(self.pattern))
        except re.error as exc:
            raise ValueError(
                f"rule {self.name}: pattern {self.pattern!r} does not compile: {exc}"
            ) from exc


_PY_EXC = r"(?:[A-Za-z_][\w]*\.)*"  # optional module path before an exception name (anchored)
#: Start of a line's message, optionally after a glog header (torchelastic logs tracebacks so).
_LINE_START = r"^(?:\[?[IWEF]\d{4} [\d:.]+ +\d+ [^\]\s]+\] )?\s*"
_XID = r"NVRM: Xid \(PCI:[0-9a-fA-F:.]+\): "

RULES: tuple[Rule, ...] = (
    # --- context: harmless look-alikes claimed first, and lines that only name rank/pid ---------
    Rule("nccl-info", C.UNKNOWN, Role.CONTEXT, r"\bNCCL INFO\b"),
    Rule("fault-injection-notice", C.UNKNOWN, Role.CONTEXT, r"\[drivetrain fault\]"),
    Rule(
        "python-warning",
        C.UNKNOWN,
        Role.CONTEXT,
        r"\b(?:UserWarning|FutureWarning|DeprecationWarning|RuntimeWarning|ResourceWarning)\b",
    ),
    Rule("retry-notice", C.UNKNOWN, Role.CONTEXT, r"\b[Rr]etry(?:ing)?\b.*\battempt \d+"),
    Rule(
        "elastic-closing-signal",
        C.UNKNOWN,
        Role.CONTEXT,
        r"Sending process \d+ closing signal SIG\w+",
    ),
    Rule(
        "elastic-worker-failed",
        C.UNKNOWN,
        Role.CONTEXT,
        r"failed \(exitcode: -?\d+\) local_rank: \d+ \(pid: \d+\) of (?:binary|fn)",
        ends_attempt=True,
    ),
    Rule("traceback-header", C.UNKNOWN, Role.CONTEXT, r"Traceback \(most recent call last\)"),
    Rule(
        "cuda-async-hint",
        C.UNKNOWN,
        Role.CONTEXT,
        r"CUDA kernel errors might be asynchronously reported|CUDA_LAUNCH_BLOCKING=1|"
        r"TORCH_USE_CUDA_DSA",
    ),
    Rule("xid-13-31-43", C.UNKNOWN, Role.CONTEXT, _XID + r"(?:13|31|43), "),
    # --- out of memory, accelerator ---------------------------------------------------------
    Rule(
        "cuda-oom",
        C.OOM_ACCELERATOR,
        Role.ROOT,
        r"(?:CUDA|HIP|XPU|MPS) out of memory\. Tried to allocate",
        0.95,
        "lower the per-rank batch size or activation memory (activation checkpointing, more "
        "FSDP sharding); if the message reports much memory 'reserved by PyTorch but "
        "unallocated', set PYTORCH_ALLOC_CONF=expandable_segments:True (the deprecated alias "
        "PYTORCH_CUDA_ALLOC_CONF, or PYTORCH_HIP_ALLOC_CONF on ROCm, on older torch)",
    ),
    Rule(
        "cuda-oom-short",
        C.OOM_ACCELERATOR,
        Role.ROOT,
        r"CUDA error: out of memory|cudaErrorMemoryAllocation|CUBLAS_STATUS_ALLOC_FAILED|"
        r"NCCL WARN Failed to CUDA calloc|Cuda failure (?:\d+ )?'out of memory'",
        0.85,
    ),
    # --- out of memory, host -----------------------------------------------------------------
    Rule(
        "pod-oomkilled",
        C.OOM_HOST,
        Role.ROOT,
        r"reason=OOMKilled\b",
        0.95,
        "the container hit its memory limit: raise the memory request/limit or lower loader "
        "workers, prefetch depth or batch size",
    ),
    Rule(
        "kernel-oom-killed",
        C.OOM_HOST,
        Role.ROOT,
        r"(?:Memory cgroup out of memory|Out of memory): Killed process \d+",
        0.95,
        "the kernel OOM killer ended the process: raise the memory limit or lower loader "
        "workers, prefetch depth or batch size",
    ),
    Rule(
        "kernel-oom-invoked",
        C.OOM_HOST,
        Role.CONFIRMATION,
        r"invoked oom-killer|oom-kill:constraint=|Memory cgroup stats for",
        0.9,
    ),
    Rule(
        "node-memory-pressure",
        C.OOM_HOST,
        Role.ROOT,
        r"reason=(?:Evicted|TerminationByKubelet) message=The node was low on resource: memory",
        0.92,
    ),
    Rule(
        "cpu-allocator",
        C.OOM_HOST,
        Role.ROOT,
        r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory)",
        0.9,
    ),
    Rule(
        "python-memory-error",
        C.OOM_HOST,
        Role.ROOT,
        _LINE_START + _PY_EXC + r"(?:MemoryError|_ArrayMemoryError)\b|Unable to allocate [\d.]+ "
        r"[KMGTP]?i?B for an array|Cannot allocate memory",
        0.85,
    ),
    Rule("cpp-bad-alloc", C.OOM_HOST, Role.ROOT, r"std::bad_alloc", 0.75),
    Rule(
        "shm-bus-error",
        C.OOM_HOST,
        Role.ROOT,
        r"Unexpected bus error encountered in worker|is killed by signal: Bus error|"
        r"No space left on device.*/dev/shm|/dev/shm.*No space left on device|RingError: ",
        0.9,
        "/dev/shm is too small for the DataLoader workers' tensors: give the pod a larger "
        "shared memory (Flyte task shared_memory / Elastic increase_shared_mem) or lower "
        "num_workers / prefetch",
    ),
    # --- hardware ----------------------------------------------------------------------------
    Rule(
        "xid-fallen-off-bus", C.HARDWARE, Role.ROOT, _XID + r"79, |GPU has fallen off the bus", 0.97
    ),
    Rule("xid-memory-error", C.HARDWARE, Role.ROOT, _XID + r"(?:48|64|94|95), ", 0.95),
    Rule(
        "xid-fatal",
        C.HARDWARE,
        Role.ROOT,
        _XID + r"(?:61|62|74|92|119|120|121|140|143|144|145|146|147|148|149|150|154), ",
        0.9,
    ),
    Rule(
        "xid-row-remap",
        C.HARDWARE,
        Role.CONFIRMATION,
        _XID + r"63, |Remapped Rows Pending\s*:\s*Yes|Pending Page Blacklist\s*:\s*Yes",
        0.8,
    ),
    Rule("xid-preemptive-cleanup", C.HARDWARE, Role.CASCADE, _XID + r"45, ", 0.3),
    Rule(
        "cuda-ecc",
        C.HARDWARE,
        Role.ROOT,
        r"CUDA error: uncorrectable ECC error encountered|cudaErrorECCUncorrectable|"
        r"CUDA error: uncorrectable NVLink error",
        0.85,
    ),
    Rule(
        "host-memory-ue",
        C.HARDWARE,
        Role.ROOT,
        r"EDAC \w+: \d+ UE |mce: \[Hardware Error\]: (?:CPU \d+: )?Machine Check",
        0.85,
    ),
    Rule(
        "cuda-device-lost",
        C.HARDWARE,
        Role.ROOT,
        r"CUDA error: (?:unspecified launch failure|GPU is lost|the launch timed out)|"
        r"cudaErrorDevicesUnavailable|NVML_ERROR_GPU_IS_LOST",
        0.55,
    ),
    Rule(
        "slurm-node-fail",
        C.HARDWARE,
        Role.ROOT,
        r"\*\*\* (?:JOB|STEP) [\d.]+ ON \S+ CANCELLED AT \S+ DUE TO NODE FAIL",
        0.85,
    ),
    # --- communication -----------------------------------------------------------------------
    Rule(
        "nccl-net-error",
        C.COMMUNICATION,
        Role.ROOT,
        r"NCCL WARN NET/\w+ ?: ?(?:Got completion from peer|Connection closed|.*error)|"
        r"NCCL WARN .*(?:socketStartConnect|Connect to \S+ failed)|"
        r"ncclSystemError:.*(?:socket|Connect)",
        0.8,
    ),
    Rule(
        "nic-link-down",
        C.COMMUNICATION,
        Role.ROOT,
        r"mlx5_core .*\b[Ll]ink down\b|Port module event.*(?:unplugged|error)",
        0.85,
    ),
    Rule(
        "collective-hang-attributed",
        C.COMMUNICATION,
        Role.ROOT,
        r"rank\(?s?\)? \[?(?P<rank>\d+)[\d, ]*\]? never (?:joined|entered|reached)|"
        r"(?i:hang detected).*\brank (?P<rank2>\d+)",
        0.65,
        "a rank stopped calling collectives: its stack and Flight Recorder dump show where "
        "(data loader stall, deadlock, slow storage); restart from the last checkpoint",
    ),
    Rule(
        "collective-hang-detected",
        C.COMMUNICATION,
        Role.CASCADE,
        r"CollectiveHangError|collective timeout \([\d.]+ ?s\) detected",
        0.35,
    ),
    Rule(
        "hung-rank-stack",
        C.COMMUNICATION,
        Role.CONFIRMATION,
        r"hung rank (?P<rank>\d+) \(pid (?P<pid>\d+)",
        0.6,
    ),
    Rule(
        "rendezvous-failure",
        C.COMMUNICATION,
        Role.ROOT,
        r"RendezvousTimeoutError|RendezvousConnectionError|DistNetworkError|DistStoreError|"
        r"The client socket has timed out after \d+m?s while trying to connect",
        0.6,
    ),
    Rule(
        "nccl-watchdog-timeout",
        C.COMMUNICATION,
        Role.CASCADE,
        r"Watchdog caught collective operation timeout|detected by watchdog at work|"
        r"failure detected by watchdog|Timeout at NCCL work",
        0.35,
        "a collective timed out on this rank: another rank stopped participating (look for "
        "the first rank to fail or hang); restart from the last checkpoint",
    ),
    Rule(
        "nccl-abort",
        C.COMMUNICATION,
        Role.CASCADE,
        r"Some NCCL operations have failed or timed out|taking the entire process down|"
        r"Process group watchdog thread terminated|c10::DistBackendError|"
        r"ncclRemoteError|remote process exited or there was a network error",
        0.3,
    ),
    Rule(
        "gloo-timeout",
        C.COMMUNICATION,
        Role.CASCADE,
        r"Timed out waiting \d+ms for (?:recv|send) operation to complete",
        0.35,
        "a gloo collective timed out: another rank stopped participating; restart from the "
        "last checkpoint",
    ),
    Rule(
        "gloo-peer-lost",
        C.COMMUNICATION,
        Role.CASCADE,
        r"(?:gloo|c10d|pair\.cc|TCPStore|ProcessGroup)\S*.*"
        r"(?:Connection (?:closed|reset) by peer|Broken pipe)|"
        r"Connection (?:closed|reset) by peer \[[\d.:\[\]a-f]+\]",
        0.3,
    ),
    Rule("nccl-unhandled-cuda", C.HARDWARE, Role.CASCADE, r"unhandled cuda error", 0.3),
    # --- preemption / platform ---------------------------------------------------------------
    Rule(
        "kueue-preempted",
        C.PREEMPTION_PLATFORM,
        Role.ROOT,
        r"Preempted to accommodate a workload|reason=Preempted\b",
        0.95,
    ),
    Rule(
        "pod-disruption",
        C.PREEMPTION_PLATFORM,
        Role.ROOT,
        r"condition DisruptionTarget: reason=(?:PreemptionByScheduler|PreemptionByKubeScheduler|"
        r"TerminationByKubelet|DeletionByTaintManager|EvictionByEvictionAPI|DeletionByPodGC)",
        0.9,
    ),
    Rule("pod-evicted", C.PREEMPTION_PLATFORM, Role.ROOT, r"reason=Evicted\b", 0.85),
    Rule(
        "node-shutdown",
        C.PREEMPTION_PLATFORM,
        Role.ROOT,
        r"imminent node shutdown|reason=(?:NodeShutdown|Terminated) |Node is shutting down|"
        r"[Ii]nstance (?:was )?preempted|Spot Instance interruption|spot instance termination",
        0.9,
    ),
    Rule(
        "slurm-preempted",
        C.PREEMPTION_PLATFORM,
        Role.ROOT,
        r"\*\*\* (?:JOB|STEP) [\d.]+ ON \S+ CANCELLED AT \S+ DUE TO PREEMPTION",
        0.95,
    ),
    Rule(
        "time-limit",
        C.PREEMPTION_PLATFORM,
        Role.ROOT,
        r"CANCELLED AT \S+ DUE TO TIME LIMIT|reason=DeadlineExceeded|"
        r"Pod was active on the node longer than the specified deadline|"
        r"Job was active longer than specified deadline",
        0.9,
        "the job hit its wall-clock limit: resume from the last checkpoint with a longer "
        "limit, or checkpoint more often",
    ),
    Rule(
        "sigterm-received",
        C.PREEMPTION_PLATFORM,
        Role.ROOT,
        r"SignalException: Process \d+ got signal: (?:15|1)\b|"
        r"[Rr]eceived SIGTERM|SIGTERM received|got SIGTERM|"
        r"Received (?:15|Signals\.SIGTERM) death signal",
        0.75,
        "the pod was asked to stop (preemption, eviction, scale-down): the final checkpoint "
        "is resumed on the next start",
    ),
    Rule(
        "preempted-error",
        C.PREEMPTION_PLATFORM,
        Role.ROOT,
        r"(?:rank (?P<rank>\d+) pid (?P<pid>\d+): )?preempted by SIG\w+ after step|"
        r"PreemptedError: ",
        0.85,
        "the job was asked to stop and saved a final checkpoint: the next start resumes from it",
    ),
    Rule(
        "storage-connection",
        C.PREEMPTION_PLATFORM,
        Role.ROOT,
        _LINE_START + _PY_EXC + r"(?:ConnectionResetError|ConnectionAbortedError|BrokenPipeError|"
        r"TimeoutError|EndpointConnectionError|StorageUnreachableError)\b|CheckpointSaveError: .*(?:[Cc]onnection|timed out)",
        0.6,
        "a storage or network call failed; usually transient: the restart retries from the last "
        "complete checkpoint",
    ),
    Rule(
        "worker-sigterm",
        C.PREEMPTION_PLATFORM,
        Role.ROOT,
        r"Signal 15 \(SIGTERM\) received by PID",
        0.4,
    ),
    Rule(
        "disk-full",
        C.PREEMPTION_PLATFORM,
        Role.ROOT,
        r"No space left on device|ENOSPC|Disk quota exceeded",
        0.8,
        "the checkpoint or scratch volume is full: free space, lower keep-last-N checkpoint "
        "retention or raise the volume size; the last complete checkpoint is intact",
    ),
    # --- data --------------------------------------------------------------------------------
    Rule(
        "dataset-error",
        C.DATA,
        Role.ROOT,
        r"(?:SampleIntegrityError|ShardReadError|DatasetIndexError|SampleDecodeError|"
        r"ShardFormatError|DatasetNotFoundError|ManifestMissingError|ManifestError|DatasetError|"
        r"ResumeStateError|SchemaError|SchemaErrors): ",
        0.9,
    ),
    Rule(
        "storage-unreachable",
        C.DATA,
        Role.ROOT,
        r"ObjectStoreUnreachableError: |botocore\.exceptions\.\w*(?:Connect|"
        r"Timeout|ReadTimeout)\w*Error",
        0.7,
        "the dataset's object store did not answer: usually transient, the restart retries",
    ),
    Rule(
        "corrupt-file",
        C.DATA,
        Role.ROOT,
        r"tarfile\.ReadError|UnidentifiedImageError|image file is truncated|"
        r"Parquet magic bytes not found|ArrowInvalid: |CRC check failed|"
        r"zlib\.error: Error -3 while decompressing|Unexpected end of (?:file|stream)",
        0.8,
    ),
    Rule(
        "data-file-missing",
        C.DATA,
        Role.ROOT,
        r"FileNotFoundError: .*(?:manifest|shard|\.tar\b|\.parquet|dataset|index)",
        0.75,
    ),
    # --- configuration -----------------------------------------------------------------------
    Rule(
        "config-invalid",
        C.CONFIGURATION,
        Role.ROOT,
        r"\bConfigError: |invalid \w*Config\b|unknown \w*Config fields|StorageAccessError: |ValueError: .*\bconfig(?:uration)?\b.*"
        r"(?:must|invalid|expected)",
        0.9,
    ),
    Rule(
        "dist-env-missing",
        C.CONFIGURATION,
        Role.ROOT,
        r"environment variable \w+ expected, but not set|KeyError: '(?:LOCAL_RANK|RANK|"
        r"WORLD_SIZE|MASTER_ADDR|MASTER_PORT)'",
        0.85,
    ),
    Rule(
        "cli-arguments",
        C.CONFIGURATION,
        Role.ROOT,
        r"error: (?:unrecognized arguments|argument \S+: |the following arguments are required)",
        0.8,
    ),
    Rule(
        "device-setup",
        C.CONFIGURATION,
        Role.ROOT,
        r"CUDA error: invalid device ordinal|no GPUs found|Torch not compiled with CUDA enabled|"
        r"NCCL (?:is not available|error.*invalid argument)|"
        r"Default process group has not been initialized",
        0.75,
    ),
    Rule(
        "environment-import",
        C.CONFIGURATION,
        Role.ROOT,
        _LINE_START + r"(?:ModuleNotFoundError: No module named|ImportError: )",
        0.75,
        "the image or virtual environment lacks a package or has an incompatible one: fix "
        "the image / requirements",
    ),
    # --- user code ---------------------------------------------------------------------------
    Rule(
        "non-finite-loss",
        C.USER_CODE,
        Role.ROOT,
        r"\b(?:[Nn]on-finite|[Nn]a[Nn]|[Ii]nf(?:inite)?) (?:local |global )?loss\b|"
        r"\b[Ll]oss (?:is|became|was) (?:[Nn]a[Nn]|[Ii]nf)|(?:FloatingPointError|NonFiniteError): ",
        0.7,
        "the loss diverged: lower the learning rate or lengthen warmup, check loss scaling "
        "and the inputs of that step; restart from the last checkpoint",
    ),
    Rule(
        "cuda-user-fault",
        C.USER_CODE,
        Role.ROOT,
        r"CUDA error: (?:an illegal memory access|device-side assert triggered|misaligned "
        r"address|an illegal instruction)|Assertion `.*` failed",
        0.6,
    ),
    Rule(
        "native-crash",
        C.USER_CODE,
        Role.ROOT,
        r"Segmentation fault|Signal 11 \(SIGSEGV\)|Fatal Python error: ",
        0.5,
    ),
    # --- signals without other evidence ------------------------------------------------------
    Rule(
        "sigabrt",
        C.UNKNOWN,
        Role.CASCADE,
        r"Signal 6 \(SIGABRT\) received by PID|exitcode\s*: -6\b|terminated with signal SIGABRT",
        0.25,
        "an abort is usually a cascade (the NCCL watchdog or c10 aborts the process after "
        "another failure): look for the first failure on another rank",
    ),
    Rule(
        "sigkill",
        C.UNKNOWN,
        Role.ROOT,
        r"Signal 9 \(SIGKILL\) received by PID|exitcode\s*: -9\b|terminated with signal SIGKILL",
        0.3,
        "killed by SIGKILL from outside the process (the kernel OOM killer, the kubelet after "
        "the grace period, or an operator): not proof of OOM; check dmesg and the pod status",
    ),
    Rule(
        "sigbus",
        C.UNKNOWN,
        Role.ROOT,
        r"Signal 7 \(SIGBUS\) received by PID|terminated with signal SIGBUS",
        0.3,
    ),
    Rule(
        "elastic-summary",
        C.UNKNOWN,
        Role.CASCADE,
        r"ChildFailedError|Root Cause \(first observed failure\)|ProcessRaisedException|"
        r"ProcessExitedException: process \d+ terminated with exit code",
        0.2,
    ),
    Rule(
        "python-exception",
        C.USER_CODE,
        Role.ROOT,
        _LINE_START
        + r"(?:"
        + _PY_EXC
        + r"(?:[A-Z]\w*(?:Error|Exception|Fault|Interrupt)|AssertionError|NotImplementedError)"
        + r"(?::\s|:?$)|(?:[a-z_]\w*\.)+[A-Z]\w*: )",
        0.55,
    ),
)


#: Characters on which RE2 and Python's `re` may disagree: RE2's `\d`, `\w`, `\s` and `\b`
#: are ASCII-only, and it does not count the separators \x1c-\x1f as white space.
_NOT_PLAIN_ASCII = re.compile(r"[^\t\x20-\x7e]")


class RuleMatcher:
    """First matching rule of a table, screened by one RE2 set search (linear time) per line.

    Most log lines match no rule; RE2 tells so in one pass over the line, where trying each
    Python pattern in turn costs some 60 backtracking searches. On plain-ASCII text (tab and
    printable characters) both engines agree on these patterns, so RE2's answer stands and
    Python's `re` confirms the candidates in table order; other text goes straight to `re`.
    """

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules = tuple(rules)
        screen = re2.Set.SearchSet()
        try:
            for rule in self.rules:
                screen.Add(rule.pattern)
            screen.Compile()
        except re2.error:  # a pattern RE2 cannot run (backreference, lookaround): no screen
            screen = None
        self._screen = screen

    def match(self, message: str) -> Rule | None:
        """Return the first rule (table order) whose pattern is found in `message`.

        Only the first `MAX_MATCH_CHARS` characters are searched.
        """
        message = message[:MAX_MATCH_CHARS]
        if self._screen is None or _NOT_PLAIN_ASCII.search(message):
            candidates: Sequence[Rule] = self.rules
        else:
            hits = self._screen.Match(message)
            if not hits:
                return None
            candidates = [self.rules[i] for i in sorted(hits)]
        for rule in candidates:
            if rule.regex.search(message):
                return rule
        return None


@functools.cache
def rule_matcher() -> RuleMatcher:
    """Return the `RuleMatcher` of `RULES` (built at the first call)."""
    return RuleMatcher(RULES)
