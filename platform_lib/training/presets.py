"""Named training presets: small functions deriving from one base config."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from platform_lib.training.config import TrainConfig

__all__ = [
    "PRESETS",
    "get_preset",
    "large",
    "list_presets",
    "pandaset_smoke",
    "small",
    "synthetic_default",
]


def small() -> TrainConfig:
    """CPU unit tests and the golden-loss file: small model, 12 steps, no loader workers.

    fp32 (mixed_precision=False): bf16 CPU kernels round differently per instruction set
    (AMX / AVX512-BF16 / emulated), fp32 keeps the golden losses portable across machines.
    The other presets train in bf16.
    """
    return TrainConfig(
        preset="small", model="bev_fusion_small", batch_size=2, lr=2e-3, max_steps=12,
        warmup_steps=2, checkpoint_interval=6, num_workers=0, seed=0, mixed_precision=False,
    )


def synthetic_default() -> TrainConfig:
    """Default pipeline run on synthetic logs: 160 steps, ~1-2 min on a 2-core CPU with 2 ranks."""
    return dataclasses.replace(
        small(), preset="synthetic_default", batch_size=4, lr=3e-3, max_steps=160,
        warmup_steps=15, checkpoint_interval=80, num_workers=1, reshard_after_forward=False,
        mixed_precision=True,
    )


def pandaset_smoke() -> TrainConfig:
    """The 10-frame PandaSet sample (8 train / 2 val): a short run that must lower the loss."""
    return dataclasses.replace(
        small(), preset="pandaset_smoke", batch_size=2, lr=3e-3, max_steps=30,
        warmup_steps=5, checkpoint_interval=15, num_workers=1, mixed_precision=True,
    )


def large() -> TrainConfig:
    """GPU runs: large model (256 x 256 BEV), nccl on CUDA, long schedule."""
    return TrainConfig(
        preset="large", model="bev_fusion_large", batch_size=8, lr=1e-3, weight_decay=1e-2,
        max_steps=20_000, warmup_steps=500, checkpoint_interval=1_000, num_workers=6,
        num_threads=4,
    )


#: preset name -> zero-argument function returning the config.
PRESETS: dict[str, Callable[[], TrainConfig]] = {
    "small": small,
    "synthetic_default": synthetic_default,
    "pandaset_smoke": pandaset_smoke,
    "large": large,
}


def list_presets() -> list[str]:
    """Return the preset names, sorted."""
    return sorted(PRESETS)


def get_preset(name: str) -> TrainConfig:
    """Return the config of preset `name`.

    Raises:
        KeyError: if `name` is unknown; the message lists the presets.
    """
    if name not in PRESETS:
        raise KeyError(f"unknown training preset {name!r}; known presets: {', '.join(list_presets())}")
    return PRESETS[name]()
