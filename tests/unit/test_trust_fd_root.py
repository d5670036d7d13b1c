"""A dataset file must lie inside the dataset folder where its descriptor points, not only where
its path pointed when it was checked.

A writer of the dataset folder can swap a link between `ensure_inside` (in
`manifest.dataset_file`) and the open. Each test makes that race happen for real: the swap
is an atomic `rename` of a new link over the old one, after the check and before the open
(in the gap a reader or loader has between opening a dataset and reading a shard, or at
`fsguard`'s seam between a caller's checks and its open). The file swapped in holds the very
same bytes, so only the root check can tell.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from platform_lib import fsguard
from platform_lib.fsguard import PathOutsideRootError, ensure_inside, open_regular
from platform_lib.loading.loader import build_loader
from platform_lib.shards.index import INDEX_NAME
from platform_lib.shards.manifest import MANIFEST_NAME, load_manifest
from platform_lib.shards.reader import open_dataset
from platform_lib.shards.validate import validate_dataset
from platform_lib.shards.view import load_view
from tests.support.datasets import write_test_dataset

SHARD = "shards/shard-000000.tar"


@pytest.fixture()
def dataset(tmp_path: Path) -> Path:
    """A dataset whose files are links to files inside it (allowed: the check passes)."""
    root = write_test_dataset(tmp_path / "data", {"loga": 4, "logb": 4})
    for name in (SHARD, INDEX_NAME, MANIFEST_NAME):
        kept = root / "kept" / name
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(root / name, kept)
        (root / name).symlink_to(kept)
    return root


def _swap_out(link: Path, outside: Path) -> None:
    """Point `link` at `outside`, a copy of its bytes outside the dataset, in one rename."""
    outside.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(link, outside)
    fresh = link.with_name(f".{link.name}.swap")
    fresh.symlink_to(outside)
    os.replace(fresh, link)


def _refused(error: PathOutsideRootError, file: Path, root: Path) -> None:
    assert error.path == str(file) and Path(error.root).resolve() == root.resolve(), error


def test_open_regular_checks_the_file_its_descriptor_refers_to(tmp_path: Path) -> None:
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    root.mkdir()
    (root / "real").write_bytes(b"inside")
    (root / "name").symlink_to(root / "real")
    (tmp_path / "root-link").symlink_to(root)
    os.close(open_regular(root / "name", root=tmp_path / "root-link"))  # both links allowed
    ensure_inside(root / "name", root)  # the path check passes ...
    _swap_out(root / "name", elsewhere / "copy")  # ... then the link moves out
    with pytest.raises(PathOutsideRootError) as caught:
        open_regular(root / "name", root=root)
    _refused(caught.value, root / "name", root)


def test_a_shard_swapped_out_after_the_reader_opened_the_dataset_is_refused(
    dataset: Path, tmp_path: Path
) -> None:
    reader = open_dataset(dataset)  # every shard path checked here
    key = reader.keys[0]
    _swap_out(dataset / SHARD, tmp_path / "elsewhere" / "shard.tar")
    with pytest.raises(PathOutsideRootError) as caught:
        reader.read_sample(key)
    _refused(caught.value, dataset / SHARD, dataset)


def test_a_shard_swapped_out_after_the_loader_was_built_is_refused(
    dataset: Path, tmp_path: Path
) -> None:
    loader = build_loader(str(dataset), rank=0, world_size=1, batch_size=4, num_workers=0, seed=0)
    _swap_out(dataset / SHARD, tmp_path / "elsewhere" / "shard.tar")
    with pytest.raises(PathOutsideRootError) as caught:
        next(iter(loader))
    _refused(caught.value, dataset / SHARD, dataset)


@pytest.mark.parametrize(
    ("name", "open_it"),
    [
        (MANIFEST_NAME, lambda ds: load_manifest(ds)),
        (INDEX_NAME, lambda ds: load_view(str(ds))),
        (INDEX_NAME, lambda ds: validate_dataset(str(ds))),
        (SHARD, lambda ds: validate_dataset(str(ds))),
    ],
    ids=["manifest", "index-view", "index-validate", "shard-validate"],
)
def test_a_link_swapped_between_the_check_and_the_open_is_refused(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, open_it
) -> None:
    target = dataset / name
    swapped = []

    def swap_at_the_open(path: str | os.PathLike[str]) -> None:
        if Path(path) == target and not swapped:  # checked by dataset_file: now the race
            swapped.append(path)
            _swap_out(target, tmp_path / "elsewhere" / target.name)

    monkeypatch.setattr(fsguard, "_before_open", swap_at_the_open)
    with pytest.raises(PathOutsideRootError) as caught:
        open_it(dataset)
    assert swapped, "the open never came"
    _refused(caught.value, target, dataset)
