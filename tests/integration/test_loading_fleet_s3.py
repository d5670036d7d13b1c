"""The fleet model against a real run: 2 nodes x 2 ranks x 2 workers read a dataset spread over
2 key prefixes from a moto S3 server on 127.0.0.1, and the GETs of every shard equal the
model's (`platform_lib.loading.fleet`), exactly."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import boto3
import pytest

from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.fleet import FleetSpec, dataset_from_view, simulate_fleet
from platform_lib.loading.loader import build_loader
from platform_lib.shards.view import load_view
from tests.integration.test_loader_s3 import BUCKET, _start_server
from tests.support.datasets import write_test_dataset

pytestmark = pytest.mark.timeout(300)
NODES, RANKS, WORKERS, BATCH, EPOCHS, SEED = 2, 2, 2, 2, 2, 3


@pytest.fixture(scope="module")
def s3_server():
    endpoint, app, server = _start_server()
    yield endpoint, app
    server.shutdown()


def _read_node(url: str, node: int, config: LoaderConfig, loaders: list, errors: list) -> None:
    """One node: its ranks read EPOCHS epochs concurrently through the node's cache folder."""

    def rank_loop(rank: int) -> None:
        try:
            loader = build_loader(
                url,
                rank=rank,
                world_size=NODES * RANKS,
                batch_size=BATCH,
                num_workers=WORKERS,
                seed=SEED,
                decode="none",
                config=config,
            )
            loaders.append(loader)
            for epoch in range(EPOCHS):
                loader.set_epoch(epoch)
                for _ in loader:
                    pass
        except Exception as exc:  # noqa: BLE001 - re-raised by the test
            errors.append(exc)

    threads = [threading.Thread(target=rank_loop, args=(node * RANKS + r,)) for r in range(RANKS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)


def test_model_gets_per_shard_equal_a_real_two_node_run(s3_server, tmp_path: Path):
    endpoint, app = s3_server
    local = write_test_dataset(
        tmp_path / "src", {"loga": 14, "logb": 12, "logc": 12}, key_prefixes=2
    )
    client = boto3.client("s3", endpoint_url=endpoint)
    client.create_bucket(Bucket=BUCKET)
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        client.upload_file(str(path), BUCKET, f"fleet/{path.relative_to(local)}")
    url = f"s3://{BUCKET}/fleet"
    options = {"endpoint_url": endpoint, "key": "testing", "secret": "testing"}
    configs = [
        LoaderConfig(
            cache_dir=str(tmp_path / f"node{n}"), storage_options=options, shuffle_buffer=6
        )
        for n in range(NODES)
    ]
    view = load_view(url, storage_options=options, cache_dir=str(tmp_path / "plan"))
    data = dataset_from_view(view, configs[0])
    assert data.prefixes == ("shards/p00/", "shards/p01/")
    spec = FleetSpec(
        nodes=NODES,
        ranks_per_node=RANKS,
        workers=WORKERS,
        batch_size=BATCH,
        epochs=EPOCHS,
        seed=SEED,
        loader=configs[0],
    )
    report = simulate_fleet(spec, data)
    keys = [f.split("/fleet/", 1)[1] for f in view.shard_files]
    modelled = dict(zip(keys, report.gets_per_shard.tolist(), strict=True))

    app.requests.clear()
    loaders: list = []
    errors: list = []
    nodes = [
        threading.Thread(target=_read_node, args=(url, n, configs[n], loaders, errors))
        for n in range(NODES)
    ]
    for t in nodes:
        t.start()
    for t in nodes:
        t.join(timeout=180)
    assert not errors, errors
    try:
        # The workers go on into the epoch after the last (prefetch_depth batches each, as the
        # model has them): wait for their downloads, then for any straggler.
        deadline = time.monotonic() + 60
        while app.count("GET", ".tar") < report.gets and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.0)
        real = {key: app.count("GET", f"fleet/{key}") for key in keys}
    finally:
        for loader in loaders:
            loader.close()
    assert real == modelled
    counts = set(modelled.values())
    assert counts == {1, 2}, counts  # each node fetches a shard once; some shards one node only
    assert report.throttled == 0 and report.gets == sum(real.values())
