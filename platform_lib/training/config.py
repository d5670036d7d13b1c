"""Training configuration: one frozen dataclass, validated on construction."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from platform_lib.models.registry import MODEL_PRESETS

__all__ = ["TrainConfig", "hash_config"]

_BACKENDS = ("auto", "gloo", "nccl")


@dataclass(kw_only=True, frozen=True)
class TrainConfig:
    """Everything that decides a training run besides the dataset.

    Flat scalar fields only, so the config is a cacheable Flyte input and a set of MLflow
    params. The model is named by preset (`platform_lib.models.list_models()`).

    Raises:
        ValueError: from `__post_init__`, naming every field with an impossible value.
    """

    preset: str = "custom"
    """name of the preset this config came from (recorded for lineage)"""
    model: str = "bev_fusion_small"
    """model preset name in the model zoo"""
    batch_size: int = 4
    """samples per rank per optimizer step"""
    lr: float = 2e-3
    """peak AdamW learning rate"""
    weight_decay: float = 1e-4
    """AdamW decoupled weight decay"""
    max_steps: int = 200
    """optimizer steps of the run (a resumed run continues up to this step)"""
    warmup_steps: int = 10
    """linear learning-rate warmup, in steps; cosine decay to 10 % of `lr` afterwards"""
    grad_clip: float = 1.0
    """max global L2 norm of the gradients; 0 disables clipping"""
    pos_weight: float = 3.0
    """weight of occupied cells in the BCE-with-logits loss (occupancy is sparse)"""
    mixed_precision: bool = True
    """bf16 parameters/activations in forward and backward, fp32 gradient reduction and master weights"""
    reshard_after_forward: bool = True
    """FSDP frees gathered parameters after forward (less memory, one more all-gather per block)"""
    checkpoint_interval: int = 100
    """distributed checkpoint every this many steps (and at the last step), in steps"""
    keep_checkpoints: int = 2
    """most recent complete checkpoints kept on disk"""
    num_workers: int = 1
    """loader worker processes per rank"""
    num_threads: int = 1
    """intra-op CPU threads per rank (torch.set_num_threads)"""
    backend: str = "auto"
    """process group backend: "auto" (nccl with CUDA, else gloo), "gloo" or "nccl" (CUDA only)"""
    seed: int = 0
    """seed of weights init (same on every rank) and data order"""
    train_split: str = "train"
    """index split trained on"""
    val_split: str = "val"
    """index split evaluated on"""
    log_interval: int = 1
    """steps between metrics lines (rank 0 writes metrics.jsonl), in steps"""

    def __post_init__(self) -> None:
        errors: list[str] = []
        for name in ("batch_size", "max_steps", "checkpoint_interval", "keep_checkpoints",
                     "num_threads", "log_interval"):
            if getattr(self, name) < 1:
                errors.append(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("warmup_steps", "num_workers", "seed"):
            if getattr(self, name) < 0:
                errors.append(f"{name} must be >= 0, got {getattr(self, name)}")
        if not self.lr > 0:
            errors.append(f"lr must be > 0, got {self.lr}")
        for name in ("weight_decay", "grad_clip"):
            if not getattr(self, name) >= 0:
                errors.append(f"{name} must be >= 0, got {getattr(self, name)}")
        if not self.pos_weight > 0:
            errors.append(f"pos_weight must be > 0, got {self.pos_weight}")
        if self.warmup_steps >= self.max_steps and self.warmup_steps > 0:
            errors.append(
                f"warmup_steps ({self.warmup_steps}) must be < max_steps ({self.max_steps})"
            )
        if self.backend not in _BACKENDS:
            errors.append(f"backend must be one of {_BACKENDS}, got {self.backend!r}")
        if self.model not in MODEL_PRESETS:
            errors.append(f"model must be one of {sorted(MODEL_PRESETS)}, got {self.model!r}")
        if not self.train_split or self.train_split == self.val_split:
            errors.append(
                f"train_split ({self.train_split!r}) and val_split ({self.val_split!r}) must be "
                f"distinct, non-empty split names"
            )
        if errors:
            raise ValueError("invalid TrainConfig: " + "; ".join(errors))

    def to_dict(self) -> dict[str, Any]:
        """Return the fields as a JSON-serialisable dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        """Build a config from `to_dict` output.

        Raises:
            ValueError: naming unknown fields, or from validation.
        """
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown TrainConfig fields: {', '.join(unknown)}")
        return cls(**values)


def hash_config(cfg: TrainConfig) -> str:
    """Return the sha256 hex of the canonical JSON of `cfg` (lineage and cache key)."""
    text = json.dumps(cfg.to_dict(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()
