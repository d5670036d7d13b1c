"""Loader throughput against peers and limits, at equal workers, on synthetic and full-size PandaSet frames.

Datasets (built once under --work):
    synthetic   rendered synthetic logs (6 JPEG cameras, LiDAR with labels, radar), replicated
    pandaset    the 10 frames of the real PandaSet sample (../shared/data/pandaset/002), replicated
                under distinct log ids to --pandaset-frames frames: 6 x 1920x1080 JPEG untouched +
                ~170k-point LiDAR, ~4.4 MB per frame

Rows (samples/s; every pipeline: --workers DataLoader workers, the same identity collate (a
batch is a list of decoded samples; no torch conversion), the same decode functions
`decode_sample` + `imaging.decode.decode_sample_cameras`):
    ours verify=V        loading.loader.build_loader, verify shard/member/none (decode none)
    ours                 build_loader with the default verify, decode none / cpu / cpu@WxH
                         (camera_resize; DCT-domain downscaling) / gpu (nvJPEG, only with CUDA)
    webdataset           upstream webdataset: WebDataset(shardshuffle) .shuffle(1000) .map(decode)
                         .batched(B, identity collate) in a WebLoader(batch_size=None) -- its docs' setup
    mosaicml-streaming   StreamingDataset over the same samples written as MDS, DataLoader(batch_size=B)
                         (only when `streaming` is importable: run with .bench-venv/bin/python)
    files                one file per member, map-style Dataset, shuffled DataLoader
    limit: seq read      --workers processes reading the shard files sequentially (8 MiB reads)
    limit: mem decode    --workers processes decoding samples already in memory (no I/O, no hand-off)
Batch sizes: this loader's rows at each of --batch-sizes, the peers' at each for decode none and
at the first for decoding rows, the verify variants at the first. Decoding rows stop after
--decode-samples samples (decode none rows read every sample).
Worker memory: for indexes of --memory-rows rows (the dataset's index tiled under distinct keys),
the private memory (USS, PSS from /proc/PID/smaps_rollup) of each loader worker
after --memory-batches batches.
Everything runs on a warm page cache (the files are read once first). Targets (issue 7, for the
pandaset dataset) are printed with their verdicts at the end.

Usage: python bench/loader.py [--datasets synthetic pandaset] [--work DIR] [--workers 2]
       [--batch-sizes 16 1] [--peers all|webdataset] [--memory-rows 10000 100000 1000000] [--json OUT]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from torch.utils.data import DataLoader, Dataset

from platform_lib.imaging.decode import CameraResize, decode_sample_cameras, gpu_decode_available
from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.loader import build_loader
from platform_lib.shards.build import BuildConfig, build_dataset, write_dataset
from platform_lib.shards.codec import decode_sample
from platform_lib.shards.manifest import compute_dataset_hash
from platform_lib.shards.sources import open_source
from platform_lib.sources.synthetic import SyntheticConfig, read_synthetic, write_synthetic_logs

_CHUNK = 8 * 2**20
PANDASET = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "pandaset"
VERIFY_POLICIES = ("shard", "member", "none")


@dataclasses.dataclass
class Row:
    dataset: str
    name: str
    decode: str
    batch_size: int
    samples: int
    seconds: float
    bytes_per_sample: float

    @property
    def samples_s(self) -> float:
        return self.samples / self.seconds

    @property
    def mb_s(self) -> float:
        return self.samples * self.bytes_per_sample / self.seconds / 1e6


# ---------------------------------------------------------------- datasets


def _replicated(frames_by_log: dict[str, list], copies: int) -> Iterable:
    for log_id in sorted(frames_by_log):  # (log_id, frame_index) order, as the writer requires
        for copy in range(copies):
            for frame in frames_by_log[log_id]:
                yield dataclasses.replace(frame, log_id=f"{log_id}-r{copy:03d}")


def _source_logs(small: Path, copies: int) -> list[dict]:
    logs = json.loads((small / "manifest.json").read_text())["source_logs"]
    return [
        {"log_id": f"{log['log_id']}-r{c:03d}", "content_hash": log["content_hash"]}
        for log in logs
        for c in range(copies)
    ]


def _readable(dataset: Path) -> bool:
    """True if the dataset has this checkout's index schema and its loader reads it (False
    after a format change: rebuild, so every row measures today's format)."""
    from schemas.index import INDEX_SCHEMA

    if not pq.read_schema(dataset / "index.parquet").equals(INDEX_SCHEMA, check_metadata=False):
        print(f"  {dataset}: index schema differs from this checkout's; rebuilding", flush=True)
        return False
    try:
        loader = build_loader(
            str(dataset), rank=0, world_size=1, batch_size=1, num_workers=0, seed=0, decode="none"
        )
        next(iter(loader))
    except Exception as exc:
        print(
            f"  {dataset} is not readable by this checkout ({type(exc).__name__}: {exc}); rebuilding",
            flush=True,
        )
        return False
    return True


def _fresh(folder: Path, spec: dict) -> bool:
    spec_file = folder / "spec.json"
    if (
        (folder / "dataset" / "manifest.json").exists()
        and spec_file.exists()
        and json.loads(spec_file.read_text()) == spec
        and _readable(folder / "dataset")
    ):
        return False
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return True


def prepare_synthetic(work: Path, args: argparse.Namespace) -> Path:
    """Generate (once) the synthetic logs and the replicated dataset; return the dataset folder."""
    folder = work / "synthetic"
    spec = {
        k: getattr(args, k)
        for k in ("num_logs", "frames_per_log", "width", "height", "replicas", "shard_size_mb")
    }
    if _fresh(folder, spec):
        raw, small = folder / "raw", folder / "small"
        write_synthetic_logs(
            SyntheticConfig(
                num_logs=args.num_logs,
                frames_per_log=args.frames_per_log,
                image_width=args.width,
                image_height=args.height,
                lidar_azimuth_bins=1024,
            ),
            raw,
            progress=False,
        )
        build_dataset(
            "synthetic",
            raw,
            small,
            BuildConfig(shard_size_mb=args.shard_size_mb, val_fraction=0.0, progress=False),
        )
        by_log: dict[str, list] = {}
        for frame in read_synthetic(raw):
            by_log.setdefault(frame.log_id, []).append(frame)
        write_dataset(
            _replicated(by_log, args.replicas),
            folder / "dataset",
            BuildConfig(shard_size_mb=args.shard_size_mb, val_fraction=0.0, progress=False),
            source="synthetic",
            source_logs=_source_logs(small, args.replicas),
        )
        (folder / "spec.json").write_text(json.dumps(spec))
    return folder / "dataset"


def prepare_pandaset(work: Path, args: argparse.Namespace) -> Path:
    """Build (once) the PandaSet sample replicated to >= --pandaset-frames frames; return the dataset."""
    folder = work / "pandaset"
    copies = -(-args.pandaset_frames // 10)
    root = Path(args.pandaset_root)
    spec = {"copies": copies, "shard_size_mb": args.pandaset_shard_size_mb, "source": str(root)}
    if _fresh(folder, spec):
        small = folder / "small"
        build_dataset("pandaset", root, small, BuildConfig(val_fraction=0.0, progress=False))
        frames, _, _ = open_source("pandaset", root)
        by_log: dict[str, list] = {}
        for frame in frames:
            by_log.setdefault(frame.log_id, []).append(frame)
        write_dataset(
            _replicated(by_log, copies),
            folder / "dataset",
            BuildConfig(
                shard_size_mb=args.pandaset_shard_size_mb, val_fraction=0.0, progress=False
            ),
            source="pandaset",
            source_logs=_source_logs(small, copies),
        )
        (folder / "spec.json").write_text(json.dumps(spec))
    return folder / "dataset"


def _index(dataset: Path) -> list[dict]:
    return pq.read_table(dataset / "index.parquet", columns=["key", "shard", "members"]).to_pylist()


def read_indexed_sample(dataset: Path, row: dict) -> dict:
    """Return {"__key__", member name: bytes} of one index row, read by byte range."""
    with open(dataset / row["shard"], "rb") as f:
        sample = {"__key__": row["key"]}
        for m in row["members"]:
            f.seek(m["offset"])
            sample[m["name"]] = f.read(m["size"])
    return sample


# ---------------------------------------------------------------- decode modes


def _resize_of(mode: str) -> CameraResize | None:
    """ "cpu@704x256" -> CameraResize(704, 256); "cpu"/"none" -> None."""
    if "@" not in mode:
        return None
    width, height = mode.split("@", 1)[1].split("x")
    return CameraResize(width=int(width), height=int(height))


class SampleDecoder:
    """The decode every pipeline runs on a sample's member bytes (picklable)."""

    def __init__(self, mode: str) -> None:
        self.mode, self.resize = mode, _resize_of(mode)

    def __call__(self, members: dict) -> dict:
        sample = decode_sample(members, decode="none")
        return sample if self.mode == "none" else decode_sample_cameras(sample, self.resize)


def _list_collate(batch: list) -> list:
    return batch


def _time_batches(
    loader: Iterable, count: Callable[[object], int], limit: int | None = None
) -> tuple[int, float]:
    """Samples and seconds of one pass over `loader` (worker start included), stopping after
    the batch that reaches `limit` samples."""
    start, samples = time.perf_counter(), 0
    for batch in loader:
        samples += count(batch)
        if limit is not None and samples >= limit:
            break
    return samples, time.perf_counter() - start


def _limit(mode: str, args) -> int | None:
    """Samples per row: decoding rows stop after --decode-samples (decode is the slow part)."""
    return None if mode == "none" else args.decode_samples


# ---------------------------------------------------------------- pipelines


def _verify_option(verify: str | None) -> dict:
    """LoaderConfig verify option for a policy name (a bool before the verify policies existed)."""
    if verify is None:
        return {}
    fields = getattr(LoaderConfig, "model_fields", None)  # pydantic since issue 16
    kind = (
        fields["verify"].annotation
        if fields is not None
        else next(f for f in dataclasses.fields(LoaderConfig) if f.name == "verify").type
    )
    if kind in (bool, "bool"):
        if verify == "shard":
            raise NotImplementedError("verify='shard' needs the verify policies of issue 7")
        return {"verify": verify == "member"}
    return {"verify": verify}


def bench_ours(
    dataset: Path, mode: str, batch_size: int, args, verify: str | None = None
) -> tuple[int, float]:
    decode = mode.split("@")[0]
    config = LoaderConfig(camera_resize=_resize_of(mode), **_verify_option(verify))
    loader = build_loader(
        str(dataset),
        rank=0,
        world_size=1,
        batch_size=batch_size,
        num_workers=args.workers,
        seed=0,
        decode=decode,
        config=config,
    )
    return _time_batches(loader, lambda b: len(b["__key__"]), _limit(mode, args))


def bench_webdataset(dataset: Path, mode: str, batch_size: int, args) -> tuple[int, float]:
    import webdataset as wds

    urls = sorted(str(p) for p in (dataset / "shards").glob("*.tar"))
    pipeline = (
        wds.WebDataset(
            urls,
            shardshuffle=len(urls),
            nodesplitter=wds.single_node_only,
            workersplitter=wds.split_by_worker,
            empty_check=False,
        )
        .shuffle(1000)
        .map(SampleDecoder(mode))
        .batched(batch_size, collation_fn=_list_collate)
    )
    # batch_size=None + the identity collate: without it torch would convert every array to a
    # tensor and pass each through its own file descriptor (default_convert)
    loader = wds.WebLoader(
        pipeline, batch_size=None, num_workers=args.workers, collate_fn=_list_collate
    )
    return _time_batches(loader, len, _limit(mode, args))


class _MemberFiles(Dataset):
    """One file per member: <folder>/<key>.<member>."""

    def __init__(self, folder: Path, members: dict[str, list[str]], mode: str) -> None:
        self.folder, self.keys, self.members = folder, sorted(members), members
        self.decode = SampleDecoder(mode)

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, i: int) -> dict:
        key = self.keys[i]
        raw = {name: (self.folder / f"{key}.{name}").read_bytes() for name in self.members[key]}
        return self.decode({**raw, "__key__": key})


def _unpack(dataset: Path) -> tuple[Path, dict[str, list[str]]]:
    folder = dataset.parent / "unpacked"
    index = _index(dataset)
    members = {row["key"]: [m["name"] for m in row["members"]] for row in index}
    if not (folder / ".done").exists():
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for row in index:
            for name, data in read_indexed_sample(dataset, row).items():
                if name != "__key__":
                    (folder / f"{row['key']}.{name}").write_bytes(data)
        (folder / ".done").touch()
    return folder, members


def bench_files(dataset: Path, mode: str, batch_size: int, args) -> tuple[int, float]:
    folder, members = _unpack(dataset)
    loader = DataLoader(
        _MemberFiles(folder, members, mode),
        batch_size=batch_size,
        shuffle=True,
        num_workers=args.workers,
        collate_fn=_list_collate,
    )
    return _time_batches(loader, len, _limit(mode, args))


def _write_mds(dataset: Path) -> Path:
    from streaming import MDSWriter

    out = dataset.parent / "mds"
    if (out / "index.json").exists():
        return out
    index = _index(dataset)
    columns = {"__key__": "str", **{m["name"]: "bytes" for m in index[0]["members"]}}
    shard_bytes = int(json.loads((dataset / "manifest.json").read_text())["shards"][0]["bytes"])
    with MDSWriter(out=str(out), columns=columns, size_limit=shard_bytes) as writer:
        for row in index:
            writer.write(read_indexed_sample(dataset, row))
    return out


def bench_mds(dataset: Path, mode: str, batch_size: int, args) -> tuple[int, float]:
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    decoder = SampleDecoder(mode)

    class Decoded(StreamingDataset):
        def get_item(self, idx: int) -> dict:
            return decoder(super().get_item(idx))

    local = _write_mds(dataset)
    clean_stale_shared_memory()
    ds = Decoded(local=str(local), batch_size=batch_size, shuffle=True, shuffle_seed=0)
    loader = DataLoader(
        ds, batch_size=batch_size, num_workers=args.workers, collate_fn=_list_collate
    )
    return _time_batches(loader, len, _limit(mode, args))


# ---------------------------------------------------------------- limits


def _read_files(paths: list[str]) -> int:
    total = 0
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while chunk := f.read(_CHUNK):
                total += len(chunk)
    return total


def limit_sequential_read(dataset: Path, args) -> float:
    paths = sorted(str(p) for p in (dataset / "shards").glob("*.tar"))
    parts = [paths[w :: args.workers] for w in range(args.workers)]
    with mp.get_context("fork").Pool(args.workers) as pool:
        pool.map(len, parts)  # start the processes before timing
        start = time.perf_counter()
        pool.map(_read_files, parts)
        return time.perf_counter() - start


_SAMPLES: list[dict] = []


def _decode_range(bounds: tuple[int, int, str]) -> int:
    lo, hi, mode = bounds
    decoder = SampleDecoder(mode)
    for sample in _SAMPLES[lo:hi]:
        decoder(sample)
    return hi - lo


def limit_memory_decode(dataset: Path, mode: str, args, limit: int) -> tuple[int, float]:
    _SAMPLES.clear()
    _SAMPLES.extend(read_indexed_sample(dataset, row) for row in _index(dataset)[:limit])
    edges = np.linspace(0, len(_SAMPLES), args.workers + 1).astype(int)
    with mp.get_context("fork").Pool(args.workers) as pool:
        pool.map(len, [[0]] * args.workers)
        start = time.perf_counter()
        done = sum(
            pool.map(_decode_range, [(edges[w], edges[w + 1], mode) for w in range(args.workers)])
        )
        seconds = time.perf_counter() - start
    _SAMPLES.clear()
    return int(done), seconds


# ---------------------------------------------------------------- worker memory


def tiled_index_dataset(dataset: Path, rows: int, out: Path) -> Path:
    """Write a dataset at `out` whose index has `rows` rows: `dataset`'s rows tiled, keys made
    distinct (shards are symlinked; every row still points at real sample bytes)."""
    if (out / "manifest.json").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    table = pq.read_table(dataset / "index.parquet")
    take = np.arange(rows) % table.num_rows
    tiled = table.take(pa.array(take))
    copy = np.arange(rows) // table.num_rows
    keys = [f"{k}-t{c}" for k, c in zip(tiled["key"].to_pylist(), copy.tolist(), strict=True)]
    logs = [f"{k}-t{c}" for k, c in zip(tiled["log_id"].to_pylist(), copy.tolist(), strict=True)]
    tiled = tiled.set_column(tiled.schema.get_field_index("key"), "key", pa.array(keys))
    tiled = tiled.set_column(tiled.schema.get_field_index("log_id"), "log_id", pa.array(logs))
    pq.write_table(tiled, out / "index.parquet")
    (out / "shards").symlink_to((dataset / "shards").resolve())
    manifest = json.loads((dataset / "manifest.json").read_text())
    index_sha = hashlib.sha256((out / "index.parquet").read_bytes()).hexdigest()
    manifest["index"] = {**manifest["index"], "sha256": index_sha}
    if "bytes" in manifest["index"]:
        manifest["index"]["bytes"] = (out / "index.parquet").stat().st_size
    manifest["num_samples"] = rows
    manifest["dataset_hash"] = compute_dataset_hash(index_sha, manifest["shards"])
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found.extend(int(c) for c in text)
    return found


def private_memory(pid: int) -> tuple[int, int, int]:
    """(USS, PSS, USS outside the loader's shared-memory files) of process `pid`, in bytes.

    From /proc/PID/smaps (Linux). USS = Private_Clean + Private_Dirty (+ Private_Hugetlb): the
    pages only this process maps, e.g. index pages a forked worker copied on write (or on
    refcount updates). It also counts the pages of the loader's shared-memory ring (and order
    files) that this worker wrote and the main process has not touched yet: tmpfs pages
    allocated once per loader, whose count varies with the slots in use, not with the index;
    the third value leaves out every mapping of a file under /dev/shm."""
    uss = pss = shm = 0
    in_shm = False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split(maxsplit=5)
        if not head[0].endswith(":"):  # a mapping's header line: "start-end perms ... [path]"
            in_shm = len(head) > 5 and head[5].startswith("/dev/shm/")
            continue
        value = int(head[1]) * 1024 if len(head) > 1 and head[1].isdigit() else 0
        if head[0] in ("Private_Clean:", "Private_Dirty:", "Private_Hugetlb:"):
            uss += value
            shm += value if in_shm else 0
        elif head[0] == "Pss:":
            pss += value
    return uss, pss, uss - shm


def _measure_worker_memory(dataset: str, workers: int, batches: int, queue) -> None:
    # verify none: the tiled rows' keys differ from the names in the tar headers they point at
    loader = build_loader(
        dataset,
        rank=0,
        world_size=1,
        batch_size=4,
        num_workers=workers,
        seed=0,
        decode="none",
        config=LoaderConfig(**_verify_option("none")),
    )
    found: dict[int, tuple[int, int, int]] = {}
    for i, _ in enumerate(loader):
        if i + 1 >= batches:
            for pid in _children(os.getpid()):
                try:
                    found[pid] = private_memory(pid)
                except (FileNotFoundError, ProcessLookupError):
                    continue
            break
    queue.put(
        {
            "uss": [u for u, _, _ in found.values()],
            "pss": [p for _, p, _ in found.values()],
            "uss_outside_shm": [o for _, _, o in found.values()],
        }
    )


def worker_memory(dataset: Path, rows: int, args) -> dict:
    """USS/PSS of each worker after --memory-batches batches, in a fresh (spawned) process."""
    tiled = tiled_index_dataset(dataset, rows, dataset.parent / f"index-{rows}")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(
        target=_measure_worker_memory, args=(str(tiled), args.workers, args.memory_batches, queue)
    )
    proc.start()
    while True:
        try:
            result = queue.get(timeout=1.0)
            break
        except Exception:  # queue.Empty: still running, unless it died
            if not proc.is_alive():
                raise RuntimeError(
                    f"worker-memory process for {rows} rows exited with {proc.exitcode}"
                ) from None
    proc.join()
    return {"rows": rows, **result}


# ---------------------------------------------------------------- run


def _importable(name: str) -> bool:
    try:
        __import__(name)
    except ImportError:
        return False
    return True


def _decode_modes(args) -> list[str]:
    modes = ["none", "cpu", f"cpu@{args.camera_width}x{args.camera_height}"]
    if gpu_decode_available():
        modes.append(f"gpu@{args.camera_width}x{args.camera_height}")
    return modes


def run_dataset(label: str, dataset: Path, args) -> list[Row]:
    manifest = json.loads((dataset / "manifest.json").read_text())
    num = manifest["num_samples"]
    per_sample = (
        float(
            pq.read_table(dataset / "index.parquet", columns=["sample_size"])["sample_size"]
            .to_numpy()
            .sum()
        )
        / num
    )
    print(
        f"\n== {label}: {dataset}: {num} samples, {manifest['num_shards']} shards, "
        f"{per_sample / 1e6:.2f} MB/sample, workers={args.workers}, batch sizes {args.batch_sizes}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    has_streaming = args.peers == "all" and _importable("streaming")
    if has_streaming:
        _write_mds(dataset)
    if args.peers == "all":
        _unpack(dataset)
    _read_files(sorted(str(p) for p in (dataset / "shards").glob("*.tar")))  # warm the page cache
    limit = min(num, args.decode_limit_samples)
    first = args.batch_sizes[0]
    jobs: list[tuple[str, str, int, Callable[[], tuple[int, float]]]] = []
    for verify in VERIFY_POLICIES:
        jobs.append(
            (
                f"ours verify={verify}",
                "none",
                first,
                lambda v=verify: bench_ours(dataset, "none", first, args, verify=v),
            )
        )
    for b in args.batch_sizes[1:]:
        jobs.append(
            (
                "ours verify=shard",
                "none",
                b,
                lambda b=b: bench_ours(dataset, "none", b, args, verify="shard"),
            )
        )
    for mode in _decode_modes(args):
        for b in args.batch_sizes:
            if mode != "none":
                jobs.append(("ours", mode, b, lambda m=mode, b=b: bench_ours(dataset, m, b, args)))
            if mode.startswith("gpu") or (b != first and mode != "none"):
                continue  # peers at the other batch sizes: decode none only (time on 2 cores)
            jobs.append(
                ("webdataset", mode, b, lambda m=mode, b=b: bench_webdataset(dataset, m, b, args))
            )
            if has_streaming:
                jobs.append(
                    (
                        "mosaicml-streaming",
                        mode,
                        b,
                        lambda m=mode, b=b: bench_mds(dataset, m, b, args),
                    )
                )
            if args.peers == "all":
                jobs.append(
                    ("files", mode, b, lambda m=mode, b=b: bench_files(dataset, m, b, args))
                )
        if not mode.startswith("gpu"):
            jobs.append(
                (
                    "limit: mem decode",
                    mode,
                    0,
                    lambda m=mode: limit_memory_decode(dataset, m, args, limit),
                )
            )
    jobs.append(("limit: seq read", "-", 0, lambda: (num, limit_sequential_read(dataset, args))))
    rows = []
    for name, mode, b, job in jobs:
        try:
            samples, seconds = job()
        except NotImplementedError as exc:
            print(f"  {name:<24} {mode:<13} skipped: {exc}", flush=True)
            continue
        row = Row(label, name, mode, b, samples, seconds, per_sample)
        rows.append(row)
        print(
            f"  {name:<24} {mode:<13} b={b:<3} {row.samples_s:9.1f} samples/s {row.mb_s:9.1f} MB/s "
            f"(load average {os.getloadavg()[0]:.1f})",
            flush=True,
        )
    if args.peers == "all" and not has_streaming:
        print(
            "  mosaicml-streaming: not importable here; run with .bench-venv/bin/python (see bench/README.md)"
        )
    return rows


def _find(rows: list[Row], name: str, mode: str, batch: int | None = None) -> Row | None:
    for r in rows:
        if r.name == name and r.decode == mode and (batch is None or r.batch_size in (batch, 0)):
            return r
    return None


def print_table(rows: list[Row], args) -> None:
    first = args.batch_sizes[0]
    print(
        f"\n{'dataset':<10} {'pipeline':<24} {'decode':<13} {'batch':>5} {'samples/s':>10} {'MB/s':>9} "
        f"{'ours / this':>12}"
    )
    for r in rows:
        same = [x for x in rows if x.dataset == r.dataset]
        ours = _find(
            same,
            "ours verify=shard" if r.decode == "none" else "ours",
            r.decode,
            r.batch_size or first,
        )
        ours = ours or _find(same, "ours verify=member", r.decode, first)
        ratio = f"{ours.samples_s / r.samples_s:12.2f}" if ours else f"{'':>12}"
        print(
            f"{r.dataset:<10} {r.name:<24} {r.decode:<13} {r.batch_size or '-':>5} {r.samples_s:10.1f} "
            f"{r.mb_s:9.1f} {ratio}"
        )


def print_targets(rows: list[Row], memory: list[dict], args) -> list[dict]:
    """Print the issue-7 targets (pandaset rows when present) with verdicts; return them."""
    label = (
        "pandaset" if not rows or any(r.dataset == "pandaset" for r in rows) else rows[0].dataset
    )
    mine = [r for r in rows if r.dataset == label]
    b = args.batch_sizes[0]
    small = f"cpu@{args.camera_width}x{args.camera_height}"

    def rate(name, mode, batch=b):
        row = _find(mine, name, mode, batch)
        return row.samples_s if row else None

    targets = []

    def target(what, num, den, need, fmt="{:.2f}x"):
        if num is None or den is None:
            targets.append({"target": what, "value": None, "need": need, "verdict": "not measured"})
            return
        value = num / den
        targets.append(
            {
                "target": what,
                "value": value,
                "need": need,
                "verdict": "met" if value >= need else "MISSED",
                "text": fmt.format(value),
            }
        )

    ours_none = rate("ours verify=shard", "none") or rate("ours verify=member", "none")
    target(
        "decode none, verify shard: >= 1.5x MDS", ours_none, rate("mosaicml-streaming", "none"), 1.5
    )
    target(
        "decode none, verify shard: >= 1.5x webdataset", ours_none, rate("webdataset", "none"), 1.5
    )
    target(
        "decode none, verify shard: >= 40% of seq read",
        ours_none,
        rate("limit: seq read", "-"),
        0.40,
        "{:.0%}",
    )
    target(
        "decode cpu full: >= 1.2x MDS (same decode)",
        rate("ours", "cpu"),
        rate("mosaicml-streaming", "cpu"),
        1.2,
    )
    target(
        "decode cpu full: >= 80% of mem decode limit",
        rate("ours", "cpu"),
        rate("limit: mem decode", "cpu"),
        0.8,
        "{:.0%}",
    )
    if len(args.batch_sizes) > 1:
        one = 1 if 1 in args.batch_sizes else args.batch_sizes[-1]
        big = max(args.batch_sizes)
        target(
            f"decode cpu full: batch {big} no slower than batch {one}",
            rate("ours", "cpu", big),
            rate("ours", "cpu", one),
            1.0,
        )
    target(
        f"decode {small} (DCT): >= 3x full-size decode",
        rate("ours", small),
        rate("ours", "cpu"),
        3.0,
    )
    if len(memory) >= 2:
        lo, hi = memory[0], memory[-1]
        for field, what in (("uss", "USS"), ("uss_outside_shm", "USS outside /dev/shm")):
            growth = (max(hi[field]) - max(lo[field])) / 2**20
            targets.append(
                {
                    "target": f"worker {what} growth {lo['rows']} -> {hi['rows']} rows <= 20 MiB",
                    "value": growth,
                    "need": 20.0,
                    "verdict": "met" if growth <= 20 else "MISSED",
                    "text": f"{growth:.1f} MiB",
                }
            )
    print(f"\nTargets ({label}, {args.workers} workers, batch {b}; ratios from this run):")
    for t in targets:
        print(f"  {t['target']:<52} {t.get('text', '-'):>10}  {t['verdict']}")
    return targets


def profile_ours(dataset: Path, mode: str, args) -> None:
    """cProfile of this loader's worker path in one process (num_workers=0): top lines by tottime."""
    import cProfile
    import pstats

    config = LoaderConfig(camera_resize=_resize_of(mode))
    loader = build_loader(
        str(dataset),
        rank=0,
        world_size=1,
        batch_size=args.batch_sizes[0],
        num_workers=0,
        seed=0,
        decode=mode.split("@")[0],
        config=config,
    )
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    samples, _ = _time_batches(loader, lambda b: len(b["__key__"]), args.profile_samples)
    profiler.disable()
    ms = (time.perf_counter() - start) / samples * 1e3
    print(
        f"\n== profile: ours decode={mode}, {dataset.parent.name}, one process, {samples} samples, "
        f"{ms:.1f} ms/sample (cProfile on)"
    )
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(args.profile_lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--work", default=os.path.join(tempfile.gettempdir(), "drivetrain-bench-loader")
    )
    parser.add_argument(
        "--datasets",
        nargs="+",
        choices=("synthetic", "pandaset"),
        default=["synthetic", "pandaset"],
    )
    parser.add_argument(
        "--workers", type=int, default=2, help="DataLoader workers / processes per pipeline"
    )
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 1])
    parser.add_argument("--num-logs", type=int, default=4)
    parser.add_argument("--frames-per-log", type=int, default=20)
    parser.add_argument(
        "--width", type=int, default=480, help="synthetic camera image width, pixels"
    )
    parser.add_argument(
        "--height", type=int, default=272, help="synthetic camera image height, pixels"
    )
    parser.add_argument(
        "--replicas", type=int, default=20, help="copies of the rendered synthetic logs"
    )
    parser.add_argument("--shard-size-mb", type=float, default=64.0)
    parser.add_argument(
        "--pandaset-root", default=str(PANDASET), help="PandaSet root holding sequence 002"
    )
    parser.add_argument(
        "--pandaset-frames", type=int, default=300, help="PandaSet frames after replication"
    )
    parser.add_argument("--pandaset-shard-size-mb", type=float, default=256.0)
    parser.add_argument("--camera-width", type=int, default=704, help="reduced decode size, pixels")
    parser.add_argument(
        "--camera-height", type=int, default=256, help="reduced decode size, pixels"
    )
    parser.add_argument(
        "--decode-limit-samples",
        type=int,
        default=300,
        help="samples held in memory for the decode limit",
    )
    parser.add_argument(
        "--decode-samples",
        type=int,
        default=160,
        help="samples per decoding row (whole batches; decode none rows read the whole dataset)",
    )
    parser.add_argument("--peers", choices=("all", "webdataset"), default="all")
    parser.add_argument(
        "--memory-rows",
        type=int,
        nargs="*",
        default=[10_000, 100_000, 1_000_000],
        help="index sizes for the worker-memory rows (empty: skip)",
    )
    parser.add_argument(
        "--memory-batches", type=int, default=20, help="batches read before measuring memory"
    )
    parser.add_argument(
        "--memory-only",
        action="store_true",
        help="measure only the worker-memory rows (no throughput rows, no profiles)",
    )
    parser.add_argument(
        "--profile",
        nargs="*",
        default=[],
        metavar="DECODE",
        help="after the rows, cProfile this loader in one process for these decode modes "
        "(e.g. none cpu cpu@704x256)",
    )
    parser.add_argument("--profile-samples", type=int, default=64)
    parser.add_argument("--profile-lines", type=int, default=12)
    parser.add_argument("--json", help="also write the rows as JSON here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    work = Path(args.work)
    print(
        f"bench/loader.py {' '.join(argv if argv is not None else sys.argv[1:])}; uptime load "
        f"{os.getloadavg()}",
        flush=True,
    )
    datasets = {
        "synthetic": lambda: prepare_synthetic(work, args),
        "pandaset": lambda: prepare_pandaset(work, args),
    }
    rows: list[Row] = []
    built = {name: datasets[name]() for name in args.datasets}
    for name, dataset in built.items():
        if not args.memory_only:
            rows.extend(run_dataset(name, dataset, args))
    memory = []
    if args.memory_rows:
        base = built.get("pandaset", next(iter(built.values())))
        print(
            f"\nworker private memory ({args.workers} workers, after {args.memory_batches} batches of 4, "
            f"index of {base.parent.name} tiled):"
        )
        for n in args.memory_rows:
            m = worker_memory(base, n, args)
            memory.append(m)
            print(
                f"  {n:>9} rows: USS {', '.join(f'{u / 2**20:.1f}' for u in m['uss'])} MiB, "
                f"outside /dev/shm {', '.join(f'{u / 2**20:.1f}' for u in m['uss_outside_shm'])} MiB, "
                f"PSS {', '.join(f'{p / 2**20:.1f}' for p in m['pss'])} MiB",
                flush=True,
            )
    for mode in [] if args.memory_only else args.profile:
        profile_ours(built.get("pandaset", next(iter(built.values()))), mode, args)
    print_table(rows, args)
    targets = print_targets(rows, memory, args)
    print(f"\nload average at the end {os.getloadavg()}")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "rows": [
                        {**dataclasses.asdict(r), "samples_s": r.samples_s, "mb_s": r.mb_s}
                        for r in rows
                    ],
                    "memory": memory,
                    "targets": targets,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
