"""`LoaderConfig.pin_memory` on a machine without CUDA: the ring's page-locking is skipped cleanly.

With CUDA the main process registers the ring's allocated pages with `cudaHostRegister` in
chunks as the ring grows (`Ring._pin`); without CUDA the first delivery turns pinning off and
no CUDA call is made. A guard: the behaviour is the same as before the GPU decode work.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.loader import build_loader
from tests.support.datasets import write_test_dataset

pytestmark = pytest.mark.timeout(300)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only path")
def test_pin_memory_without_cuda_is_skipped_and_batches_are_unchanged(tmp_path):
    root = write_test_dataset(tmp_path / "ds", {"log-a": 6, "log-b": 4})

    def epoch(pin: bool) -> tuple[list, bool]:
        loader = build_loader(
            str(root),
            rank=0,
            world_size=1,
            batch_size=2,
            num_workers=1,
            seed=0,
            decode="cpu",
            config=LoaderConfig(pin_memory=pin, multiprocessing_context="fork"),
        )
        try:
            batches = [
                (b["__key__"], [{n: np.array(c[n]) for n in c} for c in b["cameras"]])
                for b in loader
            ]
            assert loader._stream is not None and loader._stream.ring is not None  # via the ring
            return batches, loader._stream.ring.pin
        finally:
            loader.close()

    pinned, still_pinning = epoch(True)
    plain, _ = epoch(False)
    assert not still_pinning  # the first delivery found no CUDA and turned pinning off
    assert not torch.cuda.is_initialized()  # no CUDA call was made
    assert [k for k, _ in pinned] == [k for k, _ in plain] and len(pinned) == 5
    for (_, a), (_, b) in zip(pinned, plain, strict=True):
        for x, y in zip(a, b, strict=True):
            assert x.keys() == y.keys() and all(np.array_equal(x[n], y[n]) for n in x)
