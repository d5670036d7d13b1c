"""The loader's worker processes decode cameras at the configured size with matching calibration;
the in-process decode tests are in tests/unit/test_loading_decode.py.
"""

from __future__ import annotations

import numpy as np

from platform_lib.imaging.decode import CameraResize, decode_jpeg_cpu
from platform_lib.loading.config import LoaderConfig
from platform_lib.loading.loader import build_loader
from tests.support.datasets import write_test_dataset


def test_loader_decodes_cameras_at_the_configured_size_with_matching_calib(tmp_path):
    root = write_test_dataset(tmp_path / "ds", {"log-a": 4})
    resize = CameraResize(width=12, height=4)  # 24x16 sources: crop to 24x8 at the bottom, halve
    cfg = LoaderConfig(camera_resize=resize)
    for workers in (0, 2):
        loader = build_loader(
            str(root),
            rank=0,
            world_size=1,
            batch_size=2,
            num_workers=workers,
            seed=0,
            decode="auto",
            config=cfg,
        )  # no CUDA here: "auto" is "cpu"
        assert loader.decode == "cpu"
        batch = next(iter(loader))
        reference = build_loader(
            str(root), rank=0, world_size=1, batch_size=2, num_workers=0, seed=0, decode="none"
        )
        raw = next(iter(reference))
        assert batch["__key__"] == raw["__key__"]
        for cameras, calib, jpegs in zip(
            batch["cameras"], batch["calib"], raw["cameras"], strict=True
        ):
            for name, image in cameras.items():
                assert image.shape == (4, 12, 3)
                assert np.array_equal(image, decode_jpeg_cpu(jpegs[name], resize))
                cam = calib["cameras"][name]
                assert (cam["width"], cam["height"]) == (12, 4)
                np.testing.assert_allclose(
                    cam["intrinsics"], [[10.0, 0, 5.75], [0, 10.0, -0.25], [0, 0, 1]]
                )


def test_workers_decoding_in_threads_give_the_batches_of_the_serial_decode(tmp_path):
    root = write_test_dataset(tmp_path / "ds", {"log-a": 6, "log-b": 5})
    epochs = {}
    for workers, threads in ((0, 1), (2, 3)):
        loader = build_loader(
            str(root),
            rank=0,
            world_size=1,
            batch_size=2,
            num_workers=workers,
            seed=0,
            decode="cpu",
            config=LoaderConfig(decode_threads=threads),
        )
        with loader:
            epochs[workers] = [
                (b["__key__"], [{n: im.copy() for n, im in c.items()} for c in b["cameras"]])
                for b in loader
            ]
    assert sum(len(keys) for keys, _ in epochs[0]) == 12  # 11 samples, one repeated (pad)
    for (keys, cameras), (ref_keys, ref_cameras) in zip(epochs[2], epochs[0], strict=True):
        assert keys == ref_keys
        for got, ref in zip(cameras, ref_cameras, strict=True):
            assert got.keys() == ref.keys()
            assert all(np.array_equal(got[n], ref[n]) for n in ref)
