"""Distributed checkpoints on DCP's own commit, async save, retention; full-weight export.

Layout of a checkpoint folder (a local path or an fsspec URL, e.g. s3://bucket/run/checkpoints):

    step-000100/        one folder per saved step
      __0_0.distcp ...  DCP data, one file per rank: the sharded model + AdamW state and each
                        rank's own state (step, RNG states, loader position)
      .metadata         written last by DCP's coordinator (rank 0), only after every rank's
                        files are written: a folder without it is partial and never read
    step-000200/        an interrupted save (no .metadata): ignored by restore, removed by
                        retention once a newer checkpoint is complete

Commit protocol: `torch.distributed.checkpoint` (DCP) gathers every rank's write results on
the coordinator and only then writes `.metadata` (temporary name, then rename; on object
storage a single PUT), so "has .metadata" == "complete". There is no marker file of our own.

Async save (`async_save=True`): the state is staged into host memory (pinned memory with
CUDA, plain host memory on CPU), then a background thread writes it over a dedicated gloo
process group, so training continues during the write. The blocking part (staging, plus
waiting for the previous save still in flight) is what `SaveResult.blocking_s` reports.

Loads work on the same or another world size (DCP reshards the model and optimizer); per-rank
state is restored for ranks that existed at save time.
"""

from __future__ import annotations

import io
import os
import random
import re
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

from platform_lib.storage import is_transient

__all__ = [
    "METADATA_FILE",
    "CheckpointSaveError",
    "Checkpointer",
    "SaveResult",
    "capture_rng_state",
    "export_weights",
    "find_latest_checkpoint",
    "list_checkpoints",
    "load_weights",
    "restore_rng_state",
]

METADATA_FILE = ".metadata"
_STEP_DIR = re.compile(r"^step-(\d{6,})$")
_RANK_KEY = "rank_state_{:05d}"
#: Writer wrapper hook: (DCP storage writer, step) -> the writer to use (fault injection).
StorageHook = Callable[[FileSystemWriter, int], FileSystemWriter]


class CheckpointSaveError(RuntimeError):
    """A checkpoint save failed on some rank; the previous complete checkpoint stays usable."""


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
    ) -> None:
        if keep < 1 or retries < 1:
            raise ValueError(f"keep and retries must be >= 1, got keep={keep}, retries={retries}")
        self.folder = os.fspath(folder).rstrip("/")
        self.keep, self.async_save, self.retries, self.storage_hook = (
            keep,
            async_save,
            retries,
            storage_hook,
        )
        self.retry_backoff_s = retry_backoff_s
        self.rank = dist.get_rank()
        self.saves: list[SaveResult] = []
        """every save of this process, in order"""
        self.failed_saves: list[tuple[int, str]] = []
        """(step, error) of async saves that failed transiently and were skipped"""
        self._pending: tuple[int, str, Any] | None = (
            None  # (step, path, Future or AsyncSaveResponse)
        )
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
        """Return the newest complete checkpoint folder, or None (see `find_latest_checkpoint`)."""
        return find_latest_checkpoint(self.folder)

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

        Args:
            step: optimizer steps completed.
            model: the FSDP-wrapped model.
            optimizer: its optimizer.
            rank_state: this rank's state: tensors, numbers, strings, lists and dicts (loaded
                back with `weights_only=True`).

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
            raise CheckpointSaveError(
                f"saving checkpoint step {step} to {path} failed ({_failure_summary(error)}); the previous "
                f"checkpoint is kept: free space or fix access to {self.folder}, then restart"
            ) from error.failures[min(error.failures)][0]

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
            CheckpointSaveError: the background save failed with a non-transient error.
        """
        if self._pending is None:
            return 0.0
        start = time.perf_counter()
        step, path, future = self._pending
        self._pending = None
        try:
            future.result()
        except CheckpointException as error:
            self._remove_partial(path)
            if not _is_transient(error):
                raise CheckpointSaveError(
                    f"async checkpoint step {step} to {path} failed ({_failure_summary(error)}); the previous "
                    f"checkpoint is kept: free space or fix access to {self.folder}, then restart"
                ) from error.failures[min(error.failures)][0]
            self.failed_saves.append((step, _failure_summary(error)))
            warnings.warn(
                f"async checkpoint step {step} skipped after a transient storage error "
                f"({_failure_summary(error)}); the next save tries again",
                stacklevel=2,
            )
        else:
            self._retain()
        return time.perf_counter() - start

    def _retain(self) -> None:
        """Rank 0: keep the newest `keep` complete checkpoints; drop partial ones older than them."""
        if self.rank != 0:
            return
        found = list_checkpoints(self.folder)
        complete = [(s, p) for s, p, done in found if done]
        if not complete:
            return
        newest = complete[-1][0]
        doomed = [p for _, p in complete[: -self.keep]] + [
            p for s, p, done in found if not done and s < newest
        ]
        for path in doomed:
            fs, root = fsspec.core.url_to_fs(path)
            fs.rm(root, recursive=True)

    def load(self, path: str, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """Load model and optimizer in place from step folder `path`; collective.

        Returns:
            This rank's `rank_state`, or {"step": <step of the folder>} when the checkpoint was
            saved by fewer ranks than this rank's index (after an elastic resize).

        Raises:
            FileNotFoundError: if `path` has no `.metadata` (not a complete checkpoint).
        """
        fs, root = fsspec.core.url_to_fs(path)
        if not fs.exists(f"{root}/{METADATA_FILE}"):
            raise FileNotFoundError(
                f"{path} is not a complete checkpoint (no {METADATA_FILE} from DCP)"
            )
        key = _RANK_KEY.format(self.rank)
        saved_keys = self._reader(path).read_metadata().state_dict_metadata
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state: dict[str, Any] = {"model": model_sd, "optim": optim_sd}
        if key in saved_keys:
            state[key] = b""
        dcp.load(state, storage_reader=self._reader(path))
        set_state_dict(
            model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"]
        )
        if key in state:
            return torch.load(io.BytesIO(state[key]), weights_only=True)
        match = _STEP_DIR.match(path.rstrip("/").rsplit("/", 1)[-1])
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


def export_weights(
    model: nn.Module, path: str | os.PathLike[str], metadata: dict[str, str] | None = None
) -> Path | None:
    """Gather the full (unsharded, fp32) model weights and write them to safetensors; collective.

    Rank 0 writes `path` atomically (temporary name, then rename); other ranks return None.
    """
    full = get_model_state_dict(
        model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    if dist.get_rank() != 0:
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
