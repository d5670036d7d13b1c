"""Building PandaSet with a pool of worker processes quarantines a corrupt JPEG exactly as the
serial build does (tests/unit/test_build_pandaset.py).
"""

from __future__ import annotations

from platform_lib.shards.build import BuildConfig, build_dataset
from platform_lib.shards.reader import open_dataset


def test_corrupt_jpeg_quarantined_by_two_workers(pandaset_copy, tmp_path):
    bad = pandaset_copy / "camera" / "left_camera" / "04.jpg"
    bad.write_bytes(bad.read_bytes()[:5000])  # truncated JPEG
    config = BuildConfig(progress=False, quarantine=True, workers=2)
    manifest = build_dataset("pandaset", pandaset_copy.parent, tmp_path / "ds", config)
    assert manifest.num_samples == 9
    assert len(manifest.quarantine) == 1
    entry = manifest.quarantine[0]
    assert entry["key"] == "002_000004" and entry["reason"] == "corrupt_camera"
    assert entry["path"] == "002/camera/left_camera/04.jpg"
    assert "002_000004" not in open_dataset(tmp_path / "ds").keys
