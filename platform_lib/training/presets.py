"""Named training presets: small functions deriving from one base config.

Each preset changes only what differs from the preset it derives from, section by section
(`_derive`: validated copies). `PRESETS` lists them for `get_preset`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from platform_lib.training.config import (
    CheckpointConfig,
    DataConfig,
    MetricsConfig,
    ModelConfig,
    OptimizerConfig,
    ParallelConfig,
    TrainConfig,
    replace,
)

__all__ = [
    "PRESETS",
    "base",
    "get_preset",
    "large",
    "list_presets",
    "pandaset_smoke",
    "small",
    "synthetic_default",
    "temporal",
]


def small() -> TrainConfig:
    """CPU unit tests and the golden-loss file: small model, 12 steps, no loader workers.

    fp32 (mixed_precision=False): bf16 CPU kernels round differently per instruction set
    (AMX / AVX512-BF16 / emulated), fp32 keeps the golden losses portable across machines.
    The other presets train in bf16.
    """
    return TrainConfig(
        preset="small",
        model=ModelConfig(name="bev_fusion_small"),
        optimizer=OptimizerConfig(lr=2e-3, max_steps=12, warmup_steps=2),
        parallel=ParallelConfig(mixed_precision=False),
        data=DataConfig(batch_size=2, num_workers=0),
        checkpoint=CheckpointConfig(interval=6),
        metrics=MetricsConfig(anomaly_min_step_s=0.0),  # CPU steps are shorter than 1 s
    )


def _derive(base: TrainConfig, preset: str, **sections: dict[str, Any]) -> TrainConfig:
    """Return `base` named `preset`, each named section with its changed fields (validated)."""
    changed = {name: replace(getattr(base, name), **fields) for name, fields in sections.items()}
    return replace(base, preset=preset, **changed)


def synthetic_default() -> TrainConfig:
    """Default pipeline run on synthetic logs: 160 steps, ~1-2 min on a 2-core CPU with 2 ranks."""
    return _derive(
        small(),
        "synthetic_default",
        optimizer={"lr": 3e-3, "max_steps": 160, "warmup_steps": 15},
        parallel={"mixed_precision": True, "reshard_after_forward": False},
        data={"batch_size": 4, "num_workers": 1},
        checkpoint={"interval": 80},
    )


def pandaset_smoke() -> TrainConfig:
    """The 10-frame PandaSet sample (8 train / 2 val): a short run that must lower the loss."""
    return _derive(
        small(),
        "pandaset_smoke",
        optimizer={"lr": 3e-3, "max_steps": 30, "warmup_steps": 5},
        parallel={"mixed_precision": True},
        data={"batch_size": 2, "num_workers": 1},
        checkpoint={"interval": 15},
    )


def large() -> TrainConfig:
    """GPU runs: large model (256 x 256 BEV), nccl on CUDA, long schedule."""
    return TrainConfig(
        preset="large",
        model=ModelConfig(name="bev_fusion_large"),
        optimizer=OptimizerConfig(lr=1e-3, weight_decay=1e-2, max_steps=20_000, warmup_steps=500),
        parallel=ParallelConfig(num_threads=4),
        data=DataConfig(batch_size=8, num_workers=6),
        checkpoint=CheckpointConfig(interval=1_000),
    )


def temporal() -> TrainConfig:
    """`small` with the temporal model: each sample a window of 2 consecutive frames of one log."""
    return _derive(
        small(), "temporal", model={"name": "bev_fusion_temporal"}, data={"window_frames": 2}
    )


def base() -> TrainConfig:
    """GPU runs of the real-size model (`bev_fusion_base`, ~25 M parameters): the large schedule, 4 samples per rank."""
    return _derive(large(), "base", model={"name": "bev_fusion_base"}, data={"batch_size": 4})


#: preset name -> zero-argument function returning the config.
PRESETS: dict[str, Callable[[], TrainConfig]] = {
    "small": small,
    "synthetic_default": synthetic_default,
    "pandaset_smoke": pandaset_smoke,
    "large": large,
    "temporal": temporal,
    "base": base,
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
        raise KeyError(
            f"unknown training preset {name!r}; known presets: {', '.join(list_presets())}"
        )
    return PRESETS[name]()
