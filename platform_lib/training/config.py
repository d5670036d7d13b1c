"""Training configuration by component, as torchtitan does: one frozen section per concern.

    TrainConfig
      model       ModelConfig       which network of the zoo, loss weighting
      optimizer   OptimizerConfig   AdamW and its warmup + cosine schedule
      parallel    ParallelConfig    process group, FSDP, mixed precision, CPU threads
      data        DataConfig        batch size, splits and the loader's knobs
      checkpoint  CheckpointConfig  distributed checkpoints
      metrics     MetricsConfig     metrics lines

Each section is a frozen kw_only dataclass of scalar fields (so the whole config is a
cacheable Flyte input and a set of MLflow params). Bounds are declared next to each field
(`setting(default, ge=1)`) and checked by `check_fields` in the section's `__post_init__`,
which then runs the section's cross-field checks; `TrainConfig.__post_init__` runs the checks
that span sections. To add a field: one `setting(...)` line plus a one-line docstring with the
unit, in the section it belongs to; overrides, hashing and MLflow params follow.

Field names are unique across sections, so an override may name a field alone
(`{"max_steps": 5}`) or by path (`{"optimizer.max_steps": 5}`), see `apply_overrides` in
`platform_lib.training.overrides`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

from platform_lib.errors import UserError
from platform_lib.models.presets import MODEL_PRESETS

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "CheckpointConfig",
    "ConfigError",
    "DataConfig",
    "MetricsConfig",
    "ModelConfig",
    "OptimizerConfig",
    "ParallelConfig",
    "TrainConfig",
    "canonical_json",
    "check_fields",
    "check_value",
    "describe_bounds",
    "field_type",
    "hash_config",
    "setting",
]

#: Bounds of a Flyte integer literal (int64): larger ints cannot be a task input.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class ConfigError(UserError):
    """An impossible training config; `fields` names every offending field (dotted paths)."""

    def __init__(self, what: str, culprit: str, fix: str, *, fields: tuple[str, ...] = ()) -> None:
        """Keep the message parts and the offending field paths."""
        super().__init__(what, culprit, fix)
        self.fields = fields

    def __reduce__(self) -> Any:
        """Pickle with the fields (see `UserError.__reduce__`)."""
        return _rebuild_config_error, (self.what, self.culprit, self.fix, self.fields)


def _rebuild_config_error(
    what: str, culprit: str, fix: str, fields: tuple[str, ...]
) -> ConfigError:
    return ConfigError(what, culprit, fix, fields=fields)


def setting(
    default: Any,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    choices: tuple[str, ...] | None = None,
) -> Any:
    """Return a dataclass field with `default` and the bounds `check_fields` enforces.

    Args:
        default: the field's default (a scalar).
        ge: smallest allowed value (inclusive).
        gt: values must be greater than this.
        le: largest allowed value (inclusive).
        choices: allowed string values.
    """
    bounds = {
        k: v for k, v in (("ge", ge), ("gt", gt), ("le", le), ("choices", choices)) if v is not None
    }
    return field(default=default, metadata={"bounds": bounds})


def describe_bounds(f: dataclasses.Field[Any]) -> str:
    """Return the allowed values of field `f` in words, e.g. "an int >= 1"."""
    bounds = f.metadata.get("bounds", {})
    if "choices" in bounds:
        return "one of " + ", ".join(repr(c) for c in bounds["choices"])
    kinds: dict[type | None, str] = {
        int: "an int",
        float: "a number",
        bool: "true or false",
        str: "a string",
    }
    kind = kinds.get(field_type(f), "a value")
    parts = [
        f"{op} {bounds[key]}"
        for key, op in (("ge", ">="), ("gt", ">"), ("le", "<="))
        if key in bounds
    ]
    if field_type(f) is int:
        parts = parts or [f">= {INT64_MIN}"]
        if "le" not in bounds:
            parts.append(f"<= {INT64_MAX}")
    return " ".join([kind, " and ".join(parts)]).strip()


def field_type(f: dataclasses.Field[Any]) -> type | None:
    """Return the scalar type (int, float, bool, str) of field `f`, None for other types."""
    text = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
    return {"int": int, "float": float, "bool": bool, "str": str}.get(
        str(text).replace(" | None", "")
    )


def check_value(f: dataclasses.Field[Any], value: Any) -> tuple[Any, str | None]:
    """Return (`value` coerced to the type of field `f`, None) or (value, why it is not allowed).

    An int for a float field becomes a float (so `lr=1` and `lr=1.0` are one config), an
    integral float for an int field an int; ints must fit in int64 (a Flyte literal). The
    reason reads "must be <allowed values>".
    """
    kind, bounds = field_type(f), f.metadata.get("bounds", {})
    if isinstance(value, bool) and kind is not bool:
        return value, f"must be {describe_bounds(f)}"
    if kind is float and isinstance(value, int):
        value = float(value)
    elif kind is int and isinstance(value, float) and value.is_integer():
        value = int(value)
    if kind is not None and not isinstance(value, kind):
        return value, f"must be {describe_bounds(f)}"
    bad = (
        (kind is float and not math.isfinite(value))
        or (kind is int and not INT64_MIN <= value <= INT64_MAX)
        or ("ge" in bounds and not value >= bounds["ge"])
        or ("gt" in bounds and not value > bounds["gt"])
        or ("le" in bounds and not value <= bounds["le"])
        or ("choices" in bounds and value not in bounds["choices"])
    )
    return value, (f"must be {describe_bounds(f)}" if bad else None)


def check_fields(section: Any, prefix: str, *, skip: tuple[str, ...] = ()) -> list[str]:
    """Coerce (`check_value`) and check every scalar field of `section` against its bounds.

    Args:
        section: a config section dataclass instance (frozen: coerced via object.__setattr__).
        prefix: its path in TrainConfig with a trailing dot, e.g. "optimizer."; "" at the top.
        skip: names of fields not to check (TrainConfig's sections).

    Returns:
        One message per bad field, naming it by its dotted path (empty when all are fine).
    """
    problems = []
    for f in dataclasses.fields(section):
        if f.name in skip:
            continue
        value, problem = check_value(f, getattr(section, f.name))
        if problem:
            problems.append(f"{prefix}{f.name} {problem}, got {value!r}")
        elif value is not getattr(section, f.name):
            object.__setattr__(section, f.name, value)
    return problems


def _raise_if(problems: list[str]) -> None:
    if problems:
        fields = tuple(dict.fromkeys(p.split(" ", 1)[0] for p in problems))
        raise ConfigError(
            "invalid training config: " + "; ".join(problems),
            ", ".join(fields),
            "change the preset or the overrides so that each field is in range",
            fields=fields,
        )


@dataclass(kw_only=True, frozen=True)
class ModelConfig:
    """Which network of the model zoo trains, and how its loss weighs the classes."""

    name: str = setting("bev_fusion_small", choices=tuple(sorted(MODEL_PRESETS)))
    """model preset name in the model zoo (`platform_lib.models.list_models()`)"""
    pos_weight: float = setting(3.0, gt=0.0)
    """weight of occupied cells in the BCE-with-logits loss (occupancy is sparse), unitless"""

    def __post_init__(self) -> None:
        """Check the bounds of every field (`check_fields`)."""
        _raise_if(check_fields(self, "model."))


@dataclass(kw_only=True, frozen=True)
class OptimizerConfig:
    """AdamW with linear warmup, then cosine decay to 10 % of `lr` at `max_steps`."""

    lr: float = setting(2e-3, gt=0.0)
    """peak AdamW learning rate, per step"""
    weight_decay: float = setting(1e-4, ge=0.0)
    """AdamW decoupled weight decay, per step (norm and bias parameters get none)"""
    grad_clip: float = setting(1.0, ge=0.0)
    """max global L2 norm of the gradients; 0 disables clipping"""
    max_steps: int = setting(200, ge=1)
    """optimizer steps of the run (a resumed run continues up to this step), in steps"""
    warmup_steps: int = setting(10, ge=0)
    """linear learning-rate warmup, in steps"""

    def __post_init__(self) -> None:
        """Check bounds, then that the warmup ends before the last step."""
        problems = check_fields(self, "optimizer.")
        if not problems and 0 < self.max_steps <= self.warmup_steps:
            problems.append(
                f"optimizer.warmup_steps ({self.warmup_steps}) must be < optimizer.max_steps "
                f"({self.max_steps})"
            )
        _raise_if(problems)


@dataclass(kw_only=True, frozen=True)
class ParallelConfig:
    """Process group, FSDP2 sharding, mixed precision and CPU threads of each rank."""

    backend: str = setting("auto", choices=("auto", "gloo", "nccl"))
    """process group backend: "auto" (nccl with CUDA, else gloo), "gloo" or "nccl" (CUDA only)"""
    mixed_precision: bool = setting(True)
    """bf16 parameters/activations in forward and backward, fp32 gradient reduction and master weights"""
    reshard_after_forward: bool = setting(True)
    """FSDP frees gathered parameters after forward (less memory, one more all-gather per block)"""
    num_threads: int = setting(1, ge=1)
    """intra-op CPU threads per rank (torch.set_num_threads), in threads"""
    collective_timeout_s: float = setting(600.0, gt=0.0)
    """a collective not complete after this long is a hang (process group timeout), in s"""

    def __post_init__(self) -> None:
        """Check the bounds of every field (`check_fields`)."""
        _raise_if(check_fields(self, "parallel."))


@dataclass(kw_only=True, frozen=True)
class DataConfig:
    """The batches: splits, batch size and the streaming loader's knobs (`training.data`)."""

    batch_size: int = setting(4, ge=1)
    """samples per rank per optimizer step, in samples"""
    train_split: str = setting("train")
    """index split trained on"""
    val_split: str = setting("val")
    """index split evaluated on"""
    num_workers: int = setting(1, ge=0)
    """loader worker processes per rank, in processes (0: load in the training process)"""
    prefetch_depth: int = setting(2, ge=1)
    """batches each loader worker prepares ahead of the training loop, in batches"""
    shuffle_buffer: int = setting(2048, ge=1)
    """window of the loader's block shuffle, in samples"""
    batch_delay_s: float = setting(0.0, ge=0.0)
    """injected delay before each batch reaches the training loop, in s (tests of input-bound runs); 0: none"""

    def __post_init__(self) -> None:
        """Check bounds, then that the two splits are distinct and named."""
        problems = check_fields(self, "data.")
        if not problems and (not self.train_split or self.train_split == self.val_split):
            problems.append(
                f"data.train_split ({self.train_split!r}) and data.val_split ({self.val_split!r}) "
                "must be distinct, non-empty split names"
            )
        _raise_if(problems)


@dataclass(kw_only=True, frozen=True)
class CheckpointConfig:
    """Distributed checkpoints of model, optimizer, loader and RNG state."""

    interval: int = setting(100, ge=1)
    """distributed checkpoint every this many steps (and at the last step), in steps"""
    keep: int = setting(2, ge=1)
    """most recent complete checkpoints kept on disk, in checkpoints"""
    folder: str = setting("")
    """checkpoint folder: a local path or fsspec URL (s3://bucket/run/checkpoints); "" = <run>/checkpoints"""
    async_save: bool = setting(False)
    """stage the state in host memory and write it in a background thread (DCP async_save)"""
    preemption_grace_s: float = setting(25.0, gt=0.0)
    """on SIGTERM, the final checkpoint must be complete within this time, in s"""

    def __post_init__(self) -> None:
        """Check the bounds of every field (`check_fields`)."""
        _raise_if(check_fields(self, "checkpoint."))


@dataclass(kw_only=True, frozen=True)
class MetricsConfig:
    """Per-step metrics (rank 0 writes metrics.jsonl) and telemetry (`platform_lib.telemetry`, docs/goodput.md)."""

    log_interval: int = setting(1, ge=1)
    """steps between metrics lines, in steps"""
    mlflow_interval: int = setting(10, ge=0)
    """steps between metric pushes to the run's MLflow run during training (rank 0), in steps; 0: off"""
    telemetry_flush_interval: int = setting(20, ge=1)
    """steps between appends of step records to telemetry/rank-N.jsonl, in steps"""
    anomaly_min_step_s: float = setting(1.0, ge=0.0)
    """steps shorter than this are left out of step-time anomaly detection, in s (ml-goodput-measurement: 1 s)"""
    straggler_threshold: float = setting(0.7, gt=0.0, le=1.0)
    """a rank whose median step is slower than fastest / this is flagged a straggler (score below it)"""
    baseline_tolerance: float = setting(0.05, ge=0.0)
    """regression tolerance against the workload baseline: step time, memory, checkpoint (fraction), input wait (points)"""
    goodput_window_s: float = setting(0.0, ge=0.0)
    """rolling goodput window, in s; 0: a tenth of the run"""
    profile_first_step: int = setting(0, ge=0)
    """first step of the torch.profiler window (Chrome/Perfetto trace in telemetry/); 0: no profiling"""
    profile_steps: int = setting(3, ge=1)
    """steps in the profiler window, in steps"""
    profile_all_ranks: bool = setting(False)
    """profile every rank instead of rank 0 only"""

    def __post_init__(self) -> None:
        """Check the bounds of every field (`check_fields`)."""
        _raise_if(check_fields(self, "metrics."))


#: Section name -> its dataclass, in TrainConfig order.
SECTIONS: dict[str, type] = {
    "model": ModelConfig,
    "optimizer": OptimizerConfig,
    "parallel": ParallelConfig,
    "data": DataConfig,
    "checkpoint": CheckpointConfig,
    "metrics": MetricsConfig,
}


@dataclass(kw_only=True, frozen=True)
class TrainConfig:
    """Everything that decides a training run besides the dataset, by component.

    Raises:
        ConfigError: (a ValueError) from `__post_init__` of a section or of the whole,
            naming every field with an impossible value by its dotted path.
    """

    preset: str = setting("custom")
    """name of the preset this config came from (recorded for lineage)"""
    seed: int = setting(0, ge=0)
    """seed of weights init (same on every rank) and data order"""
    model: ModelConfig = field(default_factory=ModelConfig)
    """which network and loss weighting"""
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    """AdamW and its schedule"""
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    """process group, FSDP, precision, threads"""
    data: DataConfig = field(default_factory=DataConfig)
    """batches, splits, loader"""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """distributed checkpoints"""
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    """metrics lines"""

    def __post_init__(self) -> None:
        """Check the top-level scalars and that every section has its type."""
        problems = []
        for f in dataclasses.fields(self):
            if f.name in SECTIONS and not isinstance(getattr(self, f.name), SECTIONS[f.name]):
                problems.append(
                    f"{f.name} must be a {SECTIONS[f.name].__name__}, got {getattr(self, f.name)!r}"
                )
        problems += check_fields(self, "", skip=tuple(SECTIONS))
        _raise_if(problems)

    def to_dict(self) -> dict[str, Any]:
        """Return the config as a nested JSON-serialisable dict ({"optimizer": {"lr": ...}, ...})."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        """Build a config from `to_dict` output (nested) or any override mapping.

        Raises:
            ConfigError: naming unknown fields, wrong types or out-of-range values.
        """
        from platform_lib.training.overrides import apply_overrides

        return apply_overrides(cls(), values, culprit="config")


def canonical_json(config: Any) -> str:
    """Return the canonical JSON of a config dataclass or mapping (the input of `hash_config`).

    Keys sorted at every level, no whitespace, and every integral float written as an int,
    so the same values give the same text whatever their spelling (`1` vs `1.0`) or key order.
    """
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        config = dataclasses.asdict(config)
    return json.dumps(_canonical(config), sort_keys=True, separators=(",", ":"), allow_nan=False)


def _canonical(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def hash_config(config: Any) -> str:
    """Return the sha256 hex of `canonical_json(config)`: the config's identity for lineage."""
    return hashlib.sha256(canonical_json(config).encode()).hexdigest()
