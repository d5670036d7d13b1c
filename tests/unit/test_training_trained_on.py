"""What a run trains on: the view chosen for a model's camera input, and the run folder's record."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pytest
import simplejpeg

from platform_lib.errors import UserError
from platform_lib.fsguard import NotRegularFileError
from platform_lib.imaging.decode import plan_camera_resize
from platform_lib.models.bev_fusion.prepare import camera_resize
from platform_lib.models.presets import get_model_config
from platform_lib.shards.build import BuildConfig, write_dataset
from platform_lib.shards.manifest import load_manifest
from platform_lib.shards.reader import open_dataset
from platform_lib.shards.training_view import ViewConfig, build_view
from platform_lib.training.config import replace
from platform_lib.training.presets import get_preset
from platform_lib.training.trained_on import (
    TRAINED_ON_JSON,
    TrainedOn,
    choose_training_view,
    load_trained_on,
    record_trained_on,
)
from tests.support.datasets import make_frame, write_test_dataset


def _dataset(root: Path, width: int, height: int) -> Path:
    """A 2-frame dataset whose two cameras are width x height JPEGs."""
    frames = []
    for i in range(2):
        frame = make_frame("a", i)
        image = np.random.default_rng(i).integers(0, 255, (height, width, 3), dtype=np.uint8)
        jpeg = simplejpeg.encode_jpeg(image, quality=90)
        cameras = {
            name: dataclasses.replace(camera, jpeg=jpeg, width=width, height=height)
            for name, camera in frame.cameras.items()
        }
        frames.append(dataclasses.replace(frame, cameras=cameras))
    config = BuildConfig(split="by_log", val_fraction=0.0, progress=False)
    write_dataset(
        frames,
        root,
        config,
        source="synthetic",
        source_logs=[{"log_id": "a", "content_hash": "0" * 64}],
    )
    return root


def test_a_model_smaller_than_the_cameras_trains_on_a_view_at_its_input_size(
    tmp_path: Path,
) -> None:
    config = get_preset("synthetic_default")  # bev_fusion_small: 80 x 48 camera input
    model = get_model_config(config.model.name)
    dataset = _dataset(tmp_path / "ds", 160, 96)  # the synthetic source's cameras
    view = choose_training_view(dataset, config)
    assert view == ViewConfig(
        camera_width=80, camera_height=48, anchor_y=model.camera_anchor_y, progress=False
    )
    build_view(dataset, tmp_path / "view", view)
    # The loader's camera size is the view's: decoding at load is an identity plan (no resize).
    with open_dataset(tmp_path / "view") as reader:
        calib = json.loads(reader.read_member(reader.keys[0], "calib.json"))
    for camera in calib["cameras"].values():
        plan = plan_camera_resize(camera["width"], camera["height"], camera_resize(model))
        assert (plan.crop_x, plan.crop_y, plan.crop_width, plan.crop_height) == (0, 0, 80, 48)
        assert (plan.width, plan.height) == (80, 48)
    # The view itself needs no further view.
    assert choose_training_view(tmp_path / "view", config) is None


@pytest.mark.parametrize(
    ("size", "model"),
    [
        ((80, 48), "bev_fusion_small"),  # cameras at the model's size already
        ((64, 48), "bev_fusion_small"),  # narrower than the model: the loader upsamples
        ((80, 40), "bev_fusion_small"),  # lower than the model
        ((160, 96), "bev_fusion_large"),  # 224 x 128 input from 160 x 96 cameras
    ],
)
def test_cameras_not_larger_than_the_model_input_train_as_they_are(
    tmp_path: Path, size: tuple[int, int], model: str
) -> None:
    base = get_preset("small")
    config = replace(base, model=replace(base.model, name=model))
    assert choose_training_view(_dataset(tmp_path / "ds", *size), config) is None


def test_a_world_model_trains_on_a_view_at_the_camera_size_of_its_bev_inputs(
    tmp_path: Path,
) -> None:
    base = get_preset("small")
    model = replace(base.model, name="world_model_small")  # inputs: bev_fusion's, 80 x 48
    config = replace(base, model=model, data=replace(base.data, window_frames=3))
    view = choose_training_view(_dataset(tmp_path / "ds", 160, 96), config)
    assert view == ViewConfig(camera_width=80, camera_height=48, anchor_y=1.0, progress=False)


def test_the_run_folder_records_the_dataset_training_read(tmp_path: Path) -> None:
    parent = write_test_dataset(tmp_path / "ds", {"a": 2})
    view_dir = tmp_path / "view"
    view = build_view(
        parent, view_dir, ViewConfig(camera_width=12, camera_height=6, progress=False)
    )
    run = tmp_path / "run"
    run.mkdir()
    assert load_trained_on(run) is None  # a run folder from before the record
    record_trained_on(run, parent)
    assert load_trained_on(run) == TrainedOn(load_manifest(parent).dataset_hash, None)
    record_trained_on(run, view_dir)
    record = load_trained_on(run)
    assert record == TrainedOn(view.dataset_hash, view.view)
    assert (
        record.view is not None
        and record.view.parent_dataset_hash == load_manifest(parent).dataset_hash
    )
    assert sorted(p.name for p in run.iterdir()) == [TRAINED_ON_JSON]  # no temporary left


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        '{"dataset_hash": "abc", "view": null}',
        '{"dataset_hash": "' + "a" * 64 + '"}',
        '{"dataset_hash": "' + "a" * 64 + '", "view": {"camera_width": 0}}',
    ],
)
def test_a_malformed_record_is_refused_naming_it(tmp_path: Path, text: str) -> None:
    (tmp_path / TRAINED_ON_JSON).write_text(text)
    with pytest.raises(
        UserError, match=rf"^not a trained-on record \(.*\) \(.*/{TRAINED_ON_JSON}\)"
    ):
        load_trained_on(tmp_path)


def test_a_record_that_is_no_regular_file_or_too_large_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / TRAINED_ON_JSON)
    with pytest.raises(NotRegularFileError):
        load_trained_on(tmp_path)  # returns at once: a FIFO is never opened for reading
    (tmp_path / TRAINED_ON_JSON).unlink()
    (tmp_path / TRAINED_ON_JSON).write_text(" " * (65 * 1024))
    with pytest.raises(UserError):
        load_trained_on(tmp_path)
