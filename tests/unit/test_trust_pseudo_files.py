"""Kernel files are not data: a link to /proc/kmsg or /proc/self/status is one line, never a hang.

The kernel calls `/proc/kmsg` a regular file of size 0 whose read blocks until the kernel logs
something; `/proc/self/status` reads differently per reader. As a raw JPEG, manifest.json,
index.parquet or shard, each must be refused before a byte is read: a raw file by
`NotRegularFileError` naming the path, a dataset's file already as a link out of the dataset
folder (`PathOutsideRootError`). Every test runs under a SIGALRM deadline, so a regression fails instead of
hanging the run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tracemalloc
from pathlib import Path

import pytest

from platform_lib.errors import format_user_error
from platform_lib.fsguard import NotRegularFileError, PathOutsideRootError, read_regular
from platform_lib.loading.loader import build_loader
from platform_lib.shards.manifest import load_manifest
from platform_lib.shards.reader import open_dataset
from platform_lib.shards.validate import validate_dataset
from platform_lib.shards.view import load_view
from platform_lib.sources.hashing import hash_file, hash_raw_log
from platform_lib.sources.raw_files import scan_raw_files
from tests.support.datasets import write_test_dataset

pytestmark = pytest.mark.timeout(60)

SHARD = "shards/shard-000000.tar"


def _kernel_files() -> list:
    kmsg = pytest.param(
        "/proc/kmsg",
        marks=pytest.mark.skipif(
            not os.access("/proc/kmsg", os.R_OK), reason="/proc/kmsg absent or not readable"
        ),
    )
    return [kmsg, "/proc/self/status", "/sys/kernel/mm/transparent_hugepage/enabled"]


KERNEL_FILES = _kernel_files()


@contextlib.contextmanager
def _deadline(seconds: float = 10):
    """Fail with TimeoutError instead of hanging (SIGALRM interrupts a blocked read)."""

    def _expired(*_):
        raise TimeoutError(f"no answer within {seconds} s: a read blocked")

    old = signal.signal(signal.SIGALRM, _expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _link(path: Path, target: str) -> None:
    if not os.path.exists(target):
        pytest.skip(f"{target} does not exist here")
    path.unlink(missing_ok=True)
    path.symlink_to(target)


def _refused_outside(action, path: Path, root: Path) -> None:
    """Run `action()`; it must raise PathOutsideRootError naming `path` and `root`, in time.

    A dataset's files must stay inside its folder (test_trust_links.py), so a link from one to
    a kernel file is refused before the file is opened.
    """
    with _deadline(), pytest.raises(PathOutsideRootError) as info:
        action()
    line = format_user_error(info.value)
    assert "\n" not in line and str(path) in line and str(root) in line, line


def _refused(action, path: Path) -> str:
    """Run `action()`; it must raise NotRegularFileError naming `path`, within the deadline."""
    with _deadline(), pytest.raises(NotRegularFileError) as info:
        action()
    line = format_user_error(info.value)
    assert "\n" not in line and str(path) in line and "kernel" in line, line
    return line


@pytest.fixture()
def dataset(tmp_path: Path) -> Path:
    return write_test_dataset(tmp_path / "data", {"loga": 4, "logb": 4})


@pytest.mark.parametrize("target", KERNEL_FILES)
def test_raw_jpeg_linked_to_a_kernel_file_is_refused(tmp_path, target):
    jpg = tmp_path / "seq" / "camera" / "front_camera" / "00.jpg"
    jpg.parent.mkdir(parents=True)
    _link(jpg, target)
    line = _refused(lambda: hash_raw_log(tmp_path / "seq"), jpg)
    assert "it is a file of the kernel's" in line
    _refused(lambda: hash_file(jpg), jpg)
    _refused(lambda: scan_raw_files(tmp_path / "seq").read(jpg, max_bytes=2**20), jpg)
    _refused(lambda: read_regular(jpg, max_bytes=2**20), jpg)


@pytest.mark.parametrize("target", KERNEL_FILES)
def test_manifest_linked_to_a_kernel_file_is_refused(dataset, target):
    _link(dataset / "manifest.json", target)
    for opener in (load_manifest, open_dataset, load_view, validate_dataset):
        _refused_outside(
            lambda opener=opener: opener(str(dataset)), dataset / "manifest.json", dataset
        )


@pytest.mark.parametrize("target", KERNEL_FILES)
def test_index_linked_to_a_kernel_file_is_refused(dataset, target):
    _link(dataset / "index.parquet", target)
    for opener in (open_dataset, load_view, validate_dataset):
        _refused_outside(
            lambda opener=opener: opener(str(dataset)), dataset / "index.parquet", dataset
        )


@pytest.mark.parametrize("target", KERNEL_FILES)
def test_shard_linked_to_a_kernel_file_is_refused(dataset, target):
    _link(dataset / SHARD, target)
    for opener in (open_dataset, load_view, validate_dataset):
        _refused_outside(lambda opener=opener: opener(str(dataset)), dataset / SHARD, dataset)
    _refused_outside(
        lambda: build_loader(
            str(dataset), rank=0, world_size=1, batch_size=4, num_workers=0, seed=0
        ),
        dataset / SHARD,
        dataset,
    )


def test_validate_reads_no_more_of_a_shard_than_the_manifest_says(dataset):
    """A shard grown (sparsely) to 256 MiB: its size is checked first, the extra bytes never read."""
    manifest_bytes = (dataset / SHARD).stat().st_size
    with open(dataset / SHARD, "r+b") as f:
        f.truncate(256 * 2**20)
    tracemalloc.start()
    try:
        with _deadline(30):
            report = validate_dataset(str(dataset))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert any(
        f"shard has {256 * 2**20} bytes, manifest says {manifest_bytes}" in str(p)
        for p in report.problems
    ), report.describe()
    assert peak < 64 * 2**20, f"validate held {peak} bytes: it read past the manifest's size"


def test_validate_checks_the_index_size_before_parsing_it(dataset):
    index = dataset / "index.parquet"
    size = index.stat().st_size
    with open(index, "ab") as f:
        f.write(b"\0" * 10)
    report = validate_dataset(str(dataset))
    messages = [str(p) for p in report.problems]
    assert messages == [
        f"index.parquet sha256/size differ from the manifest (it has {size + 10} bytes, the "
        f"manifest says {size}: replaced or corrupt); rebuild the dataset"
    ]
