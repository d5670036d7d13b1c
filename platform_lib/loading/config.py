"""Loader options that are not part of the `build_loader` call itself."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from platform_lib.imaging.decode import CameraResize

__all__ = ["LoaderConfig"]


@dataclass(kw_only=True, frozen=True)
class LoaderConfig:
    """Options of `platform_lib.loading.build_loader`; the defaults suit training.

    Raises:
        ValueError: from `__post_init__`, naming the offending field.
    """

    prefetch_depth: int = 2
    """batches each worker prepares ahead of the training loop (and batches the main process
    receives ahead), in batches; each costs one shared-memory ring slot per worker"""
    shuffle_buffer: int = 2048
    """window of the block shuffle, in samples: the global order is shuffled within
    consecutive windows of this many samples after shuffling the shard order"""
    shards_ahead: int = 1
    """shards each worker fetches into the cache ahead of its next batch (remote datasets), in shards"""
    pad_policy: Literal["pad", "drop"] = "pad"
    """equal batches on every rank: "pad" repeats samples from the start of the epoch order,
    "drop" leaves out the tail that does not fill a global batch (both are counted in `stats`)"""
    cache_dir: str | None = None
    """node-local cache folder for remote shards, shared by all ranks and workers of a node;
    None: `$DRIVETRAIN_CACHE` or `~/.cache/drivetrain/shards`"""
    cache_limit_bytes: int = 200 * 2**30
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
    window_frames: int = 1
    """k: frames per sample; k > 1 yields k consecutive frames of one log (never crossing logs)"""
    window_stride: int = 1
    """frames between the first frames of consecutive windows of one log, in frames"""
    mix_epoch_samples: int | None = None
    """samples per epoch when mixing datasets; None: the sum of their sizes"""
    pin_memory: bool = True
    """page-lock the shared-memory ring once (only when CUDA is available), so batches copy to
    the GPU without staging"""
    shm_dir: str = "/dev/shm"
    """tmpfs folder of the loader's shared-memory ring (allocated once per loader)"""
    max_retries: int = 4
    """retries of a failed object-store request (transient errors only), in attempts"""
    retry_backoff_s: float = 0.5
    """first retry delay, doubled per retry (capped at 8 s), in s"""
    worker_timeout_s: float = 0.0
    """longest wait for one batch from a worker before raising, in s; 0: no limit"""
    storage_options: dict[str, Any] = field(default_factory=dict)
    """extra fsspec options for remote datasets (e.g. {"endpoint_url": ...} for s3)"""
    multiprocessing_context: str | None = None
    """start method of worker processes ("fork", "spawn", "forkserver"); None: "fork" where the
    platform has it (fast start, also inside spawned ranks), else Python's default"""

    def __post_init__(self) -> None:
        positive = {
            "prefetch_depth": self.prefetch_depth,
            "shuffle_buffer": self.shuffle_buffer,
            "window_frames": self.window_frames,
            "window_stride": self.window_stride,
            "cache_limit_bytes": self.cache_limit_bytes,
        }
        for name, value in positive.items():
            if value < 1:
                raise ValueError(f"LoaderConfig.{name} must be >= 1, got {value}")
        for name in ("shards_ahead", "max_retries"):
            if getattr(self, name) < 0:
                raise ValueError(f"LoaderConfig.{name} must be >= 0, got {getattr(self, name)}")
        if self.pad_policy not in ("pad", "drop"):
            raise ValueError(
                f"LoaderConfig.pad_policy must be 'pad' or 'drop', got {self.pad_policy!r}"
            )
        if self.verify not in ("shard", "member", "none"):
            raise ValueError(
                f"LoaderConfig.verify must be 'shard', 'member' or 'none', got {self.verify!r}"
            )
        if self.error_policy not in ("raise", "skip"):
            raise ValueError(
                f"LoaderConfig.error_policy must be 'raise' or 'skip', got {self.error_policy!r}"
            )
        if self.mix_epoch_samples is not None and self.mix_epoch_samples < 1:
            raise ValueError(
                f"LoaderConfig.mix_epoch_samples must be >= 1, got {self.mix_epoch_samples}"
            )
        if self.retry_backoff_s < 0 or self.worker_timeout_s < 0:
            raise ValueError("LoaderConfig.retry_backoff_s and worker_timeout_s must be >= 0")
