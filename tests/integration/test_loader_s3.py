"""The loader over an S3-compatible server on 127.0.0.1 (moto, started here): object-store
requests per epoch, node cache sharing, LRU eviction, cache limits, full disk, outages."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import boto3
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))
from loading_helpers import write_test_dataset  # noqa: E402

from platform_lib.loading.config import LoaderConfig  # noqa: E402
from platform_lib.loading.errors import CacheFullError, ObjectStoreUnreachableError  # noqa: E402
from platform_lib.loading.loader import build_loader  # noqa: E402

pytestmark = pytest.mark.timeout(180)
BUCKET = "drivetrain-test"


class _CountingApp:
    """WSGI middleware counting every request the moto app serves, by (method, object key)."""

    def __init__(self, app) -> None:
        self.app, self.requests, self.lock = app, Counter(), threading.Lock()

    def __call__(self, environ, start_response):
        key = environ.get("PATH_INFO", "").removeprefix(f"/{BUCKET}/")
        with self.lock:
            self.requests[(environ["REQUEST_METHOD"], key)] += 1
        return self.app(environ, start_response)

    def count(self, method: str, suffix: str) -> int:
        with self.lock:
            return sum(
                n for (m, k), n in self.requests.items() if m == method and k.endswith(suffix)
            )


def _start_server():
    """Serve moto's S3 on 127.0.0.1 (free port) behind the counting middleware, in a thread."""
    from moto.server import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    for name, value in (
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ):
        os.environ.setdefault(name, value)
    app = _CountingApp(DomainDispatcherApplication(create_backend_app))
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}", app, server


@pytest.fixture(scope="module")
def s3_server():
    endpoint, app, server = _start_server()
    yield endpoint, app, server
    server.shutdown()


@pytest.fixture(scope="module")
def remote(s3_server, tmp_path_factory):
    endpoint, app, _ = s3_server
    local = write_test_dataset(
        tmp_path_factory.mktemp("s3src") / "data", {"loga": 10, "logb": 9, "logc": 9}
    )
    client = boto3.client("s3", endpoint_url=endpoint)
    client.create_bucket(Bucket=BUCKET)
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        client.upload_file(str(path), BUCKET, f"data/{path.relative_to(local)}")
    shards = sorted(p.name for p in (local / "shards").glob("*.tar"))
    sizes = {p.name: p.stat().st_size for p in (local / "shards").glob("*.tar")}
    return f"s3://{BUCKET}/data", endpoint, app, shards, sizes, client


def _config(endpoint: str, cache_dir: Path, **kwargs) -> LoaderConfig:
    options = {"endpoint_url": endpoint, "key": "testing", "secret": "testing"}
    return LoaderConfig(cache_dir=str(cache_dir), storage_options=options, **kwargs)


def _run_ranks_concurrently(url, cfg, *, world=2, workers=2) -> list[list[str]]:
    loaders = [
        build_loader(
            url, rank=r, world_size=world, batch_size=3, num_workers=workers, seed=1, config=cfg
        )
        for r in range(world)
    ]
    keys: list[list[str]] = [[] for _ in range(world)]
    threads = [
        threading.Thread(
            target=lambda r=r: keys[r].extend(k for b in loaders[r] for k in b["__key__"])
        )
        for r in range(world)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return keys, loaders


def test_one_get_per_shard_per_node_and_none_once_cached(remote, tmp_path):
    url, endpoint, app, shards, _, _ = remote
    app.requests.clear()
    cfg = _config(endpoint, tmp_path / "cache")
    keys, loaders = _run_ranks_concurrently(url, cfg)  # 2 ranks x 2 workers share one node cache
    assert len(set(keys[0]) | set(keys[1])) == 28
    shard_gets = app.count("GET", ".tar")
    assert shard_gets == len(shards)  # each shard fetched exactly once for the whole node
    # Never counted twice. A rank whose epoch ends first starts its workers on the next epoch
    # at once (`StreamingLoader`); if they fetch a shard the other rank has not reached yet,
    # that download is counted with next-epoch batches this test never receives.
    assert 0 < sum(lo.stats.downloads for lo in loaders) <= len(shards)
    assert 0 < sum(lo.stats.requests for lo in loaders) <= len(shards)
    assert app.count("GET", "manifest.json") == 2 and app.count("GET", "index.parquet") == 2
    # Never a request per sample or member: the whole epoch is a few requests per shard.
    assert sum(app.requests.values()) <= 2 * len(shards) + 8
    app.requests.clear()
    keys, loaders = _run_ranks_concurrently(url, cfg)  # epoch on a warm cache
    assert app.count("GET", ".tar") == 0 and sum(lo.stats.cache_hits for lo in loaders) > 0


def test_lru_eviction_keeps_the_cache_under_its_limit_and_never_deletes_the_source(
    remote, tmp_path
):
    url, endpoint, app, shards, sizes, client = remote
    limit = 3 * max(sizes.values())
    cfg = _config(endpoint, tmp_path / "cache", cache_limit_bytes=limit, shuffle_buffer=4)
    app.requests.clear()
    # In-process reading: persistent workers start the next epoch as soon as the last batch is
    # received (`StreamingLoader`), which would touch, and evict, shards while this test looks.
    loader = build_loader(
        url, rank=0, world_size=1, batch_size=4, num_workers=0, seed=2, config=cfg
    )
    keys = [k for b in loader for k in b["__key__"]]
    assert len(set(keys)) == 28
    cached = {}
    for path in (tmp_path / "cache").rglob("*.tar"):
        with contextlib.suppress(FileNotFoundError):  # evicted while listing
            cached[path.name] = path.stat().st_size
    assert sum(cached.values()) <= limit and len(cached) <= 3
    assert loader.stats.evictions >= len(shards) - 3
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix="data/shards/")["Contents"]
    assert len(listed) == len(shards)  # the source is intact
    # The most recently used shard is kept: the last sample's. The last batch's samples can span
    # more shards than the cache holds (the shuffle buffer mixes shards), so only the last
    # sample's shard is certain to be cached.
    view = loader.views[0]
    assert view.shard_path(view.row_of(keys[-1])) in {f"shards/{name}" for name in cached}


def test_cache_limit_below_one_shard_is_refused(remote, tmp_path):
    url, endpoint, _, _, sizes, _ = remote
    with pytest.raises(CacheFullError, match="cache_limit_bytes=100 is below the largest shard"):
        build_loader(
            url,
            rank=0,
            world_size=1,
            batch_size=4,
            num_workers=0,
            seed=0,
            config=_config(endpoint, tmp_path / "c", cache_limit_bytes=100),
        )


def _mount_tiny_tmpfs(path: Path) -> bool:
    path.mkdir(parents=True)
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(path)], capture_output=True
    )
    return result.returncode == 0


def test_cache_folder_on_a_full_disk(remote, tmp_path):
    url, endpoint, _, _, _, _ = remote
    cache = tmp_path / "tiny"
    if not _mount_tiny_tmpfs(cache):
        pytest.skip(
            "cannot mount a 16 KiB tmpfs here (needs root); see test_full_disk_via_file_size_limit"
        )
    try:
        loader = build_loader(
            url,
            rank=0,
            world_size=1,
            batch_size=4,
            num_workers=0,
            seed=0,
            config=_config(endpoint, cache),
        )
        with pytest.raises(CacheFullError) as info:
            list(loader)
        assert str(cache) in str(info.value) and "shard-" in str(info.value)
        assert "No space left on device" in str(info.value)
        leftovers = [p for p in cache.rglob("*") if p.name.endswith(".tar") or ".tmp-" in p.name]
        assert not leftovers  # no half-written shard left behind
    finally:
        subprocess.run(["umount", str(cache)], check=False)


_FSIZE_CHILD = r"""
import resource, signal, sys
sys.path.insert(0, sys.argv[4])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.errors import CacheFullError
from platform_lib.loading.loader import build_loader
cfg = LoaderConfig(cache_dir=sys.argv[3], storage_options={"endpoint_url": sys.argv[2], "key": "testing", "secret": "testing"})
try:
    list(build_loader(sys.argv[1], rank=0, world_size=1, batch_size=4, num_workers=0, seed=0, config=cfg))
except CacheFullError as exc:
    print("CACHEFULL", exc)
"""


def test_full_disk_via_file_size_limit(remote, tmp_path):
    """Real kernel write failure (EFBIG from RLIMIT_FSIZE) in a child process, no root needed."""
    url, endpoint, _, _, _, _ = remote
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            _FSIZE_CHILD,
            url,
            endpoint,
            str(tmp_path / "c"),
            str(Path(__file__).parents[1] / "unit"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "CACHEFULL" in result.stdout, result.stderr[-2000:]
    assert "File too large" in result.stdout and str(tmp_path / "c") in result.stdout


def test_object_store_outage_mid_epoch_fails_with_bounded_retries(remote, tmp_path):
    url = remote[0]
    endpoint, _, server = _start_server()  # a second endpoint onto the same in-process S3 state
    cfg = _config(endpoint, tmp_path / "cache", max_retries=1, retry_backoff_s=0.1)
    loader = build_loader(
        url, rank=0, world_size=1, batch_size=4, num_workers=1, seed=0, config=cfg
    )
    server.shutdown()  # the store goes away after the index was read
    server.server_close()
    start = time.monotonic()
    with pytest.raises(ObjectStoreUnreachableError) as info:
        list(loader)
    assert time.monotonic() - start < 90
    message = str(info.value)
    assert f"downloading {url}/shards/shard-" in message and "2 attempts" in message
    assert "\n" not in message  # raised in the worker, surfaced here as one line


def test_truncated_remote_shard_is_skipped_with_one_request_under_skip_policy(remote, tmp_path):
    url, endpoint, app, shards, sizes, client = remote
    victim = shards[3]
    for item in client.list_objects_v2(Bucket=BUCKET, Prefix="data/")["Contents"]:
        body = client.get_object(Bucket=BUCKET, Key=item["Key"])["Body"].read()
        if item["Key"].endswith(victim):
            body = body[: len(body) // 2]
        client.put_object(Bucket=BUCKET, Key=item["Key"].replace("data/", "trunc/", 1), Body=body)
    app.requests.clear()
    cfg = _config(endpoint, tmp_path / "cache", error_policy="skip")
    loader = build_loader(
        f"s3://{BUCKET}/trunc",
        rank=0,
        world_size=1,
        batch_size=4,
        num_workers=1,
        seed=0,
        config=cfg,
    )
    keys = [k for b in loader for k in b["__key__"]]
    view = loader.views[0]
    lost = {view.key(i) for i in range(len(view)) if view.shard_path(i).endswith(victim)}
    assert lost and not lost & set(keys) and len(set(keys)) == 28 - len(lost)
    assert loader.stats.skipped == len(lost)
    assert "the manifest says" in loader.stats.skipped_samples[0][1]
    assert app.count("GET", victim) == 1  # the bad shard is fetched once, not once per sample
    with pytest.raises(Exception, match=f"{victim}: object has"):
        list(
            build_loader(
                f"s3://{BUCKET}/trunc",
                rank=0,
                world_size=1,
                batch_size=4,
                num_workers=0,
                seed=0,
                config=_config(endpoint, tmp_path / "cache2"),
            )
        )


def test_cache_recovers_from_a_crashed_download_and_a_damaged_cached_shard(remote, tmp_path):
    url, endpoint, app, shards, sizes, _ = remote
    cfg = _config(endpoint, tmp_path / "cache")
    loader = build_loader(
        url, rank=0, world_size=1, batch_size=4, num_workers=0, seed=0, config=cfg
    )
    folder = tmp_path / "cache" / loader.views[0].dataset_hash[:16] / "shards"
    folder.mkdir(parents=True)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    stale = folder / f".{shards[0]}.tmp-{int(dead.stdout)}-deadbeef"
    stale.write_bytes(b"half a shard")  # what a killed download leaves behind
    (folder / shards[1]).write_bytes(b"x" * 100)  # wrong size under the real name
    app.requests.clear()
    keys = [k for b in loader for k in b["__key__"]]
    assert len(set(keys)) == 28
    assert not stale.exists()
    assert (folder / shards[1]).stat().st_size == sizes[shards[1]]
    assert app.count("GET", shards[1]) == 1
