"""Zero-copy hand-off, verify policies, persistent workers and the columnar index.

The ring path (workers `preadv` into a shared-memory slot, the main process gets views) must
give the same bytes and values as the reference reader (`DatasetReader`, `np.load`,
`json.loads`) for every member of the real PandaSet sample and of synthetic data.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.errors import RingError
from platform_lib.loading.loader import build_loader
from platform_lib.loading.ring import Ring, SlotWriter
from platform_lib.shards.reader import open_dataset
from tests.support.datasets import write_index_rows, write_test_dataset

pytestmark = pytest.mark.timeout(300)


def _same_json(actual, expected) -> bool:
    if isinstance(expected, dict):
        return set(actual) == set(expected) and all(
            _same_json(actual[k], v) for k, v in expected.items()
        )
    if isinstance(actual, np.ndarray):
        return np.array_equal(actual, np.asarray(expected, dtype=actual.dtype))
    return actual == expected


def test_datasets_built_without_xxh3_stay_readable(tmp_path):
    root = write_test_dataset(tmp_path / "d", {"loga": 5})
    table = pq.read_table(root / "index.parquet")
    old_member = pa.struct(
        [f for f in table.schema.field("members").type.value_type if f.name != "xxh3_64"]
    )
    rows = table.to_pylist()
    for row in rows:
        for m in row["members"]:
            del m["xxh3_64"]
    schema = pa.schema(
        [
            f if f.name != "members" else pa.field("members", pa.list_(old_member), nullable=False)
            for f in table.schema
        ]
    )
    write_index_rows(root, rows, schema)
    for verify in ("shard", "member"):
        loader = build_loader(
            str(root),
            rank=0,
            world_size=1,
            batch_size=5,
            num_workers=0,
            seed=0,
            config=LoaderConfig(verify=verify),
        )
        assert sorted(k for b in loader for k in b["__key__"]) == [
            f"loga_{i:06d}" for i in range(5)
        ]
    assert open_dataset(root).view.member_xxh3 is None


def test_the_index_view_has_no_python_object_per_row(tmp_path):
    root = write_test_dataset(tmp_path / "d", {"loga": 7, "logb": 3})
    view = open_dataset(root).view
    arrays = {name: value for name, value in vars(view).items() if isinstance(value, np.ndarray)}
    assert {"key_bytes", "shard_id", "member_offset", "member_sha256", "member_xxh3"} <= set(arrays)
    assert all(a.dtype != object for a in arrays.values())
    assert [view.key(i) for i in range(len(view))] == view.keys()
    assert view.row_of("logb_000002") == view.keys().index("logb_000002")
    with pytest.raises(KeyError, match="nope"):
        view.row_of("nope")


def test_a_sample_larger_than_its_raw_area_is_a_clear_error():
    ring = Ring(num_workers=1, slots_per_worker=1, budget_bytes=2**20, batch_bytes=8192)
    extent = ring.reserve(0, 0, 8192, generation=ring.enter(0), timeout_s=1)
    writer = SlotWriter(ring, extent, raw_bytes=4096)
    writer.raw_buffer(4000, what="sample a")
    with pytest.raises(
        RingError, match=r"sample b \(5000 bytes\) does not fit the batch's raw area.*changed"
    ):
        writer.raw_buffer(5000, what="sample b")
    ring.close()


def test_a_too_small_dev_shm_is_named_before_anything_is_allocated():
    st = os.statvfs("/dev/shm")
    free = st.f_bavail * st.f_frsize

    def mine() -> set[str]:  # this process's ring files (other test workers share /dev/shm)
        return {n for n in os.listdir("/dev/shm") if f"-{os.getpid()}-" in n}

    before = mine()
    with pytest.raises(RingError) as info:  # 1 GiB over: others may free a little meanwhile
        Ring(num_workers=2, slots_per_worker=4, budget_bytes=4 * free, batch_bytes=free + 2**30)
    message = str(info.value)
    assert "/dev/shm" in message and "GiB free of" in message and "--shm-size" in message
    assert mine() == before  # nothing created, nothing left
