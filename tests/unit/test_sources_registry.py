"""The one list of raw-log sources: names, readers, default splits."""

from __future__ import annotations

import pytest

from platform_lib.errors import UserError
from platform_lib.shards.build import BuildConfig
from platform_lib.sources.catalog import DEFAULT_SPLITS, SOURCE_NAMES, check_source, list_logs


def test_every_source_has_a_reader_and_a_default_split(tmp_path) -> None:
    assert set(DEFAULT_SPLITS) == set(SOURCE_NAMES)
    for name in SOURCE_NAMES:
        assert check_source(name) == name
        BuildConfig(**DEFAULT_SPLITS[name])  # a valid build config
        with pytest.raises(FileNotFoundError):
            list_logs(name, tmp_path / "missing")
    assert (
        DEFAULT_SPLITS["pandaset"]["split"] == "by_frame_range"
    )  # one sequence still has val frames


def test_unknown_source_names_the_input() -> None:
    with pytest.raises(
        UserError,
        match=r"^unknown raw-log format 'nuscenes' \(source\): use one of pandaset, synthetic$",
    ):
        check_source("nuscenes")
