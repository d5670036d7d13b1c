"""Links that leave their root: a dataset's files, and the log folders of a raw-log root.

Every file of a local dataset (manifest.json, index.parquet, each shard) must resolve inside
the dataset folder: a link out of it is one line naming the file and the folder, in the
loader, the reader, `validate_dataset` and `drivetrain data validate`, even when the link's
target holds the very bytes the manifest names. Links inside the folder, and a dataset
folder that is itself a link, stay allowed. Raw-log roots may link out (docs/security.md,
"Known limits"), but a folder of the root that is not a log is never skipped silently.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import fsspec
import pytest

from platform_lib.cli import main
from platform_lib.errors import UserError, format_user_error
from platform_lib.fsguard import PathOutsideRootError
from platform_lib.loading.cache import ShardCache
from platform_lib.loading.loader import build_loader
from platform_lib.shards.index import INDEX_NAME
from platform_lib.shards.manifest import MANIFEST_NAME
from platform_lib.shards.reader import open_dataset
from platform_lib.shards.validate import validate_dataset
from platform_lib.shards.view import load_view
from platform_lib.sources.catalog import list_log_urls
from tests.support.datasets import write_test_dataset

pytestmark = pytest.mark.timeout(30)

SHARD = "shards/shard-000000.tar"


@pytest.fixture()
def dataset(tmp_path: Path) -> Path:
    return write_test_dataset(tmp_path / "data", {"loga": 4, "logb": 4})


def _link_out(dataset: Path, name: str, outside: Path) -> Path:
    """Move the dataset's file `name` to `outside` (same bytes) and leave a link to it."""
    outside.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(dataset / name, outside)
    (dataset / name).symlink_to(outside)
    return dataset / name


def _refused(error: PathOutsideRootError, file: Path, root: Path) -> None:
    line = format_user_error(error)
    assert "\n" not in line and line.startswith("error: path leaves its root")
    assert str(file) in line and str(root) in line


@pytest.mark.parametrize("name", [SHARD, INDEX_NAME, MANIFEST_NAME])
def test_a_dataset_file_linked_out_of_the_folder_is_refused_even_with_identical_bytes(
    dataset, tmp_path, name
):
    link = _link_out(dataset, name, tmp_path / "elsewhere" / Path(name).name)
    for open_it in (
        lambda: load_view(str(dataset)),
        lambda: open_dataset(dataset),
        lambda: validate_dataset(str(dataset)),
        lambda: build_loader(
            str(dataset), rank=0, world_size=1, batch_size=4, num_workers=0, seed=0
        ),
    ):
        with pytest.raises(PathOutsideRootError) as caught:
            open_it()
        _refused(caught.value, link, dataset)


def test_a_shard_linked_to_etc_passwd_is_one_line_from_data_validate(dataset, capsys):
    (dataset / SHARD).unlink()
    (dataset / SHARD).symlink_to("/etc/passwd")
    assert main(["data", "validate", str(dataset)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: path leaves its root")
    assert str(dataset / SHARD) in err[0] and "Traceback" not in err[0]


def test_links_inside_the_dataset_folder_and_a_linked_dataset_folder_stay_allowed(
    dataset, tmp_path
):
    spare = dataset / "spare"
    spare.mkdir()
    shutil.move(dataset / SHARD, spare / "shard.tar")
    (dataset / SHARD).symlink_to("../spare/shard.tar")
    linked = tmp_path / "linked-dataset"
    linked.symlink_to(dataset)
    for root in (dataset, linked):
        assert validate_dataset(str(root)).ok
        assert len(open_dataset(root)) == 8
        loader = build_loader(str(root), rank=0, world_size=1, batch_size=4, num_workers=0, seed=0)
        assert sum(len(batch["__key__"]) for batch in loader) == 8


@pytest.fixture()
def raw_with_a_linked_folder(synthetic_root, tmp_path) -> tuple[Path, Path]:
    """Two synthetic logs and `synth-0009`, a link to a folder outside the root that is no log."""
    raw = tmp_path / "raw"
    raw.mkdir()
    for name in ("synth-0000", "synth-0001"):
        shutil.copytree(synthetic_root / name, raw / name)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "sub").mkdir(parents=True)
    (elsewhere / "sub" / "notes.txt").write_text("not a log\n")
    (raw / "synth-0009").symlink_to(elsewhere)
    return raw, raw / "synth-0009"


def test_a_raw_log_folder_linked_to_a_non_log_is_refused_not_skipped(raw_with_a_linked_folder):
    raw, link = raw_with_a_linked_folder
    with pytest.raises(UserError) as caught:
        list_log_urls("synthetic", str(raw))
    line = format_user_error(caught.value)
    assert "\n" not in line and str(link) in line and "not a synthetic log" in line
    assert str(link.resolve()) in line  # the link's target


def test_data_build_refuses_a_linked_non_log_folder_instead_of_building_the_others(
    raw_with_a_linked_folder, tmp_path, capsys
):
    raw, link = raw_with_a_linked_folder
    code = main(
        [
            "data",
            "build",
            "--source",
            "synthetic",
            "--input",
            str(raw),
            "--output",
            str(tmp_path / "ds"),
        ]
    )
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code != 0 and not (tmp_path / "ds" / MANIFEST_NAME).exists()
    assert len(errors) == 1 and str(link) in errors[0] and "not a synthetic log" in errors[0]


def test_hidden_folders_and_a_single_log_root_are_still_listed_as_before(
    raw_with_a_linked_folder,
):
    raw, link = raw_with_a_linked_folder
    link.rename(raw / ".synth-0009")
    assert [Path(p).name for p in list_log_urls("synthetic", str(raw))] == [
        "synth-0000",
        "synth-0001",
    ]
    assert list_log_urls("synthetic", str(raw / "synth-0000")) == [str(raw / "synth-0000")]


def test_a_cached_shard_linked_out_of_the_node_cache_is_refused(dataset, tmp_path):
    url = "memory://f2-links/ds"
    store = fsspec.filesystem("memory")
    for path in sorted(dataset.rglob("*")):
        if path.is_file():
            store.pipe_file(f"{url}/{path.relative_to(dataset).as_posix()}", path.read_bytes())
    manifest = json.loads((dataset / MANIFEST_NAME).read_text())
    cache = ShardCache(
        url=url,
        root="/f2-links/ds",
        storage_options={},
        dataset_hash=manifest["dataset_hash"],
        cache_dir=str(tmp_path / "cache"),
        limit_bytes=10**9,
        max_retries=0,
        backoff_s=0.0,
    )
    planted = cache.folder / SHARD
    planted.parent.mkdir(parents=True)
    planted.symlink_to(dataset / SHARD)  # the very bytes, outside the cache folder
    with pytest.raises(PathOutsideRootError) as caught:
        cache.open(SHARD, (dataset / SHARD).stat().st_size)
    _refused(caught.value, planted, cache.base)
    planted.unlink()
    os.close(cache.open(SHARD, (dataset / SHARD).stat().st_size))  # downloaded into the cache
