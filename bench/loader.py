"""Loader cold start and steady state against peers and limits, at equal workers, on synthetic and full-size PandaSet frames.

Every reader (this loader per verify and decode mode, webdataset, mosaicml-streaming with
.bench-venv, one file per member, SPDL's thread pipeline where `spdl` imports, the training
view with --view) at each batch size: time to first batch, the rest of its first pass and its
second pass on the same workers (samples/s), /dev/shm peak and load average per row; then the
read and decode limits, worker memory (USS/PSS) and the issue-7 and -17 targets with verdicts.
Readers: bench/readers.py; rows and fairness rules: bench/README.md.

Usage: python bench/loader.py [--datasets synthetic pandaset] [--work DIR] [--workers 2]
       [--batch-sizes 16 1] [--peers all | webdataset spdl ...] [--memory-rows 10000 100000]
       [--json OUT] [--view 704x256] [--decode-threads N] [--shm-budget-gb 2]
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
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from readers import (
    Passes,
    SampleDecoder,
    files_peer,
    index_rows,
    mds_peer,
    ours,
    read_indexed_sample,
    resize_of,
    spdl_peer,
    unpack,
    verify_option,
    webdataset_peer,
    write_mds,
)

from platform_lib.imaging.decode import gpu_decode_available
from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.loader import build_loader
from platform_lib.shards.build import BuildConfig, build_dataset, write_dataset
from platform_lib.shards.commands import parse_camera_size
from platform_lib.shards.manifest import compute_dataset_hash, load_manifest
from platform_lib.shards.training_view import ViewConfig, build_view
from platform_lib.sources.catalog import iter_log_frames, list_logs, read_frames
from platform_lib.sources.synthetic import SyntheticConfig, write_synthetic_logs

_CHUNK = 8 * 2**20
PANDASET = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "pandaset"
VERIFY_POLICIES = ("shard", "member", "none")
#: /dev/shm sampling period of `ShmSampler`, in s
_SHM_PERIOD_S = 0.01
#: LoaderStats fields a row keeps (the ring's /dev/shm figures, when the loader has them)
_SHM_WORDS = ("shm", "flight", "arena", "ring")


@dataclasses.dataclass
class Row:
    """One reader at one decode mode and batch size (a limit: batch 0, steady figures only)."""

    dataset: str
    name: str
    decode: str
    batch_size: int
    bytes_per_sample: float
    first_batch_s: float | None = None
    """fresh reader -> its first batch (pipeline, workers and ring set-up included), in s"""
    first_samples: int = 0
    """samples of the first pass after its first batch"""
    first_seconds: float = 0.0
    """their time, in s"""
    samples: int = 0
    """samples of the second pass (steady state: the same workers, threads or pipeline)"""
    seconds: float = 0.0
    """its time, in s"""
    shm_peak_bytes: int | None = None
    """most bytes in use on /dev/shm during the row above the idle level before it, in bytes"""
    batch_bytes: int | None = None
    """largest batch: raw sample bytes + decoded camera arrays, in bytes (this loader's rows)"""
    in_flight_batches: int | None = None
    """batches the loader may hold at once: workers x prefetch + prefetch + 1 (this loader)"""
    loader_shm: dict = dataclasses.field(default_factory=dict)
    """this loader's LoaderStats fields about its ring / shared memory, when it has them"""
    load_average: float = 0.0
    """1-minute load average at the end of the row"""

    @property
    def samples_s(self) -> float:
        """Steady state (second pass), in samples/s."""
        return self.samples / self.seconds if self.seconds else 0.0

    @property
    def first_pass_s(self) -> float | None:
        """The first pass after its first batch, in samples/s (None: it had one batch)."""
        return self.first_samples / self.first_seconds if self.first_samples else None

    @property
    def mb_s(self) -> float:
        """Steady state, in MB/s of sample bytes."""
        return self.samples_s * self.bytes_per_sample / 1e6

    @property
    def bytes_in_flight(self) -> int | None:
        """The loader's own figure when it reports one, else batch bytes x batches in flight."""
        own = [v for k, v in self.loader_shm.items() if "flight" in k and "peak" in k]
        own = own or [v for k, v in self.loader_shm.items() if "flight" in k]
        if own:
            return int(max(own))
        if self.batch_bytes is None or self.in_flight_batches is None:
            return None
        return self.batch_bytes * self.in_flight_batches

    def record(self) -> dict:
        """The JSON record of this row."""
        return {
            **dataclasses.asdict(self),
            "samples_s": self.samples_s,
            "first_pass_samples_s": self.first_pass_s,
            "mb_s": self.mb_s,
            "bytes_in_flight": self.bytes_in_flight,
        }


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
        for frame in read_frames("synthetic", raw):
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
        frames = (
            f for log in list_logs("pandaset", root) for f in iter_log_frames("pandaset", log)
        )
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


def prepare_view(dataset: Path, args: argparse.Namespace) -> Path:
    """Build (once per parent and size) the training view --view WxH of `dataset`; return it."""
    width, height = parse_camera_size(args.view)
    folder = dataset.parent / f"view-{width}x{height}"
    parent = load_manifest(dataset).dataset_hash
    if (folder / "manifest.json").exists():
        lineage = load_manifest(folder).view
        if lineage is not None and lineage.parent_dataset_hash == parent:
            return folder
    config = ViewConfig(
        camera_width=width,
        camera_height=height,
        overwrite=True,
        progress=False,
        workers=args.workers,
    )
    start = time.perf_counter()
    build_view(dataset, folder, config)
    print(f"  built view {folder} in {time.perf_counter() - start:.1f} s", flush=True)
    return folder


# ---------------------------------------------------------------- measuring a reader


def shm_used(path: str = "/dev/shm") -> int:
    """Bytes in use on the filesystem at `path` (statvfs), in bytes."""
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


class ShmSampler:
    """Peak of `shm_used()` above its level at start, sampled every 10 ms by a thread.

    Counts every process's /dev/shm files: other jobs on the machine show up too.
    """

    def __init__(self, path: str = "/dev/shm") -> None:
        self.path, self.baseline, self.peak = path, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shm-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(_SHM_PERIOD_S):
            self.peak = max(self.peak, shm_used(self.path))

    def __enter__(self) -> ShmSampler:
        self.baseline = self.peak = shm_used(self.path)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)
        self.peak = max(self.peak, shm_used(self.path))

    @property
    def peak_above_baseline(self) -> int:
        return max(0, self.peak - self.baseline)


def _count(batch) -> int:
    return len(batch["__key__"]) if isinstance(batch, dict) else len(batch)


def _batch_bytes(batch, bytes_per_sample: float) -> int:
    """Raw sample bytes of a batch plus its decoded camera arrays, in bytes."""
    decoded = 0
    if isinstance(batch, dict):
        for cameras in batch.get("cameras", []):
            decoded += sum(getattr(im, "nbytes", 0) for im in cameras.values())
    return int(_count(batch) * bytes_per_sample) + decoded


def _time_rest(batches: Iterable, limit: int | None, taken: int = 0) -> tuple[int, float]:
    """Samples and seconds of the rest of a pass: until the batch that brings `taken` to
    `limit` samples (None: the end of the pass)."""
    begin, samples = time.perf_counter(), 0
    for batch in batches:
        samples += _count(batch)
        if limit is not None and taken + samples >= limit:
            break
    return samples, time.perf_counter() - begin


def measure(
    dataset: str,
    name: str,
    mode: str,
    batch_size: int,
    reader: Passes,
    limit: int | None,
    bytes_per_sample: float,
    workers: int,
) -> Row:
    """Time a reader: fresh -> first batch, the rest of its first pass, its second pass.

    Both passes stop after the batch that reaches `limit` samples (None: a whole epoch).
    """
    extras: dict = {}
    row = Row(dataset, name, mode, batch_size, bytes_per_sample)
    with ShmSampler() as shm:
        start = time.perf_counter()
        passes = reader(extras)
        try:
            batches = iter(next(passes))  # builds the reader
            batch = next(batches)
            row.first_batch_s = time.perf_counter() - start
            taken, row.batch_bytes = _count(batch), _batch_bytes(batch, bytes_per_sample)
            del batch  # this loader: its ring slot is free again
            if limit is None or taken < limit:
                row.first_samples, row.first_seconds = _time_rest(batches, limit, taken)
            del batches
            row.samples, row.seconds = _time_rest(next(passes), limit)
        finally:
            passes.close()  # stops the workers, threads or pipeline
    row.shm_peak_bytes = shm.peak_above_baseline
    stats = extras.get("loader_stats") or {}
    row.loader_shm = {
        k: v
        for k, v in stats.items()
        if isinstance(v, int | float) and any(w in k for w in _SHM_WORDS)
    }
    if "prefetch_depth" in extras:  # this loader: each worker's, the receiver's, the loop's
        depth = extras["prefetch_depth"]
        row.in_flight_batches = max(1, workers) * depth + depth + 1
    else:
        row.batch_bytes = None
    row.load_average = os.getloadavg()[0]
    print_row(row)
    return row


def _fmt(value: float | None, spec: str, width: int) -> str:
    return f"{value:{width}{spec}}" if value is not None else f"{'-':>{width}}"


def print_row(row: Row) -> None:
    shm = row.shm_peak_bytes / 1e6 if row.shm_peak_bytes is not None else None
    print(
        f"  {row.name:<24} {row.decode:<13} b={row.batch_size:<3} first batch "
        f"{_fmt(row.first_batch_s, '.2f', 6)} s, first pass {_fmt(row.first_pass_s, '.1f', 8)}, "
        f"steady {row.samples_s:8.1f} samples/s {row.mb_s:8.1f} MB/s, /dev/shm peak "
        f"{_fmt(shm, '.0f', 6)} MB (load average {row.load_average:.1f})",
        flush=True,
    )


def _limit_row(dataset: str, name: str, mode: str, samples: int, seconds: float, per: float) -> Row:
    row = Row(dataset, name, mode, 0, per, samples=samples, seconds=seconds)
    row.load_average = os.getloadavg()[0]
    print_row(row)
    return row


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
    _SAMPLES.extend(read_indexed_sample(dataset, row) for row in index_rows(dataset)[:limit])
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
    distinct (shards are hard links: a dataset's files stay inside its folder; every row still
    points at real sample bytes)."""
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
    (out / "shards").mkdir(exist_ok=True)
    for shard in sorted((dataset / "shards").iterdir()):
        linked = out / "shards" / shard.name
        if not linked.exists():
            try:
                os.link(shard, linked)
            except OSError:  # another file system: copy
                shutil.copy2(shard, linked)
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
        config=LoaderConfig(**verify_option("none")),
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


def _limit(mode: str, args, num: int) -> int | None:
    """Samples per pass: an epoch; decoding rows stop after --decode-samples (decode is the slow
    part), at most an epoch's worth (None: the whole epoch)."""
    return None if mode == "none" or args.decode_samples >= num else args.decode_samples


def _per_sample(dataset: Path) -> float:
    sizes = pq.read_table(dataset / "index.parquet", columns=["sample_size"])["sample_size"]
    return float(sizes.to_numpy().sum()) / len(sizes)


def run_dataset(label: str, dataset: Path, args) -> list[Row]:
    """Every reader at every decode mode and batch size, then the limits, on one dataset."""
    manifest = json.loads((dataset / "manifest.json").read_text())
    num, per_sample = manifest["num_samples"], _per_sample(dataset)
    print(
        f"\n== {label}: {dataset}: {num} samples, {manifest['num_shards']} shards, "
        f"{per_sample / 1e6:.2f} MB/sample, workers={args.workers}, batch sizes {args.batch_sizes}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    peers = (
        {"webdataset", "mosaicml-streaming", "files", "spdl"}
        if "all" in args.peers
        else set(args.peers)
    )
    has_streaming = "mosaicml-streaming" in peers and _importable("streaming")
    has_spdl = "spdl" in peers and _importable("spdl.pipeline")
    if has_streaming:
        write_mds(dataset)
    if "files" in peers:
        unpack(dataset)
    _read_files(sorted(str(p) for p in (dataset / "shards").glob("*.tar")))  # warm the page cache
    # A cold node: no shard of this dataset has had its whole-shard sha256 recorded (verify
    # "shard" checks once per node, in the node cache folder). The first verify=shard row pays
    # those checks; the "verified node" row is a fresh loader on the same node afterwards.
    node_cache = Path(args.work) / "node-cache"
    shutil.rmtree(node_cache, ignore_errors=True)
    os.environ["DRIVETRAIN_CACHE"] = str(node_cache)
    first, w = args.batch_sizes[0], args.workers
    readers: list[tuple[str, str, int, Passes]] = []
    for verify in VERIFY_POLICIES:
        for b in args.batch_sizes if verify == "shard" else [first]:
            readers.append(
                (f"ours verify={verify}", "none", b, ours(dataset, "none", b, w, verify=verify))
            )
            if verify == "shard" and b == first:
                reader = ours(dataset, "none", b, w, verify=verify)
                readers.append(("ours verify=shard, verified node", "none", b, reader))
    for mode in _decode_modes(args):
        for b in args.batch_sizes:
            if mode != "none":
                reader = ours(dataset, mode, b, w, decode_threads=args.decode_threads)
                readers.append(("ours", mode, b, reader))
            if mode == "cpu" and b == first and args.shm_budget_gb:
                budget = int(args.shm_budget_gb * 2**30)
                reader = ours(dataset, mode, b, w, shm_budget_bytes=budget)
                readers.append((f"ours shm budget {args.shm_budget_gb:g} GiB", mode, b, reader))
            if mode.startswith("gpu"):
                continue  # the peers have no GPU decode
            if "webdataset" in peers:
                readers.append(("webdataset", mode, b, webdataset_peer(dataset, mode, b, w)))
            if has_streaming:
                readers.append(("mosaicml-streaming", mode, b, mds_peer(dataset, mode, b, w)))
            if "files" in peers:
                readers.append(("files", mode, b, files_peer(dataset, mode, b, w)))
            if has_spdl:
                spdl = spdl_peer(dataset, mode, b, w, _limit(mode, args, num))
                readers.append(("spdl", mode, b, spdl))
    rows = []
    for name, mode, b, reader in readers:
        try:
            limit = _limit(mode, args, num)
            rows.append(measure(label, name, mode, b, reader, limit, per_sample, args.workers))
        except NotImplementedError as exc:
            print(f"  {name:<24} {mode:<13} skipped: {exc}", flush=True)
    held = min(num, args.decode_limit_samples)  # samples in memory for the decode limit
    for mode in _decode_modes(args):
        if not mode.startswith("gpu"):
            done, seconds = limit_memory_decode(dataset, mode, args, held)
            rows.append(_limit_row(label, "limit: mem decode", mode, done, seconds, per_sample))
    seconds = limit_sequential_read(dataset, args)
    rows.append(_limit_row(label, "limit: seq read", "-", num, seconds, per_sample))
    if "mosaicml-streaming" in peers and not has_streaming:
        print(
            "  mosaicml-streaming: not importable here; run with .bench-venv/bin/python (see bench/README.md)"
        )
    if "spdl" in peers and not has_spdl:
        print("  spdl: not importable here; install the bench extra (see bench/README.md)")
    return rows


def run_view(view: Path, args: argparse.Namespace) -> list[Row]:
    """This loader over the training view, decode cpu at the view's size (no resize)."""
    manifest = load_manifest(view)
    size = f"{manifest.view.camera_width}x{manifest.view.camera_height}"
    per_sample = (manifest.total_bytes - manifest.index.bytes) / manifest.num_samples
    _read_files(sorted(str(p) for p in (view / "shards").glob("*.tar")))  # warm the page cache
    mode = f"cpu@{size}"
    limit = _limit(mode, args, manifest.num_samples)
    return [
        measure(
            "pandaset",
            f"ours view {size}",
            mode,
            b,
            ours(view, mode, b, args.workers, decode_threads=args.decode_threads),
            limit,
            per_sample,
            args.workers,
        )
        for b in args.batch_sizes
    ]


def _find(rows: list[Row], name: str, mode: str, batch: int | None = None) -> Row | None:
    for r in rows:
        if r.name == name and r.decode == mode and (batch is None or r.batch_size in (batch, 0)):
            return r
    return None


def _ours_row(rows: list[Row], mode: str, batch: int) -> Row | None:
    """This loader's row that a peer's row at `mode` and `batch` compares with."""
    if mode == "none":
        return _find(rows, "ours verify=shard", mode, batch) or _find(
            rows, "ours verify=member", mode, batch
        )
    return _find(rows, "ours", mode, batch)


def print_table(rows: list[Row], args) -> None:
    print(
        f"\n{'dataset':<10} {'pipeline':<24} {'decode':<13} {'batch':>5} {'1st batch s':>11} "
        f"{'1st pass/s':>10} {'steady/s':>9} {'MB/s':>8} {'1st/steady':>10} {'ours / this':>11} "
        f"{'shm MB':>7} {'load':>5}"
    )
    for r in rows:
        same = [x for x in rows if x.dataset == r.dataset]
        ours_row = _ours_row(same, r.decode, r.batch_size or args.batch_sizes[0])
        ratio = ours_row.samples_s / r.samples_s if ours_row and r.samples_s else None
        cold = r.first_pass_s / r.samples_s if r.first_pass_s and r.samples_s else None
        shm = r.shm_peak_bytes / 1e6 if r.shm_peak_bytes is not None else None
        print(
            f"{r.dataset:<10} {r.name:<24} {r.decode:<13} {r.batch_size or '-':>5} "
            f"{_fmt(r.first_batch_s, '.2f', 11)} {_fmt(r.first_pass_s, '.1f', 10)} "
            f"{r.samples_s:9.1f} {r.mb_s:8.1f} {_fmt(cold, '.2f', 10)} {_fmt(ratio, '.2f', 11)} "
            f"{_fmt(shm, '.0f', 7)} {r.load_average:5.1f}"
        )


def print_targets(rows: list[Row], memory: list[dict], args) -> list[dict]:
    """Print the targets of issues 7 and 17 (pandaset rows when present) with verdicts; return them.

    Throughput ratios use the steady state (second pass) of each reader.
    """
    label = (
        "pandaset" if not rows or any(r.dataset == "pandaset" for r in rows) else rows[0].dataset
    )
    mine = [r for r in rows if r.dataset == label]
    b = args.batch_sizes[0]
    b16 = 16 if 16 in args.batch_sizes else max(args.batch_sizes)
    small = f"cpu@{args.camera_width}x{args.camera_height}"
    targets: list[dict] = []

    def rate(name: str, mode: str, batch: int = b) -> float | None:
        row = _find(mine, name, mode, batch)
        return row.samples_s if row else None

    def ratio(num: float | None, den: float | None) -> float | None:
        return num / den if num is not None and den else None

    def target(what: str, value: float | None, need: float, fmt: str = "{:.2f}x", *, most=False):
        if value is None:
            targets.append({"target": what, "value": None, "need": need, "verdict": "not measured"})
            return
        met = value <= need if most else value >= need
        targets.append(
            {
                "target": what,
                "value": value,
                "need": need,
                "verdict": "met" if met else "MISSED",
                "text": fmt.format(value),
            }
        )

    # issue 7
    ours_none = rate("ours verify=shard", "none") or rate("ours verify=member", "none")
    for peer, short in (("mosaicml-streaming", "MDS"), ("webdataset", "webdataset")):
        target(
            f"decode none, verify shard: >= 1.5x {short}", ratio(ours_none, rate(peer, "none")), 1.5
        )
    target(
        "decode none, verify shard: >= 40% of seq read",
        ratio(ours_none, rate("limit: seq read", "-")),
        0.40,
        "{:.0%}",
    )
    full = rate("ours", "cpu")
    target(
        "decode cpu full: >= 1.2x MDS (same decode)",
        ratio(full, rate("mosaicml-streaming", "cpu")),
        1.2,
    )
    target(
        "decode cpu full: >= 80% of mem decode limit",
        ratio(full, rate("limit: mem decode", "cpu")),
        0.8,
        "{:.0%}",
    )
    if len(args.batch_sizes) > 1:
        one = 1 if 1 in args.batch_sizes else args.batch_sizes[-1]
        big = max(args.batch_sizes)
        target(
            f"decode cpu full: batch {big} no slower than batch {one}",
            ratio(rate("ours", "cpu", big), rate("ours", "cpu", one)),
            1.0,
        )
    target(
        f"decode {small} (DCT; issue 7, replaced by the training view): >= 3x full-size decode",
        ratio(rate("ours", small), full),
        3.0,
    )
    # issue 17
    none16, cpu16 = _find(mine, "ours verify=shard", "none", b16), _find(mine, "ours", "cpu", b16)
    warm16 = _find(mine, "ours verify=shard, verified node", "none", b16)
    for what, row, need in (
        ("decode none, cold node", none16, 0.5),
        ("decode none, verified node", warm16, 0.5),
        ("full-size decode", cpu16, 1.0),
    ):
        first_at = row.first_batch_s if row else None
        target(
            f"first batch, {what}, batch {b16}: <= {need} s", first_at, need, "{:.2f} s", most=True
        )
    for mode, name, batches in (
        ("none", "ours verify=shard", args.batch_sizes),
        ("none", "ours verify=shard, verified node", args.batch_sizes[:1]),
        ("cpu", "ours", args.batch_sizes),
    ):
        for batch in batches:
            row = _find(mine, name, mode, batch)
            node = " (cold node)" if name == "ours verify=shard" and batch == b16 else ""
            node = ", verified node" if "verified" in name else node
            target(
                f"rest of first pass, decode {mode}, batch {batch}{node}: >= 0.8x steady",
                ratio(row.first_pass_s, row.samples_s) if row else None,
                0.8,
            )
    target(
        f"decode none, batch {b16}: >= 1.2x SPDL (steady)",
        ratio(rate("ours verify=shard", "none", b16), rate("spdl", "none", b16)),
        1.2,
    )
    target(
        f"full-size decode, batch {b16}: >= 90% of mem decode limit",
        ratio(rate("ours", "cpu", b16), rate("limit: mem decode", "cpu")),
        0.9,
        "{:.0%}",
    )
    if args.view:
        target(
            f"training view {args.view}, batch {b16}: >= 3x full-size decode",
            ratio(
                rate(f"ours view {args.view}", f"cpu@{args.view}", b16), rate("ours", "cpu", b16)
            ),
            3.0,
        )
    peak = cpu16.shm_peak_bytes if cpu16 else None
    flight = cpu16.bytes_in_flight if cpu16 else None
    own = bool(cpu16 and any("flight" in k for k in cpu16.loader_shm))
    target(
        f"/dev/shm peak, full-size decode, batch {b16}: <= 1.25x bytes in flight"
        + ("" if own else " (estimated)"),
        ratio(peak, flight),
        1.25,
        most=True,
    )
    target(
        f"/dev/shm peak, full-size decode, batch {b16}: <= 3 GB",
        peak / 1e9 if peak is not None else None,
        3.0,
        "{:.2f} GB",
        most=True,
    )
    if len(memory) >= 2:
        lo, hi = memory[0], memory[-1]
        for field, what in (("uss", "USS"), ("uss_outside_shm", "USS outside /dev/shm")):
            growth = (max(hi[field]) - max(lo[field])) / 2**20
            target(
                f"worker {what} growth {lo['rows']} -> {hi['rows']} rows <= 20 MiB",
                growth,
                20.0,
                "{:.1f} MiB",
                most=True,
            )
    print(f"\nTargets ({label}, {args.workers} workers; ratios from this run, steady state):")
    for t in targets:
        print(f"  {t['target']:<78} {t.get('text', '-'):>10}  {t['verdict']}")
    return targets


def profile_ours(dataset: Path, mode: str, args) -> None:
    """cProfile of this loader's worker path in one process (num_workers=0): top lines by tottime."""
    import cProfile
    import pstats

    config = LoaderConfig(camera_resize=resize_of(mode))
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
    samples, _ = _time_rest(loader, args.profile_samples)
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
        help="samples per pass of a decoding row (whole batches; decode none rows read the "
        "whole dataset per pass)",
    )
    parser.add_argument(
        "--peers",
        nargs="*",
        choices=("all", "webdataset", "mosaicml-streaming", "files", "spdl"),
        default=["all"],
        help="peer readers to measure (none: this loader only; mosaicml-streaming and spdl only where importable)",
    )
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
    parser.add_argument(
        "--decode-threads",
        type=int,
        default=None,
        help="LoaderConfig.decode_threads of this loader's decoding rows (default: its default)",
    )
    parser.add_argument(
        "--shm-budget-gb",
        type=float,
        default=None,
        help="also read full-size decode at the first batch size under this ring budget, GiB",
    )
    parser.add_argument("--json", help="also write the rows as JSON here")
    parser.add_argument(
        "--view",
        metavar="WxH",
        help="also build the training view of the pandaset dataset at WxH (e.g. 704x256) and "
        "measure this loader on it, decode cpu at its size",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.view:
        args.view = "{}x{}".format(*parse_camera_size(args.view))  # e.g. "704x256"
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
    if args.view and "pandaset" in built and not args.memory_only:
        print(f"\n== pandaset training view {args.view}", flush=True)
        rows.extend(run_view(prepare_view(built["pandaset"], args), args))
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
                    "rows": [r.record() for r in rows],
                    "memory": memory,
                    "targets": targets,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
