"""A deterministic discrete-event model of a training fleet reading one dataset from an object store.

N nodes x R ranks x W loader workers read a dataset's shards through one node cache per node;
the model runs the loader's own planning code (units, epoch order, partition, read order,
fetch-ahead, LRU eviction, retry schedule) and simulates only time: a heap of events on a
simulated clock. Each key prefix admits `prefix_limit_gets` GETs per second (S3: at least 5,500
GET/HEAD per second per prefix, AWS "Best practices design patterns: optimizing Amazon S3
performance"); the excess gets 503 SlowDown and goes through the real retry layers. What is
modelled and how: platform_lib/loading/README.md, "The fleet model".
"""

from __future__ import annotations

import functools
import gc
import heapq
import itertools
import random
from collections import Counter, OrderedDict, defaultdict, deque
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from platform_lib.loading.cache import evict_lru
from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.dataset import read_order, shards_to_prefetch
from platform_lib.loading.mixing import EpochOrders
from platform_lib.loading.partition import plan_epoch, positions_for_batch, steps_for_worker
from platform_lib.loading.windows import build_units
from platform_lib.shards.view import DatasetView
from platform_lib.storage import S3_BOTOCORE_RETRIES, S3FS_TRIES, retry_delay_s

__all__ = [
    "S3_PREFIX_GETS_PER_S",
    "FleetDataset",
    "FleetReport",
    "FleetSpec",
    "dataset_from_view",
    "simulate_fleet",
    "synthetic_dataset",
]

#: GET requests per second one S3 key prefix serves before answering 503 SlowDown (AWS docs).
S3_PREFIX_GETS_PER_S = 5500.0
#: Shard files a loader worker keeps open (`files.ShardFiles` default).
_OPEN_SHARDS = 8
#: botocore's legacy-mode total attempts when no `retries` config is given (`_retry.json`).
_BOTOCORE_DEFAULT_ATTEMPTS = 5


@dataclass(frozen=True, kw_only=True)
class FleetDataset:
    """What the model needs of a dataset: its units, index rows and shards (one source)."""

    units: np.ndarray
    """(U, k) int64 index rows of each unit (k frames per unit)"""
    row_shard: np.ndarray
    """(rows,) int64 shard id of each index row"""
    row_offset: np.ndarray
    """(rows,) int64 byte offset of each row in its shard"""
    row_bytes: np.ndarray
    """(rows,) int64 bytes of each row's sample"""
    shard_bytes: np.ndarray
    """(S,) int64 size of each shard, in bytes"""
    shard_prefix: np.ndarray
    """(S,) int64 position in `prefixes` of each shard's key prefix"""
    prefixes: tuple[str, ...]
    """key prefixes (object-store folders) holding shards, e.g. ("shards/",)"""


def _spread(num_shards: int, prefixes: int) -> tuple[np.ndarray, tuple[str, ...]]:
    """Shard i on prefix i mod P: `shards/` for P = 1, else `shards/p00/` ... (as `data build`)."""
    if prefixes == 1:
        return np.zeros(num_shards, dtype=np.int64), ("shards/",)
    codes = np.arange(num_shards, dtype=np.int64) % prefixes
    return codes, tuple(f"shards/p{p:02d}/" for p in range(prefixes))


def synthetic_dataset(
    *, num_samples: int, sample_bytes: int, shard_bytes: int, prefixes: int = 1
) -> FleetDataset:
    """Return a hypothetical dataset: `num_samples` samples of `sample_bytes`, shards of about `shard_bytes`.

    Shards hold `max(1, shard_bytes // sample_bytes)` samples (the last one fewer), spread
    round-robin over `prefixes` key prefixes.

    Raises:
        ValueError: a count or size below 1.
    """
    if min(num_samples, sample_bytes, shard_bytes, prefixes) < 1:
        raise ValueError("samples, sample size, shard size and prefixes must be >= 1")
    per_shard = max(1, shard_bytes // sample_bytes)
    rows = np.arange(num_samples, dtype=np.int64)
    row_shard = rows // per_shard
    num_shards = int(row_shard[-1]) + 1
    counts = np.bincount(row_shard, minlength=num_shards)
    codes, names = _spread(num_shards, prefixes)
    return FleetDataset(
        units=rows[:, None],
        row_shard=row_shard,
        row_offset=(rows % per_shard) * sample_bytes,
        row_bytes=np.full(num_samples, sample_bytes, dtype=np.int64),
        shard_bytes=counts * sample_bytes,
        shard_prefix=codes,
        prefixes=names,
    )


def dataset_from_view(
    view: DatasetView, config: LoaderConfig, *, prefixes: int | None = None
) -> FleetDataset:
    """Return the model's dataset for a loaded view: its units (as `config` forms them) and shards.

    Args:
        view: the dataset view (`shards.view.load_view`), one split or all rows.
        config: loader options (window_frames, window_stride).
        prefixes: None keeps each shard's own prefix (the folder of its location); a number
            models the same shards spread over that many prefixes (what `data build
            --key-prefixes` would lay out).

    Raises:
        ValueError: no unit can be formed (see `build_units`).
    """
    units = build_units(
        view, window_frames=config.window_frames, window_stride=config.window_stride
    )
    if prefixes is None:
        folders = [
            f.rsplit("/", 1)[0].removeprefix(view.root).lstrip("/") + "/" for f in view.shard_files
        ]
        names = tuple(dict.fromkeys(folders))
        codes = np.array([names.index(f) for f in folders], dtype=np.int64)
    else:
        codes, names = _spread(len(view.shard_paths), prefixes)
    return FleetDataset(
        units=units,
        row_shard=np.asarray(view.shard_id, dtype=np.int64),
        row_offset=np.asarray(view.sample_offset, dtype=np.int64),
        row_bytes=np.asarray(view.sample_size, dtype=np.int64),
        shard_bytes=np.asarray(view.shard_bytes, dtype=np.int64),
        shard_prefix=codes,
        prefixes=names,
    )


class FleetSpec(BaseModel):
    """The fleet, its pace and the object store's limits (what `simulate_fleet` models)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    nodes: int = Field(ge=1)
    """nodes, each with one node cache shared by its ranks"""
    ranks_per_node: int = Field(ge=1)
    """training ranks (GPUs) per node"""
    workers: int = Field(default=4, ge=1)
    """loader worker processes per rank"""
    batch_size: int = Field(default=4, ge=1)
    """samples per batch per rank"""
    epochs: int = Field(default=1, ge=1)
    """epochs the training loop consumes"""
    max_steps: int | None = Field(default=None, ge=1)
    """batches per rank simulated in each epoch; None: the whole epoch"""
    seed: int = Field(default=0, ge=0)
    """loader seed (epoch order); also seeds botocore's random retry delays"""
    shuffle: bool = True
    """False keeps the natural (shard, offset) order"""
    node_bandwidth: float = Field(default=25e9 / 8, gt=0)
    """download bandwidth of one node from the object store, in bytes/s (default 25 Gbit/s)"""
    sample_time_s: float = Field(default=0.05, ge=0)
    """training time per sample per rank, in s (a batch takes batch_size x this)"""
    request_latency_s: float = Field(default=0.03, ge=0)
    """time from a GET to its first byte (or its 503 answer), in s"""
    prefix_gets_per_s: float = Field(default=S3_PREFIX_GETS_PER_S, gt=0)
    """GETs per second one key prefix serves before answering 503 SlowDown"""
    epoch_ahead: bool = True
    """model the workers starting the epoch after the last one (the real loader does, until
    it is closed): they make `prefetch_depth` batches each"""
    loader: LoaderConfig = Field(default_factory=LoaderConfig)
    """loader options: prefetch_depth, shards_ahead, shuffle_buffer, pad_policy,
    cache_limit_bytes, max_retries, retry_backoff_s, storage_options"""


@dataclass(kw_only=True)
class FleetReport:
    """What the object store and the fleet saw (`simulate_fleet`)."""

    spec: FleetSpec
    steps: int
    """batches per rank per epoch simulated"""
    gets: int
    """GET requests of shards (each attempt counted)"""
    throttled: int
    """GETs answered 503 SlowDown"""
    exhausted: int
    """downloads whose retries all failed (the real loader raises ObjectStoreUnreachableError;
    the model starts them again to keep going)"""
    gets_per_shard: np.ndarray
    """(S,) int64 GETs of each shard"""
    gets_per_second: dict[str, np.ndarray]
    """per key prefix, GETs in each 1-s bucket of simulated time"""
    bytes_per_node: np.ndarray
    """(N,) int64 bytes each node downloaded"""
    opens: int
    """node-cache lookups (downloads + hits), all nodes"""
    hits: int
    """lookups served by the node cache"""
    evictions: int
    """shards evicted from node caches, all nodes"""
    first_batch_s: np.ndarray
    """(N * R,) time each rank's training loop got its first batch, in s"""
    end_s: float
    """simulated time when the last rank consumed its last batch, in s"""
    consumed_bytes: int
    """sample bytes the ranks consumed"""

    @property
    def hit_ratio(self) -> float:
        """Fraction of node-cache lookups served without a download."""
        return self.hits / self.opens if self.opens else 0.0

    def busiest_prefix(self) -> tuple[str, float, float]:
        """Return (prefix, peak GET/s, p99 GET/s over 1-s buckets) of the prefix with the highest peak."""
        best = ("", 0.0, 0.0)
        for prefix, series in self.gets_per_second.items():
            if len(series) and float(series.max()) > best[1]:
                best = (prefix, float(series.max()), float(np.percentile(series, 99)))
        return best


@dataclass(slots=True, eq=False)
class _Signal:
    """Something processes wait for; fired once."""

    fired: bool = False
    waiters: list[Generator] = field(default_factory=list)


@dataclass(slots=True, eq=False)
class _Download:
    """A shard's download (one GET of the whole object through the three retry layers).

    `_open` yields it; its GETs then run as plain events (`_get`, `_retry`), not through the
    waiting process's generators (a 503 storm is most of a throttled model's events). A GET
    past its prefix's rate is answered 503 SlowDown after `request_latency_s`; then botocore,
    s3fs and `storage.call_with_retries` wait and try again, nested in that order (module
    docstring). The process is resumed when the transfer ends (sent None) or when every
    attempt failed (False), at the same instant and in the same event order as if it ran
    them itself. `attempt` counts GETs made (0-based) across the nested retry layers:
    storage attempt `attempt // (tries * boto) + 1`, s3fs try `attempt // boto % tries`,
    botocore attempt `attempt % boto + 1` (`_Simulation._get`).
    """

    node: _Node
    shard: int
    attempt: int = 0
    process: Generator = field(init=False)
    """the process that waits for it (set when it yields the download, before the first GET)"""


@dataclass(eq=False)
class _Node:
    cached: OrderedDict = field(default_factory=OrderedDict)  # shard -> (last use s, bytes)
    total: int = 0
    inflight: dict = field(default_factory=dict)  # shard -> _Signal of its download
    served: float = 0.0  # processor sharing: bytes served to each running download so far
    clock: float = 0.0
    running: int = 0
    transfers: list = field(default_factory=list)  # heap of (served at finish, seq, _Signal)
    version: int = 0
    downloaded: int = 0


@dataclass(eq=False)
class _Rank:
    index: int
    node: _Node
    consumed: int = 0  # batches the training loop took, all epochs
    ready: defaultdict = field(default_factory=lambda: defaultdict(_Signal))  # (epoch, step)
    made: Counter = field(default_factory=Counter)  # epoch -> batches made
    epoch_made: defaultdict = field(default_factory=lambda: defaultdict(_Signal))  # all made
    progress: _Signal = field(default_factory=_Signal)
    first_batch: float = float("nan")


class _Simulation:
    def __init__(self, spec: FleetSpec, data: FleetDataset) -> None:
        self.spec, self.data, cfg = spec, data, spec.loader
        world = spec.nodes * spec.ranks_per_node
        self.plan = plan_epoch(
            len(data.units), batch_size=spec.batch_size, world_size=world, pad_policy=cfg.pad_policy
        )
        self.steps = min(self.plan.steps, spec.max_steps or self.plan.steps)
        # every epoch's order kept: ranks run epochs apart
        self.epoch_order = functools.cache(
            EpochOrders(
                unit_shards=[data.row_shard[data.units[:, 0]]],
                weights=[1.0],
                seed=spec.seed,
                shuffle=spec.shuffle,
                shuffle_buffer=cfg.shuffle_buffer,
                total=len(data.units),
            )
        )
        self.shard_bytes = data.shard_bytes.tolist()
        self.shard_prefix = data.shard_prefix.tolist()
        self.row_shard = data.row_shard.tolist()
        self.unit_bytes = data.row_bytes[data.units].sum(axis=1)
        self.rng = random.Random(spec.seed)
        self.now, self._seq = 0.0, itertools.count()
        self._heap: list[tuple[float, int, Any, tuple]] = []
        self.nodes = [_Node() for _ in range(spec.nodes)]
        self.ranks = [_Rank(r, self.nodes[r // spec.ranks_per_node]) for r in range(world)]
        rate = spec.prefix_gets_per_s
        self.tokens = [rate] * len(data.prefixes)
        self.token_clock = [0.0] * len(data.prefixes)
        self.gets_per_shard = [0] * len(self.shard_bytes)
        self.gets_per_second: list[Counter[int]] = [Counter() for _ in data.prefixes]
        self.gets = self.throttled = self.exhausted = self.opens = self.hits = 0
        self.evictions = self.consumed_bytes = 0
        self.end = 0.0
        self.attempts = _retry_layers(cfg)
        self.latency = float(spec.request_latency_s)

    # -- the event loop --------------------------------------------------------------------
    def at(self, when: float, fn: Any, *args: Any) -> None:
        heapq.heappush(self._heap, (when, next(self._seq), fn, args))

    def run(self) -> None:
        heap, pop = self._heap, heapq.heappop
        while heap:
            self.now, _, fn, args = pop(heap)
            fn(*args)

    def resume(self, process: Generator, value: Any = None) -> None:
        """Run `process` (sent `value`) up to its next wait: a delay, a signal or a download."""
        while True:
            try:
                command = process.send(value)
            except StopIteration:
                return
            value = None
            if command.__class__ is float:  # `at`, inlined: most events are these waits
                heapq.heappush(
                    self._heap, (self.now + command, next(self._seq), self.resume, (process,))
                )
                return
            if command.__class__ is _Download:  # its GETs and retries run without the process
                command.process = process
                self._get(command)
                return
            if not command.fired:
                command.waiters.append(process)
                return

    def fire(self, signal: _Signal) -> None:
        signal.fired = True
        for process in signal.waiters:
            self.at(self.now, self.resume, process)
        signal.waiters = []

    # -- node download bandwidth (processor sharing) --------------------------------------
    def _advance(self, node: _Node) -> None:
        if node.running:
            node.served += (self.now - node.clock) * self.spec.node_bandwidth / node.running
        node.clock = self.now

    def _reschedule(self, node: _Node) -> None:
        node.version += 1
        if node.transfers:
            left = node.transfers[0][0] - node.served
            wait = max(left, 0.0) * node.running / self.spec.node_bandwidth
            self.at(self.now + wait, self._transfer_done, node, node.version)

    def _transfer(self, node: _Node, nbytes: int, done: _Signal) -> None:
        """Start a download of `nbytes` on `node`; `done` fires when its last byte arrives."""
        self._advance(node)
        heapq.heappush(node.transfers, (node.served + nbytes, next(self._seq), done))
        node.running += 1
        self._reschedule(node)

    def _transfer_done(self, node: _Node, version: int) -> None:
        if version != node.version:
            return
        self._advance(node)
        while node.transfers and node.transfers[0][0] <= node.served + 1.0:
            self.fire(heapq.heappop(node.transfers)[2])
            node.running -= 1
        self._reschedule(node)

    # -- the object store ------------------------------------------------------------------
    def _get(self, download: _Download) -> None:
        """One GET of `download` now: start its transfer, or schedule the retry after a 503."""
        tries, boto, backoff = self.attempts
        shard, n = download.shard, download.attempt
        prefix, rate, latency = self.shard_prefix[shard], self.spec.prefix_gets_per_s, self.latency
        now = self.now
        self.gets += 1
        self.gets_per_shard[shard] += 1
        self.gets_per_second[prefix][int(now)] += 1
        bucket, clock = self.tokens, self.token_clock
        tokens = min(bucket[prefix] + (now - clock[prefix]) * rate, rate)  # one second's GETs
        clock[prefix] = now
        if tokens >= 1.0:
            bucket[prefix] = tokens - 1.0
            done = _Signal()
            self.at(now + latency, self._transfer, download.node, self.shard_bytes[shard], done)
            done.waiters.append(download.process)  # resumed (sent None) when the bytes are in
            return
        bucket[prefix] = tokens
        self.throttled += 1
        attempt, i, k = n // (tries * boto) + 1, n // boto % tries, n % boto + 1
        wait = latency  # the 503 answer, then the wait before the next attempt
        if k < boto:
            wait += self.rng.random() * 2.0 ** (k - 1)
        else:
            wait += min(1.7**i * 0.1, 15.0)
            if i == tries - 1 and attempt <= self.spec.loader.max_retries:
                wait += retry_delay_s(attempt, backoff)
        download.attempt = n + 1
        self.at(now + wait, self._retry, download)

    def _retry(self, download: _Download) -> None:
        """After a 503's wait: the next GET, or (every attempt made) the process learns it failed."""
        tries, boto, _ = self.attempts
        if download.attempt < (self.spec.loader.max_retries + 1) * tries * boto:
            self._get(download)
        else:
            self.resume(download.process, False)

    # -- the node cache --------------------------------------------------------------------
    def _open(self, node: _Node, shard: int) -> Generator[Any, None, None]:
        """`ShardCache.open`: a hit, a wait for another process's download, or a download.

        Callers try `_hit` first: most opens are hits and need no generator.
        """
        while True:
            if self._hit(node, shard):
                return
            pending = node.inflight.get(shard)
            if pending is not None:  # the shard's download lock is held: wait, then look again
                yield pending
                continue
            done = node.inflight[shard] = _Signal()
            ok = (yield _Download(node, shard)) is not False
            del node.inflight[shard]
            self.fire(done)
            if ok:
                size = self.shard_bytes[shard]
                node.cached[shard] = (self.now, size)
                node.total += size
                node.downloaded += size
                self.opens += 1
                self._touch(node, shard)
                return
            self.exhausted += 1

    def _hit(self, node: _Node, shard: int) -> bool:
        """A node-cache hit (counted and touched), or False: `_open` must wait or download."""
        if shard not in node.cached:
            return False
        self.hits += 1
        self.opens += 1
        self._touch(node, shard)
        return True

    def _touch(self, node: _Node, shard: int) -> None:
        node.cached[shard] = (self.now, node.cached[shard][1])
        node.cached.move_to_end(shard)
        if node.total <= self.spec.loader.cache_limit_bytes:
            return
        removed = evict_lru(
            ((used, size, s) for s, (used, size) in node.cached.items()),
            limit_bytes=self.spec.loader.cache_limit_bytes,
            keep=shard,
            remove=lambda s: True,  # model opens take no time: no shard is locked
        )
        for s in removed:
            node.total -= node.cached.pop(s)[1]
        self.evictions += len(removed)

    # -- ranks and workers -----------------------------------------------------------------
    def _batch(self, rank: _Rank, epoch: int, step: int) -> tuple[np.ndarray, np.ndarray]:
        positions, _ = positions_for_batch(
            self.plan, step=step, rank=rank.index, batch_size=self.spec.batch_size
        )
        source, unit = self.epoch_order(epoch)
        return source[positions], unit[positions]

    def _may_make(self, rank: _Rank, epoch: int, step: int) -> bool:
        """The DataLoader's prefetch window: batches made ahead of the training loop."""
        depth = self.spec.loader.prefetch_depth
        began = rank.consumed - epoch * self.steps  # of this epoch, by the training loop
        window = depth * self.spec.workers + (began + depth if began >= 0 else 0)
        return step < window

    def _worker(self, rank: _Rank, worker: int) -> Generator[Any, None, None]:
        spec, data, cfg = self.spec, self.data, self.spec.loader
        units, row_shard = [data.units], [data.row_shard]
        opened: OrderedDict[int, None] = OrderedDict()  # ShardFiles: per iteration
        for epoch in range(spec.epochs + int(spec.epoch_ahead)):
            if epoch:
                yield rank.epoch_made[epoch - 1]
            ahead = epoch == spec.epochs  # nobody consumes it: the DataLoader's first tasks only
            opened.clear()
            queue: deque[int] = deque()
            helper = {"idle": _Signal(fired=True)}  # fired while no fetch-ahead runs
            steps = steps_for_worker(
                self.plan, start_step=0, worker_id=worker, num_workers=spec.workers
            )
            for made, step in enumerate(s for s in steps if s < self.steps):
                if ahead and made >= cfg.prefetch_depth:
                    return  # waits for a task that never comes; its fetch-ahead runs on
                while not ahead and not self._may_make(rank, epoch, step):
                    yield rank.progress
                nxt = step + spec.workers
                if cfg.shards_ahead and nxt < self.plan.steps:
                    sources, unit_ids = self._batch(rank, epoch, nxt)
                    for _, shard in shards_to_prefetch(
                        row_shard,
                        units,
                        sources,
                        unit_ids,
                        skip=lambda _, shard: shard in opened,  # as `ShardFiles.is_open`
                        shards_ahead=cfg.shards_ahead,
                    ):
                        queue.append(shard)
                    if queue and helper["idle"].fired:
                        self.resume(self._fetch_ahead(rank.node, queue, helper))
                sources, unit_ids = self._batch(rank, epoch, step)
                order = read_order(row_shard, [data.row_offset], units, sources, unit_ids)
                for unit_rows in units[0][unit_ids[order]].tolist():
                    for row in unit_rows:
                        shard = self.row_shard[row]
                        if shard in opened:
                            opened.move_to_end(shard)
                            continue
                        if not self._hit(rank.node, shard):
                            yield from self._open(rank.node, shard)
                        opened[shard] = None
                        if len(opened) > _OPEN_SHARDS:
                            opened.popitem(last=False)
                if not ahead:
                    self.consumed_bytes += int(self.unit_bytes[unit_ids].sum())
                self._made(rank, epoch, step)
            queue.clear()  # the fetch-ahead pool's shutdown: queued fetches are cancelled ...
            yield helper["idle"]  # ... the running one is waited for

    def _fetch_ahead(
        self, node: _Node, queue: deque, helper: dict[str, _Signal]
    ) -> Generator[Any, None, None]:
        """A worker's fetch-ahead thread: opens queued shards one at a time (errors ignored)."""
        helper["idle"] = _Signal()
        while queue:
            shard = queue.popleft()
            if not self._hit(node, shard):
                yield from self._open(node, shard)
        self.fire(helper["idle"])

    def _made(self, rank: _Rank, epoch: int, step: int) -> None:
        self.fire(rank.ready[epoch, step])
        rank.made[epoch] += 1
        if rank.made[epoch] == self.steps:
            self.fire(rank.epoch_made[epoch])

    def _training_loop(self, rank: _Rank) -> Generator[Any, None, None]:
        step_time = float(self.spec.batch_size * self.spec.sample_time_s)
        for epoch in range(self.spec.epochs):
            for step in range(self.steps):
                yield rank.ready[epoch, step]
                del rank.ready[epoch, step]
                if rank.consumed == 0:
                    rank.first_batch = self.now
                rank.consumed += 1
                progress, rank.progress = rank.progress, _Signal()
                self.fire(progress)
                yield step_time
        self.end = max(self.end, self.now)

    def report(self) -> FleetReport:
        seconds = max((max(c) for c in self.gets_per_second if c), default=0) + 1
        series = {name: np.zeros(seconds, dtype=np.int64) for name in self.data.prefixes}
        for per_second, counts in zip(series.values(), self.gets_per_second, strict=True):
            per_second[list(counts)] = list(counts.values())
        return FleetReport(
            spec=self.spec,
            steps=self.steps,
            gets=self.gets,
            throttled=self.throttled,
            exhausted=self.exhausted,
            gets_per_shard=np.array(self.gets_per_shard, dtype=np.int64),
            gets_per_second=series,
            bytes_per_node=np.array([n.downloaded for n in self.nodes], dtype=np.int64),
            opens=self.opens,
            hits=self.hits,
            evictions=self.evictions,
            first_batch_s=np.array([r.first_batch for r in self.ranks]),
            end_s=self.end,
            consumed_bytes=self.consumed_bytes,
        )


def _retry_layers(cfg: LoaderConfig) -> tuple[int, int, float]:
    """Return (s3fs tries, botocore attempts per try, storage backoff in s) for `cfg.storage_options`.

    The options are those `storage.resolve_fs` builds an s3 filesystem from: `retries` (s3fs),
    `config_kwargs.retries` (botocore; `max_attempts` counts retries, `total_max_attempts`
    attempts), else resolve_fs's defaults (`S3FS_TRIES`, `S3_BOTOCORE_RETRIES`).
    """
    options = cfg.storage_options
    tries = int(options.get("retries", S3FS_TRIES))
    if "config_kwargs" in options:
        retries = options["config_kwargs"].get("retries") or {}
    else:
        retries = {"max_attempts": S3_BOTOCORE_RETRIES}
    if "total_max_attempts" in retries:
        boto = int(retries["total_max_attempts"])
    elif "max_attempts" in retries:
        boto = int(retries["max_attempts"]) + 1
    else:
        boto = _BOTOCORE_DEFAULT_ATTEMPTS
    return max(tries, 1), max(boto, 1), cfg.retry_backoff_s


def simulate_fleet(spec: FleetSpec, data: FleetDataset) -> FleetReport:
    """Run the model of `spec` reading `data`; deterministic: the same inputs give the same report.

    Raises:
        ValueError: the layout cannot run (more ranks than units, or fewer units than one
            global batch with pad_policy "drop"); the message names the numbers.
    """
    world = spec.nodes * spec.ranks_per_node
    if world > len(data.units):
        raise ValueError(
            f"{world} ranks ({spec.nodes} nodes x {spec.ranks_per_node} ranks) but only "
            f"{len(data.units)} samples: every rank needs at least one"
        )
    collecting = gc.isenabled()
    gc.disable()  # millions of short-lived events and no garbage cycles until the end
    try:
        sim = _Simulation(spec, data)
        for rank in sim.ranks:
            sim.resume(sim._training_loop(rank))
            for worker in range(spec.workers):
                sim.resume(sim._worker(rank, worker))
        sim.run()
        return sim.report()
    finally:
        if collecting:
            gc.enable()
