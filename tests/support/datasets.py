"""Small real datasets for the loader tests, written by the real shard writer.

Frames are tiny (16x24 JPEG per camera, a few dozen LiDAR points) so a dataset of dozens
of samples over many shards builds in well under a second.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
import zlib
from pathlib import Path

import numpy as np
import simplejpeg

from platform_lib.shards.build import BuildConfig, write_dataset
from platform_lib.sources.frame import CameraImage, Cuboids, Frame

CAMERAS = ("front_camera", "left_camera")


def make_frame(log_id: str, frame_index: int, *, points: int = 40) -> Frame:
    """Return a small valid Frame whose content depends on (log_id, frame_index)."""
    rng = np.random.default_rng(zlib.crc32(f"{log_id}/{frame_index}".encode()))
    cameras = {}
    for name in CAMERAS:
        image = rng.integers(0, 255, size=(16, 24, 3), dtype=np.uint8)
        cameras[name] = CameraImage(
            jpeg=simplejpeg.encode_jpeg(image, quality=90),
            width=24,
            height=16,
            intrinsics=np.array([[20.0, 0, 12], [0, 20.0, 8], [0, 0, 1]]),
            extrinsics=np.eye(4),
            timestamp=float(frame_index) * 0.1,
        )
    lidar = rng.normal(size=(points, 4)).astype(np.float32)
    cuboids = Cuboids(
        label=["Car"],
        class_group=["vehicle"],
        center=np.array([[5.0, 1.0, 0.5]]),
        size=np.array([[4.0, 2.0, 1.5]]),
        yaw=np.array([0.1]),
        track_id=[f"{log_id}-car"],
    )
    return Frame(
        log_id=log_id,
        frame_index=frame_index,
        timestamp=frame_index * 0.1,
        ego_pose=np.eye(4),
        cameras=cameras,
        lidar=lidar,
        cuboids=cuboids,
    )


def write_test_dataset(
    root: Path,
    logs: dict[str, int],
    *,
    shard_size_mb: float = 0.025,
    val_logs: tuple[str, ...] = (),
    key_prefixes: int = 1,
) -> Path:
    """Build a dataset of `logs` (log id -> frame count) at `root`; return `root`.

    The default shard size gives about two samples per shard; `key_prefixes` > 1 spreads the
    shards over `shards/pNN/` (`BuildConfig.key_prefixes`).
    """
    frames = [make_frame(log, i) for log in sorted(logs) for i in range(logs[log])]
    config = BuildConfig(
        shard_size_mb=shard_size_mb,
        split="by_log",
        val_logs=val_logs,
        val_fraction=0.0,
        progress=False,
        key_prefixes=key_prefixes,
    )
    source_logs = [{"log_id": log, "content_hash": "0" * 64} for log in sorted(logs)]
    write_dataset(frames, root, config, source="synthetic", source_logs=source_logs)
    return root


def write_index_rows(root: Path, rows: list[dict], schema=None) -> None:
    """Replace the index of the dataset at `root` and record it in the manifest (a rebuilt index).

    The manifest's index entry (sha256, bytes), num_samples and dataset_hash follow the new
    file, as a build writing these rows would have them.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from platform_lib.shards.manifest import compute_dataset_hash

    path = root / "index.parquet"
    schema = schema or pq.read_schema(path)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    data = path.read_bytes()
    manifest = json.loads((root / "manifest.json").read_text())
    sha = hashlib.sha256(data).hexdigest()
    manifest["index"].update(sha256=sha, bytes=len(data))
    manifest["num_samples"] = len(rows)
    manifest["dataset_hash"] = compute_dataset_hash(sha, manifest["shards"])
    (root / "manifest.json").write_text(json.dumps(manifest))


def add_empty_shard(root: Path, position: int = 1) -> None:
    """Insert an empty tar shard into the manifest of the dataset at `root` (ids re-numbered)."""
    path = "shards/shard-900000.tar"  # any shards/shard-NNNNNN.tar name; its position is its id
    with tarfile.open(root / path, "w", format=tarfile.PAX_FORMAT):
        pass
    manifest = json.loads((root / "manifest.json").read_text())
    data = (root / path).read_bytes()
    entry = {
        "path": path,
        "sha256": hashlib.sha256(data).hexdigest(),
        "bytes": len(data),
        "num_samples": 0,
    }
    manifest["shards"].insert(position, entry)
    manifest["num_shards"] += 1
    (root / "manifest.json").write_text(json.dumps(manifest))
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(root / "index.parquet")
    ids = table["shard_id"]
    shifted = pc.if_else(pc.greater_equal(ids, position), pc.add(ids, 1), ids).cast(ids.type)
    table = table.set_column(table.schema.get_field_index("shard_id"), "shard_id", shifted)
    write_index_rows(root, table.to_pylist(), table.schema)


def rename_keys(root: Path, rename: dict[str, str]) -> None:
    """Rewrite the shards of the dataset at `root` with keys renamed (PAX names when long).

    Offsets, sizes and shard bytes in the index and manifest are recomputed from the new tars.
    """
    import io

    import pyarrow.parquet as pq

    manifest = json.loads((root / "manifest.json").read_text())
    schema = pq.read_schema(root / "index.parquet")
    rows = pq.read_table(root / "index.parquet").to_pylist()
    by_key = {row["key"]: row for row in rows}
    for entry in manifest["shards"]:
        path = root / entry["path"]
        with tarfile.open(path) as tar:
            members = [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name, data in members:
                key, ext = name.split(".", 1)
                info = tarfile.TarInfo(f"{rename.get(key, key)}.{ext}")
                info.size, info.mtime, info.mode = len(data), 0, 0o644
                tar.addfile(info, io.BytesIO(data))
        path.write_bytes(buffer.getvalue())
        entry["bytes"] = len(buffer.getvalue())
        with tarfile.open(path) as tar:
            infos = tar.getmembers()
        for old in dict.fromkeys(n.split(".", 1)[0] for n, _ in members):
            new = rename.get(old, old)
            mine = [i for i in infos if i.name.split(".", 1)[0] == new]
            row = by_key[old]
            row["key"] = new
            row["sample_offset"] = mine[0].offset
            row["sample_size"] = (
                mine[-1].offset_data + -(-mine[-1].size // 512) * 512 - mine[0].offset
            )
            offsets = {i.name.split(".", 1)[1]: (i.offset_data, i.size) for i in mine}
            for member in row["members"]:
                member["offset"], member["size"] = offsets[member["name"]]
    (root / "manifest.json").write_text(json.dumps(manifest))
    write_index_rows(root, rows, schema)
