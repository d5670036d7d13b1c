"""Synthetic raw logs: generate (seeded, byte-deterministic), write to disk, read back as Frames.

`write_synthetic_logs` writes one `synth-NNNN/` folder per log (to a temporary sibling, then
renamed into place, so a crash never leaves a half-written log); `synthetic_io.load_synthetic_log` and
`read_synthetic_frame` read them back (through `catalog.iter_log_frames`). The folder layout (meta.json, calib.json, poses.json,
timestamps.json, camera/, lidar/, lidar_seg/, radar/, cuboids/) with units and frames is in
the package README.md, "Synthetic logs"; JSON is `sort_keys=True, separators=(",", ":")`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from itertools import repeat
from pathlib import Path

import numpy as np

from platform_lib.sources.catalog import find_log_folders
from platform_lib.sources.hashing import hash_raw_log
from platform_lib.sources.synthetic_render import (
    prepare_camera_rays,
    render_camera,
    simulate_lidar,
    simulate_radar,
)
from platform_lib.sources.synthetic_scene import (
    CLASS_SPECS,
    RIG,
    SyntheticConfig,
    build_rig,
    sample_scene,
)

__all__ = [
    "FORMAT",
    "SyntheticConfig",
    "hash_raw_log",
    "list_synthetic_logs",
    "synthetic_log_id",
    "write_synthetic_log",
    "write_synthetic_logs",
]

FORMAT = "drivetrain-synthetic-v1"


def synthetic_log_id(log_index: int) -> str:
    """Return the log id of log `log_index`, e.g. "synth-0003"."""
    return f"synth-{log_index:04d}"


def _dump_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, sort_keys=True, separators=(",", ":")))


def _save_npy(path: Path, array: np.ndarray) -> None:
    with open(path, "wb") as fh:
        np.save(fh, array, allow_pickle=False)


def _write_log_files(config: SyntheticConfig, log_index: int, folder: Path) -> None:
    scene = sample_scene(config, log_index)
    rig = build_rig(config.image_width, config.image_height)
    log_id = synthetic_log_id(log_index)
    names = sorted(RIG)
    for sub in ["lidar", "lidar_seg", "radar", "cuboids"] + [f"camera/{n}" for n in names]:
        (folder / sub).mkdir(parents=True)
    _dump_json(
        folder / "meta.json",
        {
            "format": FORMAT,
            "log_id": log_id,
            "log_index": log_index,
            "num_frames": config.frames_per_log,
            "cameras": names,
            "config": config.model_dump(),
        },
    )
    _dump_json(
        folder / "calib.json",
        {
            "cameras": {
                n: {
                    "width": config.image_width,
                    "height": config.image_height,
                    "intrinsics": rig[n]["intrinsics"].tolist(),
                    "extrinsics": rig[n]["extrinsics"].tolist(),
                }
                for n in names
            }
        },
    )
    _dump_json(folder / "poses.json", scene.ego_pose.tolist())
    _dump_json(folder / "timestamps.json", scene.timestamps.tolist())
    labels = [CLASS_SPECS[g][0] for g in scene.class_group]
    rays = {
        n: prepare_camera_rays(config, rig[n]["intrinsics"], rig[n]["extrinsics"]) for n in names
    }
    for f in range(config.frames_per_log):
        rng = np.random.default_rng([config.seed, log_index, 1, f])
        world_from_ego = scene.ego_pose[f]
        rot_t = world_from_ego[:3, :3].T
        center = (scene.center[f] - world_from_ego[:3, 3]) @ rot_t.T
        relative = scene.yaw - np.arctan2(world_from_ego[1, 0], world_from_ego[0, 0])
        yaw = np.arctan2(np.sin(relative), np.cos(relative))  # wrapped to (-pi, pi]
        velocity = scene.velocity @ rot_t.T
        points, seg = simulate_lidar(config, scene.class_group, center, scene.size, yaw, rng)
        radar = simulate_radar(
            config,
            scene.class_group,
            center,
            scene.size,
            yaw,
            velocity,
            scene.ego_speed,
            scene.ego_yaw_rate,
            rng,
        )
        stem = f"{f:06d}"
        _save_npy(folder / "lidar" / f"{stem}.npy", points)
        _save_npy(folder / "lidar_seg" / f"{stem}.npy", seg)
        _save_npy(folder / "radar" / f"{stem}.npy", radar)
        _dump_json(
            folder / "cuboids" / f"{stem}.json",
            {
                "label": labels,
                "class_group": list(scene.class_group),
                "center": center.tolist(),
                "size": scene.size.tolist(),
                "yaw": yaw.tolist(),
                "track_id": list(scene.track_id),
                "velocity": velocity.tolist(),
            },
        )
        for n in names:
            jpeg = render_camera(
                config, rays[n], scene.class_group, center, scene.size, yaw, world_from_ego
            )
            (folder / "camera" / n / f"{stem}.jpg").write_bytes(jpeg)


def write_synthetic_log(
    config: SyntheticConfig, log_index: int, out_dir: str | os.PathLike[str]
) -> Path:
    """Generate log `log_index` of `config` into `out_dir/synth-NNNN/` atomically.

    An existing folder of the same name is replaced. Returns the log folder.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / synthetic_log_id(log_index)
    tmp = out_dir / f".{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        _write_log_files(config, log_index, tmp)
        if final.exists():
            trash = out_dir / f".{final.name}.old-{os.getpid()}"
            os.replace(final, trash)
            os.replace(tmp, final)
            shutil.rmtree(trash)
        else:
            os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def write_synthetic_logs(
    config: SyntheticConfig,
    out_dir: str | os.PathLike[str],
    *,
    progress: bool | None = None,
    workers: int = 1,
) -> list[Path]:
    """Generate all `config.num_logs` logs into `out_dir`; returns their folders, sorted.

    Same config -> byte-identical files, whatever `workers` is (each log has its own seeded
    generator). `progress` shows a tqdm bar (default: on a terminal); `workers` > 1 generates
    logs in that many processes.

    Raises:
        ValueError: if `workers` < 1.
    """
    from tqdm import tqdm

    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    disable = not (progress if progress is not None else os.isatty(2))
    with contextlib.ExitStack() as stack:
        run: Callable[..., Iterator[Path]] = map
        if workers > 1 and config.num_logs > 1:
            run = stack.enter_context(ProcessPoolExecutor(min(workers, config.num_logs))).map
        logs = run(write_synthetic_log, repeat(config), range(config.num_logs), repeat(out_dir))
        bar = tqdm(logs, total=config.num_logs, desc="synthetic logs", unit="log", disable=disable)
        return list(bar)


def list_synthetic_logs(root: str | os.PathLike[str]) -> list[Path]:
    """Return the sorted synthetic log folders under `root` (or [root] if it is one).

    Raises:
        FileNotFoundError: if no folder with a synthetic meta.json is found.
    """
    logs = find_log_folders(Path(root), "meta.json")
    if not logs:
        raise FileNotFoundError(
            f"{root}: no synthetic log found (expected <root>/synth-NNNN/meta.json); generate "
            "logs with write_synthetic_logs or pass the right folder"
        )
    return logs
