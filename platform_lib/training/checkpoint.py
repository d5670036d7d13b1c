"""Distributed checkpoints on DCP's own commit, async save, retention; full-weight export.

A `step-NNNNNN/` folder (local path or fsspec URL) is complete once DCP's coordinator wrote
`.metadata`, last: there is no marker of our own. Loads reshard to another world size. DCP
unpickles `.metadata` and the per-rank state (torch 2.13 has no safe loader, pytorch#189308),
so a step folder is read only when its files match the sha256 ledger `<folder>.ledger.json`
that rank 0 writes atomically at commit; a local folder and its ledger must be private to the
user (`ensure_private_dir`). Layout, async save and storage errors: docs/faults.md,
"Checkpoints".
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import io
import json
import os
import random
import re
import stat
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import fsspec
import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file, save_file
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential
from torch import nn
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)

from platform_lib.errors import UserError
from platform_lib.fsguard import open_regular, read_regular
from platform_lib.storage import is_transient

__all__ = [
    "METADATA_FILE",
    "CheckpointSaveError",
    "Checkpointer",
    "SaveResult",
    "UntrustedCheckpointError",
    "capture_rng_state",
    "check_same_model",
    "ensure_private_dir",
    "export_weights",
    "find_latest_checkpoint",
    "list_checkpoints",
    "load_weights",
    "make_run_dir",
    "restore_rng_state",
]

METADATA_FILE = ".metadata"
_STEP_DIR = re.compile(r"^step-(\d{6,})$")
_RANK_KEY = "rank_state_{:05d}"
#: Writer wrapper hook: (DCP storage writer, step) -> the writer to use (fault injection).
StorageHook = Callable[[FileSystemWriter, int], FileSystemWriter]


class CheckpointSaveError(RuntimeError):
    """A checkpoint save failed on some rank; the previous complete checkpoint stays usable."""


class UntrustedCheckpointError(UserError):
    """A checkpoint folder or step the trainer cannot trust.

    Its owner is another user, others can write it, or its files differ from the digests
    recorded at commit.
    """


#: Largest ledger read, in bytes (a few hundred bytes per step).
_LEDGER_MAX_BYTES = 16 * 1024 * 1024
_HASH_CHUNK = 8 * 1024 * 1024


def _check_private_dir(path: Path) -> None:
    """Refuse `path` unless it is a real folder owned by this user that nobody else can write."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise UntrustedCheckpointError(
            "not a folder (a symbolic link or a file)",
            str(path),
            "remove it; the trainer creates its own folder there",
        )
    if info.st_uid != os.geteuid():
        raise UntrustedCheckpointError(
            f"folder is owned by uid {info.st_uid}, not by you (uid {os.geteuid()}); its "
            "checkpoints could run someone else's code at restore",
            str(path),
            "use a folder you own (another checkpoint.folder or TMPDIR), or remove this one",
        )
    if info.st_mode & 0o022:
        raise UntrustedCheckpointError(
            f"group or others can write the folder (mode {stat.S_IMODE(info.st_mode):o}); its "
            "checkpoints could be replaced by someone else",
            str(path),
            f"run `chmod go-w {path}` if everything in it is yours, or use another folder",
        )


def ensure_private_dir(path: str | os.PathLike[str]) -> Path:
    """Create folder `path` (mode 0700; missing parents as usual) or check the existing one.

    Returns:
        `path` as a Path.

    Raises:
        UntrustedCheckpointError: `path` is a link or a file, belongs to another user, or
            group or others can write it (names the folder and the fix).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    _check_private_dir(path)
    return path


def make_run_dir(name: str) -> Path:
    """Return the private run folder `$TMPDIR/drivetrain-train-<uid>/<name>`, creating it.

    The name is predictable on purpose (every rank of a launch and its restarts find the same
    folder without talking), so both levels are created mode 0700 and an existing one is used
    only when this user owns it and nobody else can write it.

    Raises:
        UntrustedCheckpointError: as `ensure_private_dir`, for either level.
    """
    base = ensure_private_dir(Path(tempfile.gettempdir()) / f"drivetrain-train-{os.geteuid()}")
    return ensure_private_dir(base / name)


@dataclass(kw_only=True, frozen=True)
class SaveResult:
    """One save as the training loop saw it."""

    step: int
    """optimizer steps the checkpoint holds"""
    path: str
    """its step folder (local path or URL); complete once `.metadata` exists"""
    blocking_s: float
    """seconds the training loop was blocked: staging (async) or the whole write (sync), plus
    waiting for the previous async save, in s"""
    asynchronous: bool
    """written in the background (complete later)"""


def _is_remote(folder: str) -> bool:
    return "://" in folder and not folder.startswith("file://")


def _join(folder: str, name: str) -> str:
    return f"{folder.rstrip('/')}/{name}" if _is_remote(folder) else os.path.join(folder, name)


def _step_name(path: str) -> str:
    """Return the last part of a step folder path or URL ("step-000012")."""
    return path.rstrip("/").rsplit("/", 1)[-1]


def list_checkpoints(folder: str | os.PathLike[str]) -> list[tuple[int, str, bool]]:
    """Return (step, step folder, complete) for every `step-NNNNNN` under `folder`, by step.

    Complete means DCP's `.metadata` exists. A missing `folder` has no checkpoints.
    """
    folder = os.fspath(folder)
    fs, root = fsspec.core.url_to_fs(folder)
    try:
        names = [p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(root, detail=False)]
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        if m := _STEP_DIR.match(name):
            path = _join(folder, name)
            found.append((int(m.group(1)), path, fs.exists(_join(root, f"{name}/{METADATA_FILE}"))))
    return sorted(found)


def find_latest_checkpoint(folder: str | os.PathLike[str]) -> str | None:
    """Return the complete checkpoint folder with the highest step under `folder`, or None.

    Partial folders (an interrupted save: no `.metadata`) are skipped.
    """
    complete = [path for _, path, done in list_checkpoints(folder) if done]
    return complete[-1] if complete else None


def _ledger_path(folder: str) -> str:
    return f"{folder.rstrip('/')}.ledger.json"


def _read_ledger(folder: str) -> dict[str, dict[str, str]]:
    """Return step folder name -> {file name: sha256} from the ledger of `folder` ({} if none).

    Raises:
        UntrustedCheckpointError: a local ledger owned by another user, writable by others,
            not a regular file, or not a ledger.
    """
    path = _ledger_path(folder)
    try:
        if _is_remote(folder):
            fs, root = fsspec.core.url_to_fs(path)
            data = fs.cat_file(root)
        else:
            local = fsspec.core.url_to_fs(path)[1]
            info = os.lstat(local)
            if info.st_uid != os.geteuid() or info.st_mode & 0o022:
                raise UntrustedCheckpointError(
                    f"checkpoint ledger is owned by uid {info.st_uid} with mode "
                    f"{stat.S_IMODE(info.st_mode):o}, not yours alone",
                    local,
                    "remove it and the checkpoints beside it, or use a folder you own",
                )
            data = read_regular(local, max_bytes=_LEDGER_MAX_BYTES)
    except FileNotFoundError:
        return {}
    try:
        ledger = json.loads(data)
        steps = ledger["checkpoints"]
        if not all(
            isinstance(files, dict) and all(isinstance(v, str) for v in files.values())
            for files in steps.values()
        ):
            raise TypeError("file digests must be strings")
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise UntrustedCheckpointError(
            f"checkpoint ledger is not a ledger ({error})",
            path,
            "remove it and the checkpoints beside it, or use another checkpoint folder",
        ) from None
    return steps


def _write_ledger(folder: str, steps: dict[str, dict[str, str]]) -> None:
    """Write the ledger of `folder` atomically (local: temp file + rename; remote: one PUT)."""
    data = json.dumps({"format": 1, "checkpoints": steps}, indent=1, sort_keys=True).encode()
    path = _ledger_path(folder)
    fs, root = fsspec.core.url_to_fs(path)
    if _is_remote(folder):
        fs.pipe_file(root, data)
        return
    fd, tmp = tempfile.mkstemp(prefix=".ledger-", dir=os.path.dirname(root))
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, root)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _hash_step(path: str) -> dict[str, str]:
    """Return {file name: sha256 hex} of every file in step folder `path`.

    A local entry that is not a regular file (a FIFO, device, folder) is recorded as such
    without reading a byte, so it can never match a digest.
    """
    fs, root = fsspec.core.url_to_fs(path)
    digests = {}
    for entry in fs.ls(root, detail=True):
        name = entry["name"].rstrip("/").rsplit("/", 1)[-1]
        digest = hashlib.sha256()
        if _is_remote(path):
            if entry["type"] != "file":
                digests[name] = "not a file"
                continue
            handle = fs.open(entry["name"], "rb")
        else:
            try:
                handle = os.fdopen(open_regular(os.path.join(root, name)), "rb")
            except UserError:
                digests[name] = "not a regular file"
                continue
        with handle:
            while chunk := handle.read(_HASH_CHUNK):
                digest.update(chunk)
        digests[name] = digest.hexdigest()
    return digests


def _verify_step(folder: str, path: str) -> str | None:
    """Return why step folder `path` may not be read (None when it matches the ledger)."""
    recorded = _read_ledger(folder).get(_step_name(path))
    if recorded is None:
        return (
            f"checkpoint is not in the ledger {_ledger_path(folder)} (not committed by this "
            "trainer, or its commit was interrupted)"
        )
    found = _hash_step(path)
    if METADATA_FILE not in recorded:
        return f"the ledger entry of the checkpoint lists no {METADATA_FILE}"
    for file in sorted(set(recorded) | set(found)):
        if recorded.get(file) != found.get(file):
            if file not in found:
                return f"checkpoint file {file} recorded at commit is missing"
            if file not in recorded:
                return f"checkpoint file {file} was not there at commit"
            return (
                f"checkpoint file {file} differs from the sha256 recorded at commit "
                f"({found[file][:12]}..., recorded {recorded[file][:12]}...)"
            )
    return None


def capture_rng_state() -> dict[str, Any]:
    """Return this process's torch (CPU and CUDA), numpy and `random` generator states."""
    mt, keys, pos, has_gauss, gauss = cast(
        tuple[str, np.ndarray, int, int, float], np.random.get_state()
    )
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "name": mt,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "gauss": float(gauss),
        },
        "python": [random.getstate()[0], list(random.getstate()[1]), random.getstate()[2]],
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Set the generator states saved by `capture_rng_state`."""
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state(
        (n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"])
    )
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _encode(rank_state: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    torch.save(rank_state, buf)
    return buf.getvalue()


def _failure_summary(error: CheckpointException) -> str:
    return "; ".join(f"rank {rank}: {exc!r}" for rank, (exc, _) in sorted(error.failures.items()))


def _save_failed(what: str, folder: str, error: CheckpointException) -> CheckpointSaveError:
    """Return the error of a failed save: `what` failed, naming each failing rank's error."""
    return CheckpointSaveError(
        f"{what} failed ({_failure_summary(error)}); the previous checkpoint is kept: free space "
        f"or fix access to {folder}, then restart"
    )


def _is_transient(error: BaseException) -> bool:
    if isinstance(error, CheckpointException):
        return bool(error.failures) and all(is_transient(e) for e, _ in error.failures.values())
    return is_transient(error)


class Checkpointer:
    """Saves, lists and restores distributed checkpoints of one run; every method is collective.

    Args:
        folder: checkpoint folder, a local path or an fsspec URL (s3://bucket/run/checkpoints;
            credentials and endpoint from the usual AWS environment, e.g. AWS_ENDPOINT_URL).
        keep: complete checkpoints kept; older ones (and partial ones older than the newest
            complete one) are deleted by rank 0 after each completed save.
        async_save: write in a background thread (see the module docstring).
        retries: attempts of a synchronous save that fails with a transient storage error
            (connection reset, timeout) on every failing rank.
        retry_backoff_s: first wait between attempts, doubling each time (at most 8x), in s.
        storage_hook: wraps each save's DCP storage writer (fault injection), or None.

    Raises:
        ValueError: if `keep` < 1 or `retries` < 1.
    """

    def __init__(
        self,
        folder: str | os.PathLike[str],
        *,
        keep: int = 2,
        async_save: bool = False,
        retries: int = 3,
        retry_backoff_s: float = 1.0,
        storage_hook: StorageHook | None = None,
        wait_timeout_s: float = 600.0,
    ) -> None:
        if keep < 1 or retries < 1:
            raise ValueError(f"keep and retries must be >= 1, got keep={keep}, retries={retries}")
        self.folder = os.fspath(folder).rstrip("/")
        self.keep, self.async_save, self.retries = keep, async_save, retries
        self.retry_backoff_s, self.storage_hook = retry_backoff_s, storage_hook
        self.wait_timeout_s = wait_timeout_s
        if not _is_remote(self.folder):
            ensure_private_dir(fsspec.core.url_to_fs(self.folder)[1])
        self.rank = dist.get_rank()
        self.saves: list[SaveResult] = []
        """every save of this process, in order"""
        self.failed_saves: list[tuple[int, str]] = []
        """(step, error) of async saves that failed transiently and were skipped"""
        self._pending: tuple[int, str, Any] | None = None  # step, path, Future
        self._group = None
        self._stager: DefaultStager | None = None
        if async_save:
            # DCP's background collectives need a CPU group of their own: sharing the training
            # group from a second thread would interleave collectives differently per rank.
            self._group = dist.new_group(backend="gloo")
            cuda = torch.cuda.is_available()
            self._stager = DefaultStager(
                StagingOptions(
                    use_pinned_memory=cuda,
                    use_shared_memory=False,
                    use_async_staging=False,
                    use_non_blocking_copy=cuda,
                )
            )

    def _writer(self, path: str, step: int) -> FileSystemWriter:
        writer = FsspecWriter(path) if _is_remote(path) else FileSystemWriter(path)
        return self.storage_hook(writer, step) if self.storage_hook else writer

    @staticmethod
    def _reader(path: str) -> FileSystemReader:
        return FsspecReader(path) if _is_remote(path) else FileSystemReader(path)

    def latest(self) -> str | None:
        """Return the newest complete checkpoint folder in the ledger, or None.

        Complete step folders that the ledger does not list (planted, or a commit killed
        before its ledger write) are skipped with a warning; nothing of them is read.
        """
        ledger = _read_ledger(self.folder)
        for _, path, done in reversed(list_checkpoints(self.folder)):
            if not done:
                continue
            if _step_name(path) in ledger:
                return path
            warnings.warn(
                f"skipping checkpoint {path}: it is not in the ledger {_ledger_path(self.folder)} "
                "(not committed by this trainer, or its commit was interrupted)",
                stacklevel=2,
            )
        return None

    def _commit(self, path: str) -> None:
        """Rank 0: record the sha256 of every file of the committed step folder `path`."""
        if self.rank != 0:
            return
        ledger = _read_ledger(self.folder)
        ledger[_step_name(path)] = _hash_step(path)
        _write_ledger(self.folder, ledger)

    def save(
        self,
        step: int,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        rank_state: dict[str, Any],
    ) -> SaveResult:
        """Checkpoint model, optimizer and this rank's `rank_state` as `step-NNNNNN`; collective.

        Waits for the previous async save first. A synchronous save is complete on return;
        an async one once `wait()` returns (or the next `save` starts).

        `step` counts the optimizer steps completed; `rank_state` is this rank's state:
        tensors, numbers, strings, lists and dicts (loaded back with `weights_only=True`).

        Raises:
            CheckpointSaveError: the save failed (for sync saves: after `retries` transient
                failures, or at once for other errors such as a full disk); names each failing
                rank and its error. The partial folder is removed; the previous complete
                checkpoint stays the latest.
        """
        start = time.perf_counter()
        self.wait()
        path = _join(self.folder, f"step-{step:06d}")
        group = self._group
        if self.rank == 0:  # a partial folder of this step from an earlier attempt
            ledger = _read_ledger(self.folder)
            if ledger.pop(_step_name(path), None) is not None:
                _write_ledger(self.folder, ledger)
            fs, root = fsspec.core.url_to_fs(path)
            if fs.exists(root):
                fs.rm(root, recursive=True)
        dist.barrier(group=group)
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state = {
            "model": model_sd,
            "optim": optim_sd,
            _RANK_KEY.format(self.rank): _encode(rank_state),
        }
        if self.async_save:
            future = dcp.async_save(
                state,
                storage_writer=self._writer(path, step),
                process_group=group,
                async_stager=self._stager,
            )
            self._pending = (step, path, future)
        else:
            self._save_sync(state, path, step)
            self._commit(path)
            self._retain()
        result = SaveResult(
            step=step,
            path=path,
            blocking_s=time.perf_counter() - start,
            asynchronous=self.async_save,
        )
        self.saves.append(result)
        return result

    def _save_sync(self, state: dict[str, Any], path: str, step: int) -> None:
        try:
            for attempt in Retrying(
                stop=stop_after_attempt(self.retries),
                wait=wait_exponential(
                    multiplier=self.retry_backoff_s / 2, max=8 * self.retry_backoff_s
                ),
                retry=retry_if_exception(_is_transient),
                reraise=True,
            ):
                with attempt:
                    dcp.save(state, storage_writer=self._writer(path, step))
        except CheckpointException as error:
            self._remove_partial(path)
            what = f"saving checkpoint step {step} to {path}"
            raise _save_failed(what, self.folder, error) from error.failures[min(error.failures)][0]

    def _remove_partial(self, path: str) -> None:
        if self.rank == 0:
            fs, root = fsspec.core.url_to_fs(path)
            if fs.exists(root) and not fs.exists(f"{root}/{METADATA_FILE}"):
                fs.rm(root, recursive=True)

    def wait(self) -> float:
        """Block until the async save in flight (if any) is complete; return the seconds waited.

        A transient storage failure of that save is recorded in `failed_saves` and warned
        about (the next save tries again); any other failure raises.

        Raises:
            CheckpointSaveError: the background save failed with a non-transient error, or did
                not finish within `wait_timeout_s` (a stalled mount or object store).
        """
        if self._pending is None:
            return 0.0
        start = time.perf_counter()
        step, path, future = self._pending
        self._pending = None
        try:
            future.result(timeout=self.wait_timeout_s)
        except concurrent.futures.TimeoutError:
            raise CheckpointSaveError(
                f"async checkpoint step {step} to {path} did not finish within "
                f"{self.wait_timeout_s:g} s; the previous checkpoint is kept: check the storage "
                f"of {self.folder} (a stalled mount or object store) or raise "
                "parallel.collective_timeout_s"
            ) from None
        except CheckpointException as error:
            self._remove_partial(path)
            if not _is_transient(error):
                what = f"async checkpoint step {step} to {path}"
                first = error.failures[min(error.failures)][0]
                raise _save_failed(what, self.folder, error) from first
            self.failed_saves.append((step, _failure_summary(error)))
            warnings.warn(
                f"async checkpoint step {step} skipped after a transient storage error "
                f"({_failure_summary(error)}); the next save tries again",
                stacklevel=2,
            )
        else:
            self._commit(path)
            self._retain()
        return time.perf_counter() - start

    def _retain(self) -> None:
        """Rank 0: keep the newest `keep` complete checkpoints; drop partial ones older than them."""
        if self.rank != 0:
            return
        found = list_checkpoints(self.folder)
        ledger = _read_ledger(self.folder)
        # only steps this trainer committed (in its ledger) count and are pruned; a complete
        # step folder copied in from elsewhere is neither ours to delete nor a newer checkpoint
        complete = [(s, p) for s, p, done in found if done and _step_name(p) in ledger]
        if not complete:
            return
        newest = complete[-1][0]
        doomed = [p for _, p in complete[: -self.keep]] + [
            p for s, p, done in found if not done and s < newest
        ]
        for path in doomed:
            fs, root = fsspec.core.url_to_fs(path)
            fs.rm(root, recursive=True)
        kept = {_step_name(p) for _, p in complete[-self.keep :]}
        if set(ledger) - kept:
            _write_ledger(self.folder, {k: v for k, v in ledger.items() if k in kept})

    def load(self, path: str, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """Load model and optimizer in place from step folder `path`; collective.

        Returns:
            This rank's `rank_state`, or {"step": <step of the folder>} when the checkpoint was
            saved by fewer ranks than this rank's index (after an elastic resize).

        Raises:
            FileNotFoundError: if `path` has no `.metadata` (not a complete checkpoint).
            UntrustedCheckpointError: `path` is not in the ledger, or a file differs from the
                sha256 recorded at commit (checked by rank 0 before DCP reads anything).
        """
        fs, root = fsspec.core.url_to_fs(path)
        if not fs.exists(f"{root}/{METADATA_FILE}"):
            raise FileNotFoundError(
                f"{path} is not a complete checkpoint (no {METADATA_FILE} from DCP)"
            )
        verdict = [_verify_step(self.folder, path) if self.rank == 0 else None]
        if dist.get_world_size() > 1:
            dist.broadcast_object_list(verdict, src=0)
        if verdict[0] is not None:
            raise UntrustedCheckpointError(
                verdict[0],
                path,
                "do not resume from it: delete that step folder to resume from the previous "
                "checkpoint, or start a new run",
            )
        key = _RANK_KEY.format(self.rank)
        saved_keys = self._reader(path).read_metadata().state_dict_metadata
        model_sd, optim_sd = get_state_dict(model, optimizer)
        mismatch = check_same_model(path, saved_keys, model_sd)
        found = torch.tensor([mismatch is not None], dtype=torch.int32)
        if dist.get_world_size() > 1:  # every rank raises, or none: no rank left in dcp.load
            dist.all_reduce(found, op=dist.ReduceOp.MAX, group=self._group)
        if found.item():
            raise mismatch or UserError(
                f"checkpoint {path} holds another model (found by another rank)",
                "model.name",
                _MISMATCH_FIX,
            )
        state: dict[str, Any] = {"model": model_sd, "optim": optim_sd}
        if key in saved_keys:
            state[key] = b""
        dcp.load(state, storage_reader=self._reader(path))
        set_state_dict(
            model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"]
        )
        if key in state:
            return torch.load(io.BytesIO(state[key]), weights_only=True)
        match = _STEP_DIR.match(_step_name(path))
        if match is None:
            raise ValueError(f"{path} is not a step-NNNNNN checkpoint folder")
        return {"step": int(match.group(1))}

    def close(self) -> None:
        """Wait for the save in flight and release the staging buffers and the process group."""
        try:
            self.wait()
        finally:
            if self._stager is not None:
                self._stager.close()
                self._stager = None
            if self._group is not None:
                dist.destroy_process_group(self._group)
                self._group = None


#: What to do about a checkpoint of another model.
_MISMATCH_FIX = (
    "resume with the model.name (and preset) that wrote it, or set checkpoint.folder to a new "
    "folder to start afresh"
)


def check_same_model(
    path: str, saved: dict[str, Any], model_sd: dict[str, Any]
) -> UserError | None:
    """Return the error when checkpoint `path` lacks a parameter of `model_sd` or its global shape.

    `saved` is the checkpoint's DCP `state_dict_metadata` (model entries "model.<name>"); a
    DTensor's `shape` is its global shape, so a checkpoint written under any layout matches.

    Returns:
        None when every parameter is there at its shape, else a `UserError` naming
        `model.name` and the first differing parameters.
    """
    missing = [k for k in model_sd if f"model.{k}" not in saved]
    resized = [
        f"{k} {tuple(v.shape)} vs {tuple(saved[f'model.{k}'].size)}"
        for k, v in model_sd.items()
        if k not in missing
        and hasattr(v, "shape")
        and hasattr(saved[f"model.{k}"], "size")
        and tuple(v.shape) != tuple(saved[f"model.{k}"].size)
    ]
    if not missing and not resized:
        return None
    shown = ", ".join([*missing, *resized][:3])
    return UserError(
        f"checkpoint {path} holds another model: {len(missing)} of this model's "
        f"{len(model_sd)} parameters are missing and {len(resized)} differ in shape ({shown})",
        "model.name",
        _MISMATCH_FIX,
    )


def export_weights(
    model: nn.Module | None,
    path: str | os.PathLike[str],
    metadata: dict[str, str] | None = None,
    *,
    state_dict: dict[str, torch.Tensor] | None = None,
) -> Path | None:
    """Gather the full (unsharded, fp32) model weights and write them to safetensors; collective.

    Rank 0 writes `path` atomically (temporary name, then rename); other ranks return None.
    With `model` None, rank 0 writes `state_dict`, the full weights gathered already
    (pipeline stages: `parallel.gather_full_state_dict`).
    """
    full = (
        state_dict
        if model is None
        else get_model_state_dict(
            model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
    )
    if dist.get_rank() != 0 or full is None:
        return None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tensors = {k: cast(torch.Tensor, v).detach().float().contiguous() for k, v in full.items()}
    save_file(tensors, str(tmp), metadata=metadata or {})
    os.replace(tmp, path)
    return path


def load_weights(path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """Load a safetensors weight file (no pickle) as a CPU state dict.

    Raises:
        FileNotFoundError: if `path` does not exist.
    """
    if not Path(path).is_file():
        raise FileNotFoundError(f"weights file {path} does not exist; train a model first")
    return load_file(str(path), device="cpu")
