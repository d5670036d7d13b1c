"""The readers `bench/loader.py` times: this loader and its peers, each as a generator of passes.

A reader is a function `passes(extras)` that builds the pipeline when first advanced, yields
its first pass (an iterable of batches), then its second pass over the same workers, threads or
pipeline (persistent workers: DataLoader(persistent_workers=True) for webdataset, MDS and the
files peer; SPDL keeps its pipeline), and releases everything when closed; it may put counters
(this loader's `LoaderStats`) into `extras`. Every reader gets the same `--workers`, the same
decode (`SampleDecoder`) and the same identity collate (`list_collate`). Setups: bench/README.md.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable, Generator, Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from torch.utils.data import DataLoader, Dataset

from platform_lib.imaging.decode import CameraResize, decode_sample_cameras
from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.loader import build_loader
from platform_lib.shards.codec import decode_sample

__all__ = [
    "Passes",
    "SampleDecoder",
    "list_collate",
    "ours",
    "files_peer",
    "mds_peer",
    "read_indexed_sample",
    "resize_of",
    "spdl_peer",
    "unpack",
    "webdataset_peer",
    "write_mds",
]

#: A reader: `passes(extras)` -> its first pass, then its second (see the module doc).
Passes = Callable[[dict], Generator[Iterable, None, None]]
#: Longest wait for one item of the SPDL pipeline, in s (the loader's worker timeout).
_SPDL_TIMEOUT_S = 300.0


# ---------------------------------------------------------------- samples and decode


def index_rows(dataset: Path) -> list[dict]:
    """Index rows (key, shard, members with name/offset/size) of a dataset, in index order."""
    return pq.read_table(dataset / "index.parquet", columns=["key", "shard", "members"]).to_pylist()


def read_indexed_sample(dataset: Path, row: dict) -> dict:
    """Return {"__key__", member name: bytes} of one index row, read by byte range."""
    with open(dataset / row["shard"], "rb") as f:
        sample = {"__key__": row["key"]}
        for m in row["members"]:
            f.seek(m["offset"])
            sample[m["name"]] = f.read(m["size"])
    return sample


def resize_of(mode: str) -> CameraResize | None:
    """ "cpu@704x256" -> CameraResize(704, 256); "cpu"/"none" -> None."""
    if "@" not in mode:
        return None
    width, height = mode.split("@", 1)[1].split("x")
    return CameraResize(width=int(width), height=int(height))


class SampleDecoder:
    """The decode every pipeline runs on a sample's member bytes (picklable)."""

    def __init__(self, mode: str) -> None:
        self.mode, self.resize = mode, resize_of(mode)

    def __call__(self, members: dict) -> dict:
        sample = decode_sample(members, decode="none")
        return sample if self.mode == "none" else decode_sample_cameras(sample, self.resize)


def list_collate(batch: list) -> list:
    """The identity collate: a batch is the list of its decoded samples."""
    return batch


def _stop_workers(loader: DataLoader) -> None:
    """Stop a DataLoader's persistent workers now (not at garbage collection)."""
    iterator = getattr(loader, "_iterator", None)
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()


def _persistent(loader: DataLoader) -> Generator[Iterable, None, None]:
    """Two passes over a DataLoader with persistent workers, then stop them."""
    try:
        yield loader
        yield loader
    finally:
        _stop_workers(loader)


# ---------------------------------------------------------------- this loader


def verify_option(verify: str | None) -> dict:
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


def ours(
    dataset: Path,
    mode: str,
    batch_size: int,
    workers: int,
    *,
    verify: str | None = None,
    decode_threads: int | None = None,
    shm_budget_bytes: int | None = None,
) -> Passes:
    """This loader (`build_loader`): epoch 0, then epoch 1 on the same persistent workers."""
    options: dict[str, Any] = {"camera_resize": resize_of(mode), **verify_option(verify)}
    if decode_threads is not None:
        options["decode_threads"] = decode_threads
    if shm_budget_bytes is not None:
        options["shm_budget_bytes"] = shm_budget_bytes

    def passes(extras: dict) -> Generator[Iterable, None, None]:
        loader = build_loader(
            str(dataset),
            rank=0,
            world_size=1,
            batch_size=batch_size,
            num_workers=workers,
            seed=0,
            decode=mode.split("@")[0],
            config=LoaderConfig(**options),
        )
        try:
            extras["prefetch_depth"] = loader.config.prefetch_depth
            yield loader
            loader.set_epoch(1)  # a fresh epoch: a decoding row stopped inside epoch 0
            yield loader
        finally:
            extras["loader_stats"] = dataclasses.asdict(loader.stats)
            loader.close()

    return passes


# ---------------------------------------------------------------- peers


def webdataset_peer(dataset: Path, mode: str, batch_size: int, workers: int) -> Passes:
    """WebDataset(shardshuffle).shuffle(1000).map(decode).batched(B) in a WebLoader: its docs' setup."""

    def passes(extras: dict) -> Generator[Iterable, None, None]:
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
            .batched(batch_size, collation_fn=list_collate)
        )
        # batch_size=None + the identity collate: without it torch would convert every array to
        # a tensor and pass each through its own file descriptor (default_convert)
        loader = wds.WebLoader(
            pipeline,
            batch_size=None,
            num_workers=workers,
            collate_fn=list_collate,
            persistent_workers=workers > 0,
        )
        inner = next(
            (s for s in getattr(loader, "pipeline", []) if isinstance(s, DataLoader)), None
        )
        try:
            yield loader
            yield loader
        finally:
            if inner is not None:
                _stop_workers(inner)

    return passes


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


def unpack(dataset: Path) -> tuple[Path, dict[str, list[str]]]:
    """Write (once) every member as its own file next to the dataset; return (folder, members)."""
    folder = dataset.parent / "unpacked"
    index = index_rows(dataset)
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


def files_peer(dataset: Path, mode: str, batch_size: int, workers: int) -> Passes:
    """One file per member, map-style Dataset, shuffled DataLoader with persistent workers."""

    def passes(extras: dict) -> Generator[Iterable, None, None]:
        folder, members = unpack(dataset)
        loader = DataLoader(
            _MemberFiles(folder, members, mode),
            batch_size=batch_size,
            shuffle=True,
            num_workers=workers,
            collate_fn=list_collate,
            persistent_workers=workers > 0,
        )
        yield from _persistent(loader)

    return passes


def write_mds(dataset: Path) -> Path:
    """Write (once) the dataset's samples as MDS shards of the same size; return the folder."""
    from streaming import MDSWriter

    out = dataset.parent / "mds"
    if (out / "index.json").exists():
        return out
    index = index_rows(dataset)
    columns = {"__key__": "str", **{m["name"]: "bytes" for m in index[0]["members"]}}
    shard_bytes = int(json.loads((dataset / "manifest.json").read_text())["shards"][0]["bytes"])
    with MDSWriter(out=str(out), columns=columns, size_limit=shard_bytes) as writer:
        for row in index:
            writer.write(read_indexed_sample(dataset, row))
    return out


def mds_peer(dataset: Path, mode: str, batch_size: int, workers: int) -> Passes:
    """StreamingDataset(local, shuffle, batch_size) in a DataLoader(batch_size), persistent workers."""

    def passes(extras: dict) -> Generator[Iterable, None, None]:
        from streaming import StreamingDataset
        from streaming.base.util import clean_stale_shared_memory

        decoder = SampleDecoder(mode)

        class Decoded(StreamingDataset):
            def get_item(self, idx: int) -> dict:
                return decoder(super().get_item(idx))

        local = write_mds(dataset)
        clean_stale_shared_memory()
        ds = Decoded(local=str(local), batch_size=batch_size, shuffle=True, shuffle_seed=0)
        loader: DataLoader = DataLoader(
            ds,
            batch_size=batch_size,
            num_workers=workers,
            collate_fn=list_collate,
            persistent_workers=workers > 0,
        )
        yield from _persistent(loader)

    return passes


class _SampleReader:
    """Index position -> {"__key__", member: memoryview}: one read of the sample's byte range."""

    def __init__(self, dataset: Path) -> None:
        self.dataset, self.rows = dataset, index_rows(dataset)

    def __call__(self, i: int) -> dict:
        row = self.rows[i]
        lo = min(m["offset"] for m in row["members"])
        hi = max(m["offset"] + m["size"] for m in row["members"])
        with open(self.dataset / row["shard"], "rb", buffering=0) as f:
            f.seek(lo)
            data = memoryview(f.read(hi - lo))
        sample: dict[str, Any] = {"__key__": row["key"]}
        for m in row["members"]:
            sample[m["name"]] = data[m["offset"] - lo : m["offset"] - lo + m["size"]]
        return sample


def spdl_peer(dataset: Path, mode: str, batch_size: int, workers: int, limit: int | None) -> Passes:
    """SPDL's thread pipeline (`spdl.pipeline.PipelineBuilder`, the setup its docs show).

    Source: `embed_shuffle(DistributedRandomSampler(N))`, a new order each epoch (continuous);
    stages: read the sample's byte range from its tar (the index's offsets, `workers` reads at
    once), decode (`workers` at once), `aggregate(B)`, the identity collate, a sink of 3
    batches; `build(num_threads=workers)`. No processes, so no hand-off. With `limit` (a
    decoding row) the passes run on across epoch boundaries; without it, a pass is an epoch.
    """

    def passes(extras: dict) -> Generator[Iterable, None, None]:
        from spdl.pipeline import PipelineBuilder
        from spdl.source import DistributedRandomSampler
        from spdl.source.utils import embed_shuffle

        read = _SampleReader(dataset)
        source = embed_shuffle(DistributedRandomSampler(len(read.rows), rank=0, world_size=1))
        pipeline = (
            PipelineBuilder()
            .add_source(source, continuous=True)
            .pipe(read, concurrency=workers)
            .pipe(SampleDecoder(mode), concurrency=workers)
            .aggregate(batch_size)
            .pipe(list_collate)
            .add_sink(3)
            .build(num_threads=workers)
        )

        def endless() -> Iterator[list]:
            while True:
                yield from pipeline.get_iterator(timeout=_SPDL_TIMEOUT_S)

        with pipeline.auto_stop(timeout=_SPDL_TIMEOUT_S):
            batches = endless() if limit is not None else None
            for _ in range(2):
                yield batches or pipeline.get_iterator(timeout=_SPDL_TIMEOUT_S)

    return passes
