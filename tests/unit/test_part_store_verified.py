"""A part reused from the part store is verified first; a part that is not whole is rebuilt.

`drivetrain data build --parts per-log` finds a log's part in the part store by its content
address. A stored part with a flipped shard byte, or a shard replaced by a link out of the
part folder, was reused as it was: the build said "built", `data validate` then said "rebuild
the dataset", and rebuilding reused the same bad part (a loop); a link's target was written
into the merged manifest. Now the reused part's index and shards are checked against its own
manifest (regular files inside the part, size and sha256), and a bad part is rebuilt with one
warning line naming it. `merge_parts` refuses a part whose shard links out of it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from platform_lib.cli import main
from platform_lib.errors import format_user_error
from platform_lib.fsguard import PathOutsideRootError
from platform_lib.shards.build import BuildConfig
from platform_lib.shards.merge import merge_parts
from platform_lib.shards.validate import validate_dataset

pytestmark = pytest.mark.timeout(60)


@pytest.fixture()
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "parts"
    monkeypatch.setenv("DRIVETRAIN_PART_STORE", str(path))
    return path


def _build(raw: Path, output: Path, capsys) -> list[str]:
    code = main(
        [
            "data",
            "build",
            "--source",
            "synthetic",
            "--input",
            str(raw),
            "--num-logs",
            "2",
            "--frames-per-log",
            "3",
            "--output",
            str(output),
            "--parts",
            "per-log",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 0, err
    return [line for line in err if line.startswith(("warning", "error"))]


def _one_part_shard(store: Path) -> Path:
    return sorted(store.glob("synthetic/*/shards/shard-000000.tar"))[0]


def test_a_stored_part_with_a_flipped_byte_is_rebuilt_not_reused(store, tmp_path, capsys):
    raw = tmp_path / "raw"
    assert _build(raw, tmp_path / "first", capsys) == []
    shard = _one_part_shard(store)
    good = shard.read_bytes()
    shard.write_bytes(good[:700] + bytes([good[700] ^ 1]) + good[701:])

    warnings = _build(raw, tmp_path / "second", capsys)
    assert len(warnings) == 1 and "rebuilding it" in warnings[0]
    assert str(shard.parents[1]) in warnings[0] and "sha256" in warnings[0]
    assert shard.read_bytes() == good
    assert validate_dataset(str(tmp_path / "second")).ok
    assert _build(raw, tmp_path / "third", capsys) == []  # whole again: reused silently


def test_a_stored_part_shard_linked_out_is_rebuilt_and_its_target_never_recorded(
    store, tmp_path, capsys
):
    raw = tmp_path / "raw"
    _build(raw, tmp_path / "first", capsys)
    shard = _one_part_shard(store)
    outside = tmp_path / "outside.tar"
    shutil.copyfile(shard, outside)  # the very bytes the part's manifest names
    shard.unlink()
    shard.symlink_to(outside)

    warnings = _build(raw, tmp_path / "second", capsys)
    assert len(warnings) == 1 and "path leaves its root" in warnings[0]
    assert not shard.is_symlink() and shard.read_bytes() == outside.read_bytes()
    manifest = (tmp_path / "second" / "manifest.json").read_text()
    assert str(outside) not in manifest
    locations = [s["location"] for s in json.loads(manifest)["shards"]]
    assert all(loc.startswith(str(store)) for loc in locations)
    assert validate_dataset(str(tmp_path / "second")).ok


def test_merge_refuses_a_part_whose_shard_links_out(store, tmp_path, capsys):
    raw = tmp_path / "raw"
    _build(raw, tmp_path / "first", capsys)
    shard = _one_part_shard(store)
    outside = tmp_path / "outside.tar"
    shutil.move(shard, outside)
    shard.symlink_to(outside)
    parts = sorted(str(p) for p in store.glob("synthetic/*"))
    with pytest.raises(PathOutsideRootError) as caught:
        merge_parts(parts, tmp_path / "merged", BuildConfig(), source="synthetic")
    line = format_user_error(caught.value)
    assert "\n" not in line and str(shard) in line
    assert not (tmp_path / "merged").exists()
