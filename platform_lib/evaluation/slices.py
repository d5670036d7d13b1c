"""Slice specs: named subsets of the evaluated frames, declared over per-frame attributes.

A spec (YAML or JSON, example in platform_lib/evaluation/README.md) lists slices; a slice
selects the frames that meet every condition of its `where` (ANDed; a list is "any of"). The
slice "all" is always evaluated. Attributes (`FrameAttributes`): `log_id`, `num_<class>` and
`has_<class>` from the dataset index, `ego_speed_mps` from the ego poses (central differences
within a log; NaN in a one-frame log, matching no range), and `time_of_day` / `weather` where
a source provides them (none does yet: such a slice is refused, naming slice and attribute).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from platform_lib.evaluation.errors import EvaluationError, SliceSpecError, validation_error
from platform_lib.evaluation.metrics import log_of_key
from platform_lib.fsguard import read_regular
from schemas.classes import CLASS_GROUPS

__all__ = [
    "ALL_SLICE",
    "FrameAttributes",
    "NumberRange",
    "Slice",
    "SliceSpec",
    "Where",
    "ego_speeds",
    "load_frame_attributes",
    "load_slice_spec",
    "parse_slice_spec",
    "slice_masks",
]

ALL_SLICE = "all"
MAX_SPEC_BYTES = 1 << 20
_FORBID = ConfigDict(frozen=True, extra="forbid")


class NumberRange(BaseModel):
    """Closed range min <= value <= max; either bound may be left out, not both."""

    model_config = _FORBID

    min: float | None = Field(default=None, allow_inf_nan=False)
    """lower bound (finite)"""
    max: float | None = Field(default=None, allow_inf_nan=False)
    """upper bound (finite)"""

    @model_validator(mode="after")
    def _check(self) -> NumberRange:
        if self.min is None and self.max is None:
            raise ValueError("give min, max or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} exceeds max {self.max}")
        return self

    def contains(self, values: np.ndarray) -> np.ndarray:
        """Return (N,) bool: values inside the range (NaN never is)."""
        values = np.asarray(values, dtype=np.float64)
        out = ~np.isnan(values)
        if self.min is not None:
            out &= values >= self.min
        if self.max is not None:
            out &= values <= self.max
        return out


class Where(BaseModel):
    """Conditions on per-frame attributes; a frame must meet all that are given."""

    model_config = _FORBID

    log_id: list[str] | None = Field(default=None, min_length=1)
    """frames of these logs"""
    ego_speed_mps: NumberRange | None = None
    """ego speed, in m/s"""
    num_vehicle: NumberRange | None = None
    """vehicle cuboids in the frame"""
    num_pedestrian: NumberRange | None = None
    """pedestrian cuboids in the frame"""
    num_cyclist: NumberRange | None = None
    """cyclist cuboids in the frame"""
    has_vehicle: bool | None = None
    """at least one vehicle cuboid (true) or none (false)"""
    has_pedestrian: bool | None = None
    """at least one pedestrian cuboid (true) or none (false)"""
    has_cyclist: bool | None = None
    """at least one cyclist cuboid (true) or none (false)"""
    time_of_day: list[str] | None = Field(default=None, min_length=1)
    """time-of-day tags, e.g. day, dusk, night (where the source provides them)"""
    weather: list[str] | None = Field(default=None, min_length=1)
    """weather tags, e.g. clear, rain, fog (where the source provides them)"""

    def conditions(self) -> dict[str, Any]:
        """Return the conditions given, by attribute name."""
        return {k: v for k, v in self if v is not None}


class Slice(BaseModel):
    """A named subset of frames."""

    model_config = _FORBID

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")
    """slice name (lower case, digits, _ and -; used in MLflow tag keys)"""
    where: Where
    """the conditions (at least one)"""

    @model_validator(mode="after")
    def _not_empty(self) -> Slice:
        if self.name == ALL_SLICE:
            raise ValueError(f"slice name {ALL_SLICE!r} is reserved for every frame")
        if not self.where.conditions():
            raise ValueError(f"slice {self.name!r} has no condition (an empty slice)")
        return self


class SliceSpec(BaseModel):
    """The slices to evaluate besides "all"."""

    model_config = _FORBID

    slices: list[Slice] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> SliceSpec:
        names = [s.name for s in self.slices]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"slice names {twice} are used more than once")
        return self


def parse_slice_spec(data: Any, *, culprit: str = "slice spec") -> SliceSpec:
    """Validate a spec given as plain data (a parsed YAML/JSON document).

    Raises:
        SliceSpecError: unknown attribute, empty slice, bad value; names the field path.
    """
    try:
        return SliceSpec.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, SliceSpec, culprit, SliceSpecError) from None


def load_slice_spec(path: str | os.PathLike[str]) -> SliceSpec:
    """Read and validate a slice spec file (.yaml, .yml or .json; at most 1 MiB).

    Raises:
        SliceSpecError: no such file, unknown suffix, unparsable text, or a spec
            `parse_slice_spec` refuses.
        NotRegularFileError: the path is a FIFO, device, socket or folder.
        OSError: the file cannot be opened (e.g. no permission).
    """
    try:
        raw = read_regular(path, max_bytes=MAX_SPEC_BYTES)
    except (FileNotFoundError, NotADirectoryError):
        raise SliceSpecError(
            "slice spec file does not exist",
            str(path),
            "pass a .yaml or .json slice spec file, or leave --spec out for the built-in slices",
        ) from None
    suffix = Path(path).suffix.lower()
    if suffix not in (".yaml", ".yml", ".json"):
        raise SliceSpecError(
            f"unknown slice spec format {suffix or '(none)'!r}", str(path), "use .yaml or .json"
        )
    text = raw.decode("utf-8", errors="replace")
    try:
        data = json.loads(text) if suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError, RecursionError) as exc:  # JSONDecodeError: a ValueError
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise SliceSpecError(
            f"unparsable slice spec ({reason})", str(path), "fix its syntax"
        ) from None
    return parse_slice_spec(data, culprit=str(path))


@dataclass(frozen=True, eq=False)
class FrameAttributes:
    """Per-frame attributes, one array of N values per attribute, rows in `keys` order."""

    keys: tuple[str, ...]
    """sample keys (N,)"""
    columns: dict[str, np.ndarray]
    """attribute name -> (N,) values (str, int, float or bool arrays)"""


def slice_masks(
    spec: SliceSpec, attributes: FrameAttributes, *, skip_empty: bool = False
) -> dict[str, np.ndarray]:
    """Return slice name -> (N,) bool frame mask, "all" first, then the spec's order.

    With `skip_empty`, a slice that selects no frame is left out instead of refused.

    Raises:
        SliceSpecError: a slice needs an attribute the dataset lacks, or selects no frame.
    """
    n = len(attributes.keys)
    masks = {ALL_SLICE: np.ones(n, dtype=bool)}
    for s in spec.slices:
        mask = np.ones(n, dtype=bool)
        for name, condition in s.where.conditions().items():
            if name not in attributes.columns:
                raise SliceSpecError(
                    f"slice {s.name!r} needs attribute {name!r}, which this dataset lacks",
                    "slice spec",
                    f"evaluate on a dataset whose source provides {name!r} or drop the condition "
                    f"(present: {sorted(attributes.columns)})",
                )
            values = attributes.columns[name]
            if isinstance(condition, NumberRange):
                mask &= condition.contains(values)
            elif isinstance(condition, bool):
                mask &= np.asarray(values, dtype=bool) == condition
            else:
                mask &= np.isin(np.asarray(values, dtype=object), list(condition))
        if not mask.any():
            if skip_empty:
                continue
            raise SliceSpecError(
                f"slice {s.name!r} selects no frame of the {n} evaluated",
                "slice spec",
                "loosen its conditions or evaluate on a dataset that has such frames",
            )
        masks[s.name] = mask
    return masks


def ego_speeds(timestamps: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Return (F,) ego speed in m/s of the frames of one log from their poses.

    Args:
        timestamps: (F,) sweep times in s, increasing.
        positions: (F, 3) ego position in the world frame, in m (world_from_ego[:3, 3]).

    Returns:
        Norm of the position's time derivative (central differences, one-sided at the ends);
        all NaN for one frame or timestamps that do not increase.
    """
    t = np.asarray(timestamps, dtype=np.float64)
    if t.size < 2 or np.any(np.diff(t) <= 0):
        return np.full(t.size, np.nan)
    velocity = np.gradient(np.asarray(positions, dtype=np.float64), t, axis=0)
    return np.linalg.norm(velocity, axis=1)


def load_frame_attributes(
    dataset_dir: str | os.PathLike[str], keys: Sequence[str]
) -> FrameAttributes:
    """Return the attributes of `keys` from a published dataset (index + pose members).

    Ego speed uses every frame of the log in the index (any split) as a neighbour.

    Raises:
        EvaluationError: a key that is not in the dataset.
        The errors of `platform_lib.shards.reader.open_dataset`.
    """
    from platform_lib.shards.reader import open_dataset

    with open_dataset(os.fspath(dataset_dir)) as reader:
        index = reader.index.select(
            ["key", "log_id", "timestamp", *(f"num_{c}" for c in CLASS_GROUPS)]
        ).to_pydict()
        row = {k: i for i, k in enumerate(index["key"])}
        missing = [k for k in keys if k not in row]
        if missing:
            raise EvaluationError(
                f"{len(missing)} evaluated frames are not in the dataset, e.g. {missing[0]!r}",
                str(dataset_dir),
                "compute the attributes on the dataset the model was evaluated on",
            )
        wanted = {log_of_key(k) for k in keys}
        by_log: dict[str, list[tuple[float, str]]] = {}
        for k, i in row.items():
            if index["log_id"][i] in wanted:
                by_log.setdefault(index["log_id"][i], []).append((index["timestamp"][i], k))
        speed: dict[str, float] = {}
        for log in sorted(by_log):
            frames = sorted(by_log[log])
            poses = [json.loads(reader.read_member(k, "pose.json"))["ego_pose"] for _, k in frames]
            positions = np.asarray(poses, dtype=np.float64)[:, :3, 3]
            values = ego_speeds(np.array([t for t, _ in frames]), positions)
            speed.update({k: float(v) for (_, k), v in zip(frames, values, strict=True)})
    rows = [row[k] for k in keys]
    columns: dict[str, np.ndarray] = {
        "log_id": np.array([index["log_id"][i] for i in rows], dtype=object),
        "ego_speed_mps": np.array([speed[k] for k in keys], dtype=np.float64),
    }
    for c in CLASS_GROUPS:
        counts = np.array([index[f"num_{c}"][i] for i in rows], dtype=np.int64)
        columns[f"num_{c}"] = counts
        columns[f"has_{c}"] = counts > 0
    return FrameAttributes(tuple(keys), columns)
