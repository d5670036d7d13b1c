"""Forked loader workers never finalise the training process's objects: neither its garbage (a
gloo process group left in a reference cycle segfaulted a worker that collected it: its threads
are not there) nor the thread-locals of the thread that iterates the loader (torch's DTensor
sharding cache holds process groups; a fork from another thread deletes that thread's state in
the child, and a destroyed group's destructor segfaulted workers under pytest-xdist)."""

from __future__ import annotations

import gc
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.loader import build_loader
from tests.support.datasets import write_test_dataset

pytestmark = pytest.mark.timeout(120)


class _Cycle:
    """Half of a reference cycle whose finalizer writes the pid of the process collecting it."""

    def __init__(self, path: Path) -> None:
        self.path, self.other = str(path), self

    def __del__(self) -> None:
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(f"{os.getpid()}\n")


def _collect_in_worker(sample):
    gc.collect()  # what a worker's GC does on its own, sooner or later
    return {"mean": np.float32(len(sample["__key__"]))}


def test_workers_leave_the_parents_garbage_to_the_parent(tmp_path):
    dataset = write_test_dataset(tmp_path / "data", {"loga": 6})
    finalized = tmp_path / "finalized.txt"
    gc.collect()
    gc.disable()  # keep the cycle alive as garbage until the workers have forked
    try:
        _Cycle(finalized)
        config = LoaderConfig(sample_transform=_collect_in_worker)
        loader = build_loader(
            str(dataset), rank=0, world_size=1, batch_size=2, num_workers=2, seed=0, config=config
        )
        assert sum(len(batch["__key__"]) for batch in loader) == 6
        assert not finalized.exists(), "a forked worker ran a finalizer of the parent's garbage"
    finally:
        gc.enable()
    gc.collect()
    assert finalized.read_text(encoding="utf-8").split() == [str(os.getpid())]


class _Local:
    """A thread-local value whose finalizer appends the pid of the process finalising it.

    Everything it calls is bound at definition: a child deleting a thread's state after fork
    may run it without builtins (no `open`, no `str`).
    """

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __del__(self, _open=os.open, _write=os.write, _close=os.close, _pid=os.getpid) -> None:
        fd = _open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        _write(fd, b"%d\n" % _pid())
        _close(fd)


def test_workers_leave_the_iterating_threads_locals_to_the_parent(tmp_path):
    dataset = write_test_dataset(tmp_path / "data", {"loga": 6})
    finalized = tmp_path / "finalized.txt"
    local = threading.local()
    local.value = _Local(finalized)
    loader = build_loader(str(dataset), rank=0, world_size=1, batch_size=2, num_workers=2, seed=0)
    with loader:
        assert sum(len(batch["__key__"]) for _ in range(2) for batch in loader) == 12
    assert not finalized.exists(), "a forked worker finalised the iterating thread's locals"
    del local
    assert finalized.read_text(encoding="utf-8").split() == [str(os.getpid())]


def test_a_dead_worker_is_raised_by_its_loader_not_in_unrelated_code(tmp_path):
    dataset = write_test_dataset(tmp_path / "data", {"loga": 6})
    with build_loader(
        str(dataset), rank=0, world_size=1, batch_size=2, num_workers=1, seed=0
    ) as loader:
        assert sum(len(batch["__key__"]) for batch in loader) == 6  # the worker persists
        (worker,) = loader._data_iter._workers
        os.kill(worker.pid, signal.SIGKILL)
        worker.join(timeout=10)
        time.sleep(0.5)  # torch's SIGCHLD handler would raise here, in code unrelated to it
        with pytest.raises(RuntimeError, match=r"exited unexpectedly|killed by signal"):
            list(loader)
