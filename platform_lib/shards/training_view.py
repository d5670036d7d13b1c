"""Training views: a dataset whose camera JPEGs are re-encoded once at the model's resolution.

Each camera is decoded by the loader's own path (`imaging.decode.decode_sample_cameras`) and
re-encoded at the output size; `calib.json` gets the intrinsics that path computes, every other
member is copied byte for byte, and the manifest records the lineage (`ViewLineage`). The
parent must pass `validate_dataset`; the view is published like a build. Same parent,
parameters and library versions give the same bytes; why views pay and how they are read:
platform_lib/shards/README.md, "Training views".
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import sys
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import asdict
from importlib import metadata
from itertools import starmap
from pathlib import Path
from typing import Any

import pyarrow as pa
import simplejpeg
from pydantic import BaseModel, ConfigDict, Field
from tqdm import tqdm

from platform_lib.errors import UserError
from platform_lib.imaging.decode import CameraResize, decode_sample_cameras
from platform_lib.shards.build import (
    check_output,
    publish_staging,
    stage_output,
    write_index_and_manifest,
)
from platform_lib.shards.codec import dumps_json
from platform_lib.shards.errors import SampleDecodeError
from platform_lib.shards.manifest import Manifest, ViewLineage
from platform_lib.shards.reader import open_dataset
from platform_lib.shards.validate import validate_dataset
from platform_lib.shards.writer import ShardWriter

__all__ = ["CHROMA_SUBSAMPLING", "ViewConfig", "build_view", "reencode_sample", "view_lineage"]

#: Chroma subsampling of re-encoded cameras (full chroma: the view adds < 2 levels of error).
CHROMA_SUBSAMPLING = "444"
#: Longest a worker may take to re-encode one sample, in s (a hung or starved worker).
_SAMPLE_DEADLINE_S = 600.0
#: Index columns a view copies from its parent (the rest describe where the bytes are).
_SUMMARY_COLUMNS = (
    "key",
    "log_id",
    "frame_index",
    "timestamp",
    "split",
    "num_lidar_points",
    "num_radar_points",
    "num_cuboids",
    "num_vehicle",
    "num_pedestrian",
    "num_cyclist",
)


class ViewConfig(BaseModel):
    """What a training view is (recorded in its manifest) and how it is built."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    camera_width: int = Field(ge=1)
    """camera image width in the view, in pixels (at most the parent's)"""
    camera_height: int = Field(ge=1)
    """camera image height in the view, in pixels (at most the parent's)"""
    anchor_y: float = Field(default=1.0, ge=0.0, le=1.0)
    """vertical position of the aspect-ratio crop: 0 top, 1 bottom rows (the decode path's)"""
    quality: int = Field(default=90, ge=1, le=100)
    """JPEG quality of the re-encoded cameras (libjpeg scale, 1-100)"""
    shard_size_mb: float | None = Field(default=None, gt=0.0, allow_inf_nan=False)
    """target shard size, in MB (10**6 bytes); None: the parent's"""
    overwrite: bool = False
    """replace an existing dataset at the output folder (atomically, by rename)"""
    progress: bool | None = None
    """show tqdm bars; None = only when stderr is a terminal"""
    workers: int = Field(default=1, ge=1)
    """processes that re-encode samples; output bytes do not depend on it"""

    @property
    def resize(self) -> CameraResize:
        """The decode path's output size and crop anchor for this view."""
        return CameraResize(
            width=self.camera_width, height=self.camera_height, anchor_y=self.anchor_y
        )


def view_lineage(parent_dataset_hash: str, config: ViewConfig) -> ViewLineage:
    """Return the manifest lineage of a view of `parent_dataset_hash` built with `config`."""
    pillow = metadata.version("pillow")
    return ViewLineage(
        parent_dataset_hash=parent_dataset_hash,
        camera_width=config.camera_width,
        camera_height=config.camera_height,
        anchor_y=float(config.anchor_y),
        quality=config.quality,
        chroma_subsampling=CHROMA_SUBSAMPLING,
        resize_filter=(
            f"libjpeg-turbo DCT-domain scaling (simplejpeg {simplejpeg.__version__}) + "
            f"antialiased bilinear (Pillow {pillow}), platform_lib.imaging.decode"
        ),
        encoder=f"simplejpeg {simplejpeg.__version__} (libjpeg-turbo)",
    )


def _check_camera_size(calib: dict[str, Any], resize: CameraResize, key: str) -> None:
    """Refuse a view size larger than a camera of sample `key` (a view only shrinks images)."""
    for name, camera in sorted(calib["cameras"].items()):
        width, height = int(camera["width"]), int(camera["height"])
        if resize.width > width or resize.height > height:
            raise UserError(
                f"camera size {resize.width}x{resize.height} is larger than camera {name} "
                f"({width}x{height}) of sample {key}",
                "--camera-size",
                f"give a size of at most {width}x{height} (a view only shrinks images)",
            )


def reencode_sample(
    members: dict[str, Any], resize: CameraResize, quality: int
) -> list[tuple[str, bytes]]:
    """Return the view members of one parent sample, in the parent's member order.

    Args:
        members: `DatasetReader.read_sample` output: "__key__", ext name -> bytes.
        resize: the view's camera size and crop anchor.
        quality: JPEG quality, 1-100.

    Returns:
        [(ext name, bytes)]: `<camera>.jpg` decoded by the decode path at `resize` and
        re-encoded (RGB, 4:4:4); `calib.json` with each camera's width, height and intrinsics
        replaced by the decode path's; every other member as it was.

    Raises:
        UserError: `resize` is larger than a camera (culprit `--camera-size`).
        SampleDecodeError: a camera is not a decodable JPEG or disagrees with calib.json
            (names the sample key and camera).
    """
    key = str(members.get("__key__", "?"))
    calib = json.loads(members["calib.json"])
    _check_camera_size(calib, resize, key)
    cameras = {name[:-4]: data for name, data in members.items() if name.endswith(".jpg")}
    try:
        decoded = decode_sample_cameras(
            {"__key__": key, "cameras": cameras, "calib": calib}, resize
        )
    except ValueError as exc:  # passes its checksums, yet does not decode: built so
        where = "" if str(exc).startswith("sample ") else f"sample {key} camera "
        where += f"{_undecodable(cameras)}: " if where else ""
        raise SampleDecodeError(
            f"{where}{exc}; the parent's builder wrote it so: rebuild the parent from its raw logs"
        ) from None
    for name, camera in calib["cameras"].items():
        adjusted = decoded["calib"]["cameras"][name]
        camera["width"], camera["height"] = adjusted["width"], adjusted["height"]
        camera["intrinsics"] = adjusted["intrinsics"].tolist()
    out = []
    for name, data in members.items():
        if name.startswith("__"):
            continue
        if name.endswith(".jpg"):
            image = decoded["cameras"][name[:-4]]
            data = simplejpeg.encode_jpeg(
                image, quality=quality, colorspace="RGB", colorsubsampling=CHROMA_SUBSAMPLING
            )
        elif name == "calib.json":
            data = dumps_json(calib)
        out.append((name, bytes(data)))
    return out


def _undecodable(cameras: dict[str, bytes]) -> str | None:
    """Return the name of the first camera whose JPEG does not decode (for the message)."""
    for name, data in sorted(cameras.items()):
        try:
            simplejpeg.decode_jpeg(data, colorspace="RGB")
        except ValueError:
            return name
    return None


def _in_order(
    pool: ProcessPoolExecutor, tasks: Iterator[Any], *, ahead: int
) -> Iterator[list[tuple[str, bytes]]]:
    """Yield `reencode_sample(*task)` of `tasks` in order, keeping at most `ahead` in flight.

    Raises:
        UserError: a sample took longer than `_SAMPLE_DEADLINE_S` (a worker hung).
        BrokenProcessPool: a worker died (e.g. killed for memory).
    """
    pending: deque[Future] = deque()
    for task in tasks:
        pending.append(pool.submit(reencode_sample, *task))
        if len(pending) >= ahead:
            yield _result(pending.popleft())
    while pending:
        yield _result(pending.popleft())


def _result(future: Future) -> list[tuple[str, bytes]]:
    try:
        return future.result(timeout=_SAMPLE_DEADLINE_S)
    except TimeoutError:
        raise UserError(
            f"re-encoding one sample took more than {_SAMPLE_DEADLINE_S:.0f} s",
            "--workers",
            "check the machine's load and memory, or build the view with fewer workers",
        ) from None


def _check_parent(dataset: str, shard_roots: Sequence[str], progress: bool) -> None:
    """Refuse a parent dataset that fails validation, naming it and its first problem."""
    report = validate_dataset(dataset, progress=progress, shard_roots=shard_roots)
    if not report.ok:
        raise UserError(
            f"dataset fails validation ({len(report.problems)} problem(s), first: "
            f"{report.problems[0]})",
            dataset,
            "run `drivetrain data validate` on it, rebuild or re-download it, then build the view",
        )


def build_view(
    dataset: str | Path,
    output: str | Path,
    config: ViewConfig,
    *,
    shard_roots: Sequence[str] = (),
) -> Manifest:
    """Build and publish the training view of `dataset` at `output`; return its manifest.

    Args:
        dataset: the parent dataset folder or URL (validated first, every byte).
        output: the view's dataset folder (published atomically, like `drivetrain data build`).
        config: camera size, crop anchor, JPEG quality, shard size, run flags.
        shard_roots: folders a merged parent's shard locations may point into.

    Raises:
        UserError: the parent fails validation (names the dataset); the camera size is larger
            than a camera of the parent (culprit `--camera-size`).
        SampleDecodeError: a camera of the parent does not decode (names sample and camera).
        BuildError: the output may not be written (see `shards.build.check_output`).
        NotRegularFileError, ShardLocationError: see `validate_dataset`.
    """
    dataset = str(dataset).rstrip("/")
    progress = sys.stderr.isatty() if config.progress is None else config.progress
    out = Path(output).absolute()
    check_output(out, config.overwrite)
    _check_parent(dataset, shard_roots, progress)
    with open_dataset(dataset, shard_roots=shard_roots) as reader:
        parent = reader.manifest
        keys = reader.keys
        if keys:  # refuse a too large size before any work
            first = json.loads(reader.read_member(keys[0], "calib.json", verify=True))
            _check_camera_size(first, config.resize, keys[0])
        shard_mb = config.shard_size_mb or float(parent.build_config.get("shard_size_mb", 256.0))
        rows = reader.index.select(list(_SUMMARY_COLUMNS)).to_pylist()
        with contextlib.ExitStack() as stack:
            samples = (reader.read_sample(key, verify=True) for key in keys)
            tasks = ((sample, config.resize, config.quality) for sample in samples)
            encoded: Iterator[list[tuple[str, bytes]]] = starmap(reencode_sample, tasks)
            if config.workers > 1:
                context = multiprocessing.get_context("spawn")
                pool = stack.enter_context(ProcessPoolExecutor(config.workers, mp_context=context))
                encoded = _in_order(pool, tasks, ahead=2 * config.workers)
            bar = tqdm(encoded, total=len(keys), disable=not progress, unit="frame", desc="view")
            stage = stack.enter_context(stage_output(out))
            writer = stack.enter_context(ShardWriter(stage, target_bytes=int(shard_mb * 1e6)))
            for row, members in zip(rows, bar, strict=True):
                row.update(writer.add(row["key"], members).as_row())
            shards = writer.close()
            manifest = write_index_and_manifest(
                stage,
                rows,
                [asdict(s) for s in shards],
                {
                    **parent.to_dict(),
                    "build_config": {
                        **parent.build_config,
                        "shard_size_mb": shard_mb,
                        "pyarrow_version": pa.__version__,
                    },
                    "view": view_lineage(parent.dataset_hash, config).model_dump(mode="json"),
                },
            )
            publish_staging(stage, out, config.overwrite)
    return manifest
