"""A training view re-encoded in worker processes has the bytes of a one-process build."""

from __future__ import annotations

from pathlib import Path

from platform_lib.shards.training_view import ViewConfig, build_view
from tests.support.datasets import write_test_dataset


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_a_view_built_by_two_workers_is_byte_identical_to_one_process(tmp_path):
    parent = write_test_dataset(tmp_path / "ds", {"a": 4, "b": 3})
    config = ViewConfig(camera_width=12, camera_height=6, progress=False)
    one = build_view(parent, tmp_path / "one", config)
    two = build_view(parent, tmp_path / "two", config.model_copy(update={"workers": 2}))
    assert two.num_samples == 7 and two.dataset_hash == one.dataset_hash
    assert _files(tmp_path / "two") == _files(tmp_path / "one")
