"""Loader options that are not part of the `build_loader` call itself."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from platform_lib.imaging.decode import CameraResize

__all__ = ["DEFAULT_WORKER_TIMEOUT_S", "LoaderConfig"]

#: Default longest wait for one batch from a worker, in s: a cold worker's first batch may
#: download and hash a shard and decode a batch of full-size cameras.
DEFAULT_WORKER_TIMEOUT_S = 300.0


class LoaderConfig(BaseModel):
    """Options of `platform_lib.loading.loader.build_loader`; the defaults suit training.

    Pickles into spawned workers like any pydantic model (`sample_transform` must itself be
    picklable).

    Raises:
        pydantic.ValidationError (a `ValueError`): a field out of its bounds or choices, or an
            unknown field; the message names the field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    prefetch_depth: int = Field(default=2, ge=1)
    """batches each worker prepares ahead of the training loop (and batches the main process
    receives ahead), in batches; bounded also by `shm_budget_bytes`"""
    shuffle_buffer: int = Field(default=2048, ge=1)
    """window of the block shuffle, in samples: the global order is shuffled within
    consecutive windows of this many samples after shuffling the shard order"""
    shards_ahead: int = Field(default=1, ge=0)
    """shards each worker fetches into the cache ahead of its next batch (remote datasets), in shards"""
    pad_policy: Literal["pad", "drop"] = "pad"
    """equal batches on every rank: "pad" repeats samples from the start of the epoch order,
    "drop" leaves out the tail that does not fill a global batch (both are counted in `stats`)"""
    cache_dir: str | None = None
    """node-local cache folder for remote shards, shared by all ranks and workers of a node;
    None: `$DRIVETRAIN_CACHE` or `~/.cache/drivetrain/shards`"""
    cache_limit_bytes: int = Field(default=200 * 2**30, ge=1)
    """most bytes the cache folder holds before least-recently-used shards are evicted, in bytes"""
    verify: Literal["shard", "member", "none"] = "shard"
    """integrity checks: "shard" = sha256 of each shard once per node (recorded in the cache
    folder) + xxh3_64 of every member on every read; "member" = tar headers + sha256 of every
    member on every read; "none" = no checks (a flipped byte goes unnoticed)"""
    error_policy: Literal["raise", "skip"] = "raise"
    """bad sample or index row: "raise" stops with a specific error; "skip" drops it and counts it"""
    sample_transform: Callable[[dict[str, Any]], Any] | None = None
    """picklable callable run in the workers on each decoded sample; its outputs are stacked
    with `default_collate`. None: the batch holds per-sample lists"""
    camera_resize: CameraResize | None = None
    """decode cameras straight to this size (DCT-domain downscaling, aspect-preserving crop;
    calib intrinsics/width/height follow, see `imaging/decode.py`); None: full size. Used by
    decode="cpu"/"gpu"/"auto"; decode="none" hands JPEG bytes through unchanged"""
    decode_threads: int | None = Field(default=None, ge=1)
    """threads in each worker that decode one sample's cameras at once (decode="cpu", with or
    without `camera_resize`: simplejpeg's decode and Pillow's resize both release the GIL,
    measured by `bench/gil.py`); results are identical to one thread. None: the CPUs this
    process may use, divided by the loader processes on the node (workers x LOCAL_WORLD_SIZE),
    between 1 and 6 (the cameras of a sample); see `loading.dataset.resolve_decode_threads`"""
    window_frames: int = Field(default=1, ge=1)
    """k: frames per sample; k > 1 yields k consecutive frames of one log (never crossing logs)"""
    window_stride: int = Field(default=1, ge=1)
    """frames between the first frames of consecutive windows of one log, in frames"""
    mix_epoch_samples: int | None = Field(default=None, ge=1)
    """samples per epoch when mixing datasets; None: the sum of their sizes"""
    pin_memory: bool = True
    """page-lock the shared-memory ring once (only when CUDA is available), so batches copy to
    the GPU without staging"""
    shm_dir: str = "/dev/shm"
    """tmpfs folder of the loader's shared-memory ring (one sparse file per loader)"""
    shm_budget_bytes: int | None = Field(default=None, ge=1)
    """most /dev/shm bytes the loader's ring may use, in bytes, split evenly between the
    workers; a worker whose part is full waits for the training loop to release batches.
    None: this rank's share of the node (`ring.node_shm_budget`: min(/dev/shm size, a quarter
    of the cgroup memory limit) / LOCAL_WORLD_SIZE, capped at 2.5 GiB). Must hold one batch
    per worker, else `RingError`"""
    max_retries: int = Field(default=4, ge=0)
    """retries of a failed object-store request (transient errors only), in attempts"""
    retry_backoff_s: float = Field(default=0.5, ge=0)
    """first retry delay, doubled per retry (capped at 8 s), in s"""
    worker_timeout_s: float = Field(default=DEFAULT_WORKER_TIMEOUT_S, gt=0)
    """longest wait for one batch from a worker before raising `WorkerTimeoutError` (naming the
    worker's pid, the epoch, step and shards awaited), in s. Generous by default: a cold
    worker's first batch may download and hash a shard; raise it for very slow stores or
    transforms"""
    storage_options: dict[str, Any] = Field(default_factory=dict)
    """extra fsspec options for remote datasets (e.g. {"endpoint_url": ...} for s3)"""
    multiprocessing_context: Literal["fork", "spawn", "forkserver"] | None = None
    """start method of worker processes ("fork", "spawn", "forkserver"); None: "fork" where the
    platform has it (fast start, also inside spawned ranks), else Python's default"""
