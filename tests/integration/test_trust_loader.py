"""Loader waits and shared memory under real faults: a full /dev/shm, a stopped worker, a SIGKILL.

Each test runs real processes: a small tmpfs mounted on /dev/shm in a private mount namespace
(`unshare -m`, as root), a worker stopped with SIGSTOP, a loader process killed with SIGKILL.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))
from loading_helpers import write_test_dataset  # noqa: E402

import platform_lib  # noqa: E402
from platform_lib.loading.config import LoaderConfig  # noqa: E402
from platform_lib.loading.errors import WorkerTimeoutError  # noqa: E402
from platform_lib.loading.loader import build_loader  # noqa: E402

pytestmark = pytest.mark.timeout(300)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return write_test_dataset(tmp_path_factory.mktemp("trust") / "data", {"loga": 16, "logb": 14})


def _child_env() -> dict[str, str]:
    """The environment of a child process: it imports the platform_lib this test imports."""
    tree = Path(platform_lib.__file__).resolve().parents[1]
    return {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{REPO / 'tests' / 'unit'}"}


_FILL_SHM = """
import sys, torch
from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.loader import build_loader
from platform_lib.loading.errors import RingError

def to_tensor(sample):  # 1 MiB per sample: fallback blocks fill the 16 MiB /dev/shm quickly
    return {"x": torch.zeros(2**18, dtype=torch.float32)}

loader = build_loader(sys.argv[1], rank=0, world_size=1, batch_size=1, num_workers=1, seed=0,
                      config=LoaderConfig(sample_transform=to_tensor, prefetch_depth=1,
                                          worker_timeout_s=60))
kept = []  # the training loop keeps every batch: ring slots run out, fallbacks take over
try:
    for batch in loader:
        kept.append(batch)
except RingError as exc:
    print("RingError:", exc, flush=True)
    sys.exit(0)
print("no error after", len(kept), "batches", flush=True)
sys.exit(1)
"""


def test_a_full_dev_shm_in_the_fallback_path_is_a_ring_error_not_a_lost_batch(dataset):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to mount a small tmpfs on /dev/shm privately")
    script = f'mount -t tmpfs -o size=16m tmpfs /dev/shm && exec {sys.executable} -c "$0" $1'
    started = time.monotonic()
    try:
        result = subprocess.run(
            ["unshare", "-m", "sh", "-c", script, _FILL_SHM, str(dataset)],
            capture_output=True,
            text=True,
            timeout=120,
            env=_child_env(),
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the loader hung on a full /dev/shm (a lost batch): {exc.stderr!r:.2000}")
    assert result.returncode == 0, (result.stdout, result.stderr[-3000:])
    assert result.stdout.startswith("RingError: ")  # re-raised in the main process
    # torch re-raises a worker's error with the worker's traceback; the error's line:
    message = next(line for line in result.stdout.splitlines() if "RingError: a batch's" in line)
    assert "private shared-memory block" in message
    assert "bytes" in message and "/dev/shm has" in message and "--shm-size" in message
    assert "No space left" not in result.stderr  # no error printed by a feeder thread
    assert time.monotonic() - started < 100


def _children() -> set[int]:
    return {p.pid for p in mp.active_children()}


def test_a_stopped_worker_is_named_by_pid_within_the_deadline(dataset):
    before = _children()
    loader = build_loader(
        str(dataset),
        rank=0,
        world_size=1,
        batch_size=2,
        num_workers=2,
        seed=0,
        config=LoaderConfig(worker_timeout_s=3, prefetch_depth=1),
    )
    workers: set[int] = set()
    try:
        batches = iter(loader)
        next(batches)
        workers = _children() - before
        assert len(workers) == 2
        for pid in workers:
            os.kill(pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(WorkerTimeoutError) as info:
            for _ in batches:
                pass
        waited = time.monotonic() - started
    finally:
        for pid in workers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        loader.close()
    message = str(info.value)
    assert "\n" not in message and "within 3 s" in message and "worker_timeout_s" in message
    assert any(f"(pid {pid})" in message for pid in workers), message
    assert "shards " in message and "epoch 0 step" in message
    assert waited < 3 + 10  # the deadline plus killing the workers
    assert not (_children() - before)  # the stopped workers were killed, not left behind


_HOLD = """
import sys, time
from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.loader import build_loader
loader = build_loader(sys.argv[1], rank=0, world_size=1, batch_size=2, num_workers=1, seed=0,
                      config=LoaderConfig(shm_dir=sys.argv[2], multiprocessing_context=sys.argv[3]))
batches = iter(loader)
next(batches)
print("ready", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_a_killed_loaders_shared_memory_files_are_swept_by_the_next_loader(dataset, start_method):
    shm = Path("/dev/shm") / f"drivetrain-test-{uuid.uuid4().hex[:8]}"
    shm.mkdir()
    child = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(dataset), str(shm), start_method],
        stdout=subprocess.PIPE,
        text=True,
        env=_child_env(),
        start_new_session=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        left = sorted(p.name for p in shm.iterdir() if not p.name.startswith("drivetrain-owner-"))
        assert any(n.startswith("drivetrain-order-") for n in left), left
        if start_method == "spawn":  # spawned workers open the ring by name
            assert any(n.startswith("drivetrain-ring-") for n in left), left
        os.kill(child.pid, signal.SIGKILL)  # the loader's process only: its workers live on
        child.wait(timeout=30)
        assert all((shm / n).exists() for n in left)  # nothing removes them on a SIGKILL
        loader = build_loader(
            str(dataset),
            rank=0,
            world_size=1,
            batch_size=2,
            num_workers=1,
            seed=0,
            config=LoaderConfig(shm_dir=str(shm)),
        )
        with loader:
            next(iter(loader))
            assert not [n for n in left if (shm / n).exists()]  # swept by the new loader
        assert not list(shm.iterdir())  # and the new loader leaves nothing behind
    finally:
        try:
            os.killpg(child.pid, signal.SIGKILL)  # workers of the killed loader
        except ProcessLookupError:
            pass
        shutil.rmtree(shm, ignore_errors=True)
