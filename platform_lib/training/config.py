"""Training configuration by component, as torchtitan does: one frozen section per concern.

    TrainConfig
      model       ModelConfig       which network of the zoo, loss weighting
      optimizer   OptimizerConfig   AdamW and its warmup + cosine schedule
      parallel    ParallelConfig    process group, FSDP, mixed precision, CPU threads
      data        DataConfig        batch size, splits and the loader's knobs
      checkpoint  CheckpointConfig  distributed checkpoints
      metrics     MetricsConfig     metrics lines

Sections are frozen pydantic models of scalars (`extra="forbid"`, strict types, `Field` bounds);
adding a field, overrides, hashing and errors: the package README.md, "Configs by component".
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, TypeVar, get_args, get_origin

from annotated_types import Ge, Gt, Le, MaxLen
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic.fields import FieldInfo

from platform_lib.errors import UserError
from platform_lib.models.presets import MODEL_PRESETS, get_model_config
from platform_lib.redact import has_userinfo, mask_userinfo

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "SECTIONS",
    "CheckpointConfig",
    "ConfigError",
    "DataConfig",
    "DatasetMix",
    "MetricsConfig",
    "ModelConfig",
    "OptimizerConfig",
    "ParallelConfig",
    "TrainConfig",
    "canonical_json",
    "config_error",
    "describe_field",
    "hash_config",
    "list_fields",
    "replace",
    "show_value",
]

#: Bounds of a Flyte integer literal (int64): larger ints cannot be a task input.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: The fix of an error in a built config (a preset, overrides or a stored config).
_FIX = "change the preset or the overrides so that each field is in range"


class ConfigError(UserError):
    """An impossible training config; `fields` names every offending field (dotted paths)."""

    def __init__(self, what: str, culprit: str, fix: str, fields: tuple[str, ...] = ()) -> None:
        """Keep the message parts and the offending field paths."""
        super().__init__(what, culprit, fix)
        self.fields = fields

    def __reduce__(self) -> Any:
        """Pickle with the fields (see `UserError.__reduce__`)."""
        return type(self), (self.what, self.culprit, self.fix, self.fields)


def _integral_to_int(value: Any) -> Any:
    """An integral float in int64 range for an int field is that int (`20.0` -> 20)."""
    if isinstance(value, float) and value.is_integer() and INT64_MIN <= value <= INT64_MAX:
        return int(value)
    return value


#: An int field: an int or an integral float, never a bool; at most int64 (a Flyte literal).
Int = Annotated[int, Le(INT64_MAX), BeforeValidator(_integral_to_int)]
#: A float field: an int or a float, never a bool, finite.
Float = Annotated[float, Field(allow_inf_nan=False)]
if TYPE_CHECKING:
    ModelName = str
else:  #: The model zoo's preset names, as a `Literal` built from the zoo.
    ModelName = Literal[tuple(sorted(MODEL_PRESETS))]


class _Section(BaseModel):
    """A frozen config section of scalar fields, strictly typed, unknown fields refused."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    #: Fields added after configs were recorded (golden files, lineage hashes, MLflow params):
    #: `TrainConfig.to_dict`, and so `hash_config`, leaves each out while it holds its default,
    #: so every record of a config that does not use it stays valid.
    ADDED_FIELDS: ClassVar[frozenset[str]] = frozenset()


def _cross_field(problem: str) -> ConfigError:
    """Return the error of a broken cross-field rule; `problem` starts with the field's path."""
    field = problem.split(" ", 1)[0]
    return ConfigError(f"invalid training config: {problem}", field, _FIX, fields=(field,))


class ModelConfig(_Section):
    """Which network of the model zoo trains, and how its loss weighs the classes."""

    name: ModelName = "bev_fusion_small"
    """model preset name in the model zoo (`platform_lib.models.presets.list_models()`)"""
    pos_weight: Float = Field(default=3.0, gt=0.0)
    """weight of occupied cells in the BCE-with-logits loss (occupancy is sparse), unitless"""


class OptimizerConfig(_Section):
    """AdamW with linear warmup, then cosine decay to 10 % of `lr` at `max_steps`."""

    lr: Float = Field(default=2e-3, gt=0.0)
    """peak AdamW learning rate, per step"""
    weight_decay: Float = Field(default=1e-4, ge=0.0)
    """AdamW decoupled weight decay, per step (norm and bias parameters get none)"""
    grad_clip: Float = Field(default=1.0, ge=0.0)
    """max global L2 norm of the gradients; 0 disables clipping"""
    max_steps: Int = Field(default=200, ge=1)
    """optimizer steps of the run (a resumed run continues up to this step), in steps"""
    warmup_steps: Int = Field(default=10, ge=0)
    """linear learning-rate warmup, in steps"""

    @model_validator(mode="after")
    def _warmup_ends_before_the_last_step(self) -> OptimizerConfig:
        if self.max_steps <= self.warmup_steps:
            raise _cross_field(
                f"optimizer.warmup_steps ({self.warmup_steps}) must be < optimizer.max_steps "
                f"({self.max_steps})"
            )
        return self


class ParallelConfig(_Section):
    """Process group, the layout (FSDP x TP x PP degrees), mixed precision and CPU threads.

    The degrees' product is the world size (`platform_lib.training.layout.resolve_layout`).
    """

    backend: Literal["auto", "gloo", "nccl"] = "auto"
    """process group backend: "auto" (nccl with CUDA, else gloo), "gloo" or "nccl" (CUDA only)"""
    mixed_precision: bool = True
    """bf16 parameters/activations in forward and backward, fp32 gradient reduction and master weights"""
    reshard_after_forward: bool = True
    """FSDP frees gathered parameters after forward (less memory, one more all-gather per block)"""
    num_threads: Int = Field(default=1, ge=1)
    """intra-op CPU threads per rank (torch.set_num_threads), in threads"""
    collective_timeout_s: Float = Field(default=600.0, gt=0.0)
    """a collective not complete after this long is a hang (process group timeout), in s"""
    activation_checkpointing: bool = False
    """recompute each model block's activations in backward instead of keeping them (less memory, ~1/3 more compute)"""

    dp_replicate: Int = Field(default=1, ge=1)
    """replicas of the model across data-parallel groups (HSDP when > 1 with dp_shard > 1), in ranks"""
    dp_shard: Int = Field(default=-1, ge=-1)
    """ranks the parameters are FSDP-sharded over; -1: what is left of the world size, in ranks"""
    tp: Int = Field(default=1, ge=1)
    """tensor-parallel degree: ranks splitting each layer's matmuls (within a node), in ranks"""
    pp: Int = Field(default=1, ge=1)
    """pipeline-parallel degree: ranks holding consecutive stages of the model, in ranks"""
    cp: Int = Field(default=1, ge=1)
    """context-parallel degree (a seam: only 1 is supported), in ranks"""
    pp_schedule: Literal["1F1B", "Interleaved1F1B"] = "1F1B"
    """pipeline schedule: "1F1B" (one stage per rank) or "Interleaved1F1B" (two per rank)"""
    pp_microbatches: Int | None = Field(default=None, ge=1)
    """microbatches each rank's batch is split into under pp > 1; None: the number of stages"""

    ADDED_FIELDS = frozenset(
        {
            "activation_checkpointing",
            "dp_replicate",
            "dp_shard",
            "tp",
            "pp",
            "cp",
            "pp_schedule",
            "pp_microbatches",
        }
    )

    @model_validator(mode="after")
    def _dp_shard_is_a_degree(self) -> ParallelConfig:
        if self.dp_shard == 0:
            raise _cross_field(
                "parallel.dp_shard (0) must be >= 1, or -1 for what is left of the world size"
            )
        return self


#: Fields that left `DataConfig`, with the value every config had: `data.batch_delay_s` (an
#: injected per-batch stall, now the `batch_delay` fault of DRIVETRAIN_FAULTS). `hash_config`
#: still hashes them, so that hashes recorded before (lineage, run folders) stay the same, and
#: records that carry them at that value still load.
RETIRED_DATA_FIELDS: dict[str, float] = {"batch_delay_s": 0.0}


#: Longest dataset path or URL in a mix, in characters.
MAX_DATASET_CHARS = 4096


def _check_dataset(url: str) -> str:
    """Return `url` when it can name a dataset: a local path or `scheme://...`, printable, no credentials.

    Raises:
        ValueError: naming what is wrong (pydantic reports it under the field's path).
    """
    if not url or url != url.strip() or len(url) > MAX_DATASET_CHARS:
        raise ValueError(
            f"a dataset is a local path or URL of 1 to {MAX_DATASET_CHARS} characters, "
            "without leading or trailing spaces"
        )
    if any(ord(c) < 32 or ord(c) == 127 for c in url):
        raise ValueError("a dataset path or URL holds no control characters")
    scheme, sep, rest = url.partition("://")
    if sep and not re.fullmatch(r"[a-z][a-z0-9+.-]*", scheme):
        raise ValueError(f"{scheme!r} is not a URL scheme (s3, gs, file, ...)")
    _refuse_userinfo(url)
    return url


def _refuse_userinfo(url: str) -> None:
    """Refuse a URL holding credentials (`s3://user:password@host/...`); the message masks them.

    Raises:
        ValueError: `url` holds URI userinfo.
    """
    if has_userinfo(url):
        raise ValueError(
            "credentials in a URL are refused: they go in the environment or a profile "
            "(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE), never in "
            "user:password@"
        )


def _check_folder(url: str) -> str:
    """Return `url`, a folder path or URL to write to, when it holds no credentials.

    Raises:
        ValueError: naming what is wrong (pydantic reports it under the field's path).
    """
    _refuse_userinfo(url)
    return url


class DatasetMix(_Section):
    """One more dataset mixed into training: where it is and its relative weight."""

    dataset: Annotated[str, AfterValidator(_check_dataset)]
    """published dataset: local folder or fsspec URL (s3://bucket/ds), read at data.train_split"""
    weight: Float = Field(default=1.0, gt=0.0)
    """relative share of the training samples (data.dataset_weight is the run's own), unitless"""


class DataConfig(_Section):
    """The batches: splits, batch size and the streaming loader's knobs (`training.data`)."""

    ADDED_FIELDS = frozenset(
        {"window_frames", "window_stride", "dataset_weight", "mix", "camera_decode"}
    )

    batch_size: Int = Field(default=4, ge=1)
    """samples per rank per optimizer step, in samples"""
    train_split: str = "train"
    """index split trained on"""
    val_split: str = "val"
    """index split evaluated on"""
    num_workers: Int = Field(default=1, ge=0)
    """loader worker processes per rank, in processes (0: load in the training process)"""
    prefetch_depth: Int = Field(default=2, ge=1)
    """batches each loader worker prepares ahead of the training loop, in batches"""
    shuffle_buffer: Int = Field(default=2048, ge=1)
    """window of the loader's block shuffle, in samples"""
    window_frames: Int = Field(default=1, ge=1)
    """frames per training sample: k consecutive frames of one log (the model's temporal_frames)"""
    window_stride: Int = Field(default=1, ge=1)
    """frames between the first frames of consecutive windows of one log, in frames"""
    dataset_weight: Float = Field(default=1.0, gt=0.0)
    """relative share of the samples drawn from the run's own dataset when mixing, unitless"""
    mix: list[DatasetMix] = Field(default_factory=list, max_length=64)
    """more datasets mixed into training: [{"dataset": url, "weight": w}, ...]; [] trains on one"""
    camera_decode: Literal["worker", "device"] = "worker"
    """where camera JPEGs are decoded: "worker" (loader workers) or "device" (training process: nvJPEG on CUDA)"""

    @model_validator(mode="before")
    @classmethod
    def _drop_retired_fields(cls, values: Any) -> Any:
        """Accept records written before `batch_delay_s` left (always 0.0 there)."""
        if isinstance(values, Mapping) and "batch_delay_s" in values:
            if values["batch_delay_s"] == RETIRED_DATA_FIELDS["batch_delay_s"]:
                return {k: v for k, v in values.items() if k != "batch_delay_s"}
        return values

    @model_validator(mode="after")
    def _splits_are_distinct_and_named(self) -> DataConfig:
        if not self.train_split or self.train_split == self.val_split:
            raise _cross_field(
                f"data.train_split ({self.train_split!r}) and data.val_split ({self.val_split!r}) "
                "must be distinct, non-empty split names"
            )
        return self

    @model_validator(mode="after")
    def _mixed_datasets_are_distinct(self) -> DataConfig:
        seen: set[str] = set()
        for i, entry in enumerate(self.mix):
            name = normalise_dataset(entry.dataset)
            if name in seen:
                raise _cross_field(
                    f"data.mix ({entry.dataset!r} at position {i}) names a dataset twice; "
                    "give each dataset once, with its total weight"
                )
            seen.add(name)
        return self


def normalise_dataset(url: str) -> str:
    """Return the form of a dataset path or URL that two spellings of one dataset share.

    Local paths are normalised (`a/./b/` -> `a/b`); URLs lose trailing slashes.
    """
    if "://" in url:
        return url.rstrip("/")
    return os.path.normpath(url)


class CheckpointConfig(_Section):
    """Distributed checkpoints of model, optimizer, loader and RNG state."""

    interval: Int = Field(default=100, ge=1)
    """distributed checkpoint every this many steps (and at the last step), in steps"""
    keep: Int = Field(default=2, ge=1)
    """most recent complete checkpoints kept on disk, in checkpoints"""
    folder: Annotated[str, AfterValidator(_check_folder)] = ""
    """checkpoint folder: a local path or fsspec URL (s3://bucket/run/checkpoints); "" = <run>/checkpoints"""
    async_save: bool = False
    """stage the state in host memory and write it in a background thread (DCP async_save)"""
    preemption_grace_s: Float = Field(default=25.0, gt=0.0)
    """on SIGTERM, the final checkpoint must be complete within this time, in s"""


class MetricsConfig(_Section):
    """Per-step metrics (rank 0 writes metrics.jsonl) and telemetry (`platform_lib.telemetry`, docs/goodput.md)."""

    log_interval: Int = Field(default=1, ge=1)
    """steps between metrics lines, in steps"""
    mlflow_interval: Int = Field(default=10, ge=0)
    """steps between metric pushes to the run's MLflow run during training (rank 0), in steps; 0: off"""
    telemetry_flush_interval: Int = Field(default=20, ge=1)
    """steps between appends of step records to telemetry/rank-N.jsonl, in steps"""
    anomaly_min_step_s: Float = Field(default=1.0, ge=0.0)
    """steps shorter than this are left out of step-time anomaly detection, in s (ml-goodput-measurement: 1 s)"""
    straggler_threshold: Float = Field(default=0.7, gt=0.0, le=1.0)
    """a rank whose median step is slower than fastest / this is flagged a straggler (score below it)"""
    baseline_tolerance: Float = Field(default=0.05, ge=0.0)
    """regression tolerance against the workload baseline: step time, memory, checkpoint (fraction), input wait (points)"""
    goodput_window_s: Float = Field(default=0.0, ge=0.0)
    """rolling goodput window, in s; 0: a tenth of the run"""
    profile_first_step: Int = Field(default=0, ge=0)
    """first step of the torch.profiler window (Chrome/Perfetto trace in telemetry/); 0: no profiling"""
    profile_steps: Int = Field(default=3, ge=1)
    """steps in the profiler window, in steps"""
    profile_all_ranks: bool = False
    """profile every rank instead of rank 0 only"""


class TrainConfig(_Section):
    """Everything that decides a training run besides the dataset, by component.

    Built from code (`TrainConfig(...)`, `model_validate`) an impossible value raises
    pydantic's `ValidationError`; `replace`, `from_dict` and `platform_lib.training.overrides`
    raise a one-line `ConfigError` (a `UserError`) naming the field instead.
    """

    preset: str = "custom"
    """name of the preset this config came from (recorded for lineage)"""
    seed: Int = Field(default=0, ge=0)
    """seed of weights init (same on every rank) and data order"""
    model: ModelConfig = ModelConfig()
    """which network and loss weighting"""
    optimizer: OptimizerConfig = OptimizerConfig()
    """AdamW and its schedule"""
    parallel: ParallelConfig = ParallelConfig()
    """process group, FSDP, precision, threads"""
    data: DataConfig = DataConfig()
    """batches, splits, loader"""
    checkpoint: CheckpointConfig = CheckpointConfig()
    """distributed checkpoints"""
    metrics: MetricsConfig = MetricsConfig()
    """metrics lines"""

    @model_validator(mode="after")
    def _windows_fit_the_model(self) -> TrainConfig:
        frames = get_model_config(self.model.name).temporal_frames
        if self.data.window_frames != frames:
            raise _cross_field(
                f"data.window_frames ({self.data.window_frames}) must equal the temporal_frames "
                f"({frames}) of model.name {self.model.name!r}: each sample is one window of the "
                "frames the model fuses"
            )
        return self

    def to_dict(self) -> dict[str, Any]:
        """Return the config as a nested JSON-serialisable dict ({"optimizer": {"lr": ...}, ...}).

        Fields of `ADDED_FIELDS` at their default are left out (`from_dict` restores them).
        """
        return _drop_added_defaults(self.model_dump())

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], *, culprit: str = "config") -> TrainConfig:
        """Build a config from `to_dict` output (nested, every section optional).

        Raises:
            ConfigError: naming unknown fields, wrong types or out-of-range values.
        """
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            raise config_error(exc, culprit) from None


#: Section name -> its model, in TrainConfig order.
SECTIONS: dict[str, type[_Section]] = {
    name: f.annotation
    for name, f in TrainConfig.model_fields.items()
    if isinstance(f.annotation, type) and issubclass(f.annotation, _Section)
}

_Config = TypeVar("_Config", bound=_Section)


def replace(config: _Config, **changes: Any) -> _Config:
    """Return a copy of `config` (a section or TrainConfig) with `changes`, validated.

    Raises:
        ConfigError: a changed value is impossible (culprit "config"; see `config_error`).
    """
    try:
        return type(config)(**{**dict(config), **changes})
    except ValidationError as exc:
        raise config_error(exc, "config", list(changes), prefix=_prefix(type(config))) from None


def _prefix(model: type[BaseModel]) -> str:
    """Return the dotted-path prefix of a section model ("optimizer."), "" for TrainConfig."""
    return next((f"{name}." for name, cls in SECTIONS.items() if cls is model), "")


def list_fields() -> dict[str, FieldInfo]:
    """Return every settable field of TrainConfig by dotted path ("seed", "optimizer.lr", ...)."""
    paths: dict[str, FieldInfo] = {}
    for name, f in TrainConfig.model_fields.items():
        if name in SECTIONS:
            paths.update({f"{name}.{g}": info for g, info in SECTIONS[name].model_fields.items()})
        else:
            paths[name] = f
    return paths


def describe_field(f: FieldInfo) -> str:
    """Return the allowed values of field `f` in words, e.g. "an int >= 1 and <= 9223372036854775807"."""
    if _choices(f):
        return "one of " + ", ".join(repr(c) for c in _choices(f))
    item = _item_model(f)
    if item is not None:
        inner = ", ".join(f'"{n}": {describe_field(g)}' for n, g in item.model_fields.items())
        most = next((m.max_length for m in f.metadata if isinstance(m, MaxLen)), None)
        return f"a list of {{{inner}}}" + (f", at most {most}" if most is not None else "")
    kinds = {int: "an int", float: "a number", bool: "true or false", str: "a string"}
    bounds = {type(m): m for m in f.metadata if isinstance(m, Ge | Gt | Le)}
    parts = [
        f"{op} {getattr(bounds[kind], kind.__name__.lower())}"
        for kind, op in ((Ge, ">="), (Gt, ">"), (Le, "<="))
        if kind in bounds
    ]
    return " ".join([kinds.get(f.annotation, "a value"), " and ".join(parts)]).strip()  # type: ignore[arg-type]


def _choices(f: FieldInfo) -> tuple[Any, ...]:
    """Return the choices of a `Literal` field, () for other fields."""
    return get_args(f.annotation) if get_origin(f.annotation) is Literal else ()


def _item_model(f: FieldInfo) -> type[BaseModel] | None:
    """Return the model of the items of a list field (`data.mix`), None for other fields."""
    args = get_args(f.annotation) if get_origin(f.annotation) in (list, tuple) else ()
    return (
        args[0] if args and isinstance(args[0], type) and issubclass(args[0], BaseModel) else None
    )


def _has_kind(f: FieldInfo, value: Any) -> bool:
    """True when `value` has the kind of field `f` (so only its range or choice is off)."""
    kind = str if _choices(f) else f.annotation
    if _item_model(f) is not None:
        return isinstance(value, list | tuple)
    if kind is bool or isinstance(value, bool):
        return kind is bool and isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if kind is float:
        return isinstance(value, int | float)
    return isinstance(value, kind) if isinstance(kind, type) else True


def show_value(value: Any, limit: int = 200) -> str:
    """Return `repr(value)`, cut to `limit` characters (a huge value stays a short line).

    A URL's credentials (`s3://user:password@host`) are masked (`s3://***@host`).
    """
    if isinstance(value, str):
        value = mask_userinfo(value)
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # an int past str()'s digit limit, a deep nest
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def config_error(
    exc: ValidationError, culprit: str, order: Sequence[str] = (), *, prefix: str = ""
) -> ConfigError:
    """Return the one-line error of a TrainConfig built from user input (`model_validate`).

    One problem is reported, the first of: a section given a value that is not an object,
    unknown fields (all of them, with the closest valid name), a bad value inside a list field
    (`data.mix[0].weight`), a value of the wrong type or out of range, a broken cross-field
    rule. Within a kind, the field that comes first in
    `order` (the dotted paths as the user gave them) wins.

    Args:
        exc: pydantic's error from validating TrainConfig or one of its sections.
        culprit: the input named in the message ("overrides", "config").
        order: dotted paths in the order the user gave them.
        prefix: the section's path with a trailing dot ("optimizer.") when `exc` came from
            validating a section alone.
    """
    fields = list_fields()

    def rank(path: str) -> int:
        given = (i for i, p in enumerate(order) if p == path or p.startswith(path + "."))
        return next(given, len(order))

    errors = sorted(
        ((prefix + ".".join(str(part) for part in e["loc"]), e) for e in exc.errors()),
        key=lambda pair: rank(pair[0]),
    )
    for path, e in errors:
        if path in SECTIONS and e["type"] == "model_type":
            names = list(SECTIONS[path].model_fields)
            return ConfigError(
                f"{path!r} is a section, not a field",
                culprit,
                f'name one of its fields, e.g. {{"{path}.{names[0]}": ...}}; '
                f"fields: {', '.join(f'{path}.{n}' for n in names)}",
                fields=(path,),
            )

    def inside(path: str) -> str | None:
        """Return the list field (`data.mix`) that `path` lies inside, None for other paths."""
        return next((p for p in fields if path.startswith(p + ".")), None)

    unknown = [p for p, e in errors if e["type"] == "extra_forbidden" and inside(p) is None]
    if unknown:
        names = [*fields, *dict.fromkeys(p.rsplit(".", 1)[-1] for p in fields)]
        hints = [m for k in unknown for m in difflib.get_close_matches(k, names, n=1)]
        hint = f"; did you mean {', '.join(repr(h) for h in hints)}?" if hints else ""
        return ConfigError(
            f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(repr(k) for k in unknown)}",
            culprit,
            f"use one of {', '.join(fields)}{hint}",
            fields=tuple(unknown),
        )
    for path, e in errors:
        field = inside(path)
        if field is not None:  # inside a list field: data.mix.0.weight
            where = field + "".join(
                f"[{part}]" if part.isdigit() else f".{part}"
                for part in path[len(field) + 1 :].split(".")
            )
            reason = e["msg"].removeprefix("Value error, ")
            return ConfigError(
                f"{where}={show_value(e['input'])} is invalid: {reason}",
                culprit,
                f"give {field} as {describe_field(fields[field])}",
                fields=(field,),
            )
    for path, e in errors:
        if path in fields:
            f, value = fields[path], e["input"]
            if e["type"] == "value_error":  # the field's own validator says why and what to do
                reason = e["msg"].removeprefix("Value error, ")
                return ConfigError(
                    f"{path}={show_value(value)} is invalid", culprit, reason, fields=(path,)
                )
            off = "not one of the allowed values" if _choices(f) else "out of range"
            return ConfigError(
                f"{path}={show_value(value)} is {off if _has_kind(f, value) else 'of the wrong type'}",
                culprit,
                f"give {describe_field(f)}",
                fields=(path,),
            )
    cause = errors[0][1].get("ctx", {}).get("error")  # a model_validator's cross-field rule
    if isinstance(cause, ConfigError):
        return ConfigError(cause.what, culprit, cause.fix, fields=cause.fields)
    return ConfigError(f"invalid training config: {errors[0][1]['msg']}", culprit, _FIX)


def canonical_json(config: Any) -> str:
    """Return the canonical JSON of a config model or mapping (the input of `hash_config`).

    Keys sorted at every level, no whitespace, and every integral float written as an int,
    so the same values give the same text whatever their spelling (`1` vs `1.0`) or key order.
    A training config's `data` section also holds `RETIRED_DATA_FIELDS`, and a section's
    `ADDED_FIELDS` at their default are left out (`_drop_added_defaults`), so hashes recorded
    before stay the same.
    """
    if isinstance(config, BaseModel):
        config = config.model_dump()
    if isinstance(config, Mapping):
        config = _drop_added_defaults(config)
    if isinstance(config, Mapping) and isinstance(config.get("data"), Mapping):
        config = {**config, "data": {**RETIRED_DATA_FIELDS, **config["data"]}}
    return json.dumps(_canonical(config), sort_keys=True, separators=(",", ":"), allow_nan=False)


def _drop_added_defaults(config: Mapping[str, Any]) -> dict[str, Any]:
    """Return a nested config mapping without the sections' `ADDED_FIELDS` at their default."""
    out = dict(config)
    for name, section in SECTIONS.items():
        if isinstance(out.get(name), Mapping):
            fields = section.model_fields
            out[name] = {
                k: v
                for k, v in out[name].items()
                if not (
                    k in section.ADDED_FIELDS
                    and v == fields[k].get_default(call_default_factory=True)
                    and type(v) is type(fields[k].get_default(call_default_factory=True))
                )
            }
    return out


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
