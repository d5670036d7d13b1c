"""What a run trains on: the full-size dataset or a training view of it at the model's camera size.

`choose_training_view` compares the model's camera input (`models.presets`, after overrides of
`model.name`) with the dataset's cameras: when every camera is at least the model's size and one
is larger, the run trains on a view (`shards.training_view`) whose cameras are already at that
size and crop, so the loader decodes them without resizing. `record_trained_on` writes the
dataset a run read into its run folder (`trained_on.json`), where registration finds the view
and its parent (`registry.lineage`). Why views pay: platform_lib/shards/README.md.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from platform_lib.errors import UserError
from platform_lib.fsguard import read_regular
from platform_lib.models.presets import get_model_config
from platform_lib.models.world_model.config import WorldModelConfig
from platform_lib.shards.manifest import ViewLineage, load_manifest
from platform_lib.shards.reader import open_dataset
from platform_lib.shards.training_view import ViewConfig
from platform_lib.telemetry.publish import write_json_atomic
from platform_lib.training.config import TrainConfig

__all__ = [
    "TRAINED_ON_JSON",
    "TrainedOn",
    "choose_training_view",
    "load_trained_on",
    "record_trained_on",
]

#: The run folder's record of the dataset training read (written by rank 0).
TRAINED_ON_JSON = "trained_on.json"
#: Largest trained_on.json read back, in bytes (it holds a hash and a few view fields).
_MAX_RECORD_BYTES = 64 * 1024
_SHA256 = re.compile(r"[0-9a-f]{64}")


def choose_training_view(dataset_dir: str | Path, config: TrainConfig) -> ViewConfig | None:
    """Return the training view `config`'s model should train on, or None for the dataset itself.

    The cameras of the dataset's first sample (`calib.json`; a dataset's sources give every
    sample the same rig) decide: a view (the model's camera size and crop anchor, progress
    bars off) when each camera is at least the model's `camera_width` x `camera_height` and
    one is larger (the view crops and shrinks as the loader's decode would); None when a
    camera is smaller in either side (the loader decodes those as before) or every camera
    already has the model's size (e.g. the dataset is a view at that size).

    Raises:
        ManifestMissingError, DatasetError: `dataset_dir` (local folder or URL) is not a
            published dataset.
    """
    model = get_model_config(config.model.name)
    if isinstance(model, WorldModelConfig):  # its inputs are prepared as BEV fusion's
        model = model.bev_config()
    width, height = model.camera_width, model.camera_height
    with open_dataset(dataset_dir) as reader:
        if not reader.keys:
            return None
        calib = json.loads(reader.read_member(reader.keys[0], "calib.json", verify=True))
    sizes = {(int(c["width"]), int(c["height"])) for c in calib["cameras"].values()}
    if not sizes or any(w < width or h < height for w, h in sizes):
        return None
    if sizes == {(width, height)}:
        return None
    return ViewConfig(
        camera_width=width, camera_height=height, anchor_y=model.camera_anchor_y, progress=False
    )


@dataclass(frozen=True)
class TrainedOn:
    """The dataset a run read: its hash and, for a training view, the view's lineage."""

    dataset_hash: str
    """manifest dataset_hash of the dataset training read (sha256 hex)"""
    view: ViewLineage | None
    """the view's parent and parameters; None when training read a dataset built from raw logs"""

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON record: {"dataset_hash": ..., "view": ViewLineage fields or None}."""
        view = self.view.model_dump(mode="json") if self.view is not None else None
        return {"dataset_hash": self.dataset_hash, "view": view}


def record_trained_on(run_dir: str | Path, dataset_dir: str | Path) -> Path:
    """Write `run_dir/trained_on.json` naming the dataset at `dataset_dir` (atomically).

    Raises:
        ManifestMissingError, ManifestError: `dataset_dir` has no valid manifest.
    """
    manifest = load_manifest(dataset_dir)
    path = Path(run_dir) / TRAINED_ON_JSON
    write_json_atomic(path, TrainedOn(manifest.dataset_hash, manifest.view).to_dict())
    return path


def load_trained_on(run_dir: str | Path) -> TrainedOn | None:
    """Return the record `record_trained_on` left in `run_dir`, None when it wrote none.

    Raises:
        UserError: the record is not JSON, its fields are malformed, or it is larger than
            64 KiB (names the file). NotRegularFileError: it is no regular file.
    """
    path = Path(run_dir) / TRAINED_ON_JSON
    if not path.exists():
        return None
    text = read_regular(path, max_bytes=_MAX_RECORD_BYTES)
    try:
        data = json.loads(text)
        view, dataset_hash = data["view"], data["dataset_hash"]
        if not isinstance(dataset_hash, str) or not _SHA256.fullmatch(dataset_hash):
            raise ValueError(f"dataset_hash {dataset_hash!r} is not a sha256 hex digest")
        return TrainedOn(
            dataset_hash,
            None if view is None else ViewLineage.model_validate(view),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(
            f"not a trained-on record ({type(exc).__name__}: {str(exc).splitlines()[0]})",
            str(path),
            "re-run the training: its rank 0 writes the record (`record_trained_on`)",
        ) from None
