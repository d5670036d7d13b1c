"""Synthetic generation with a pool of worker processes is byte-identical to the serial one;
the in-process tests are in tests/unit/test_synthetic.py.
"""

from __future__ import annotations

from platform_lib.sources.hashing import hash_raw_log
from platform_lib.sources.raw_files import scan_raw_files
from platform_lib.sources.synthetic import SyntheticConfig, write_synthetic_logs

SMALL = SyntheticConfig(
    num_logs=2,
    frames_per_log=3,
    image_width=96,
    image_height=64,
    lidar_beams=16,
    lidar_azimuth_bins=128,
)


def test_generation_is_byte_deterministic(tmp_path):
    first = write_synthetic_logs(SMALL, tmp_path / "a", progress=False)
    second = write_synthetic_logs(SMALL, tmp_path / "b", progress=False, workers=2)
    assert [p.name for p in first] == ["synth-0000", "synth-0001"]
    for a, b in zip(first, second, strict=True):
        assert scan_raw_files(a).files == scan_raw_files(b).files
        assert hash_raw_log(a) == hash_raw_log(b)
    # a log does not depend on how many logs are generated; the seed changes everything
    (one,) = write_synthetic_logs(
        SyntheticConfig(**{**SMALL.__dict__, "num_logs": 1}), tmp_path / "c", progress=False
    )
    for rel in scan_raw_files(one).files:  # meta.json records the whole config, num_logs included
        if rel != "meta.json":
            assert (one / rel).read_bytes() == (first[0] / rel).read_bytes(), rel
    other = write_synthetic_logs(
        SyntheticConfig(**{**SMALL.__dict__, "seed": 7}), tmp_path / "d", progress=False
    )
    assert hash_raw_log(other[0]) != hash_raw_log(first[0])
