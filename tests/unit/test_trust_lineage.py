"""Lineage: every byte a build reads is a byte its recorded content hash covers.

A raw file changed between hashing and reading is driven deterministically: the listing is
hashed, then the file is rewritten, then read (directly, or through the build's own
`hash_logs` / `iter_log` seams, which run unchanged around the rewrite). A change that is
reverted while the build reads (ABA) cannot be timed without races; it is caught by
construction, since the check compares the bytes read, not the file on disk afterwards
(`test_a_part_changed_and_reverted_while_read_is_not_published` reverts before any re-hash).
"""

from __future__ import annotations

import gzip
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import platform_lib.shards.build as build
import platform_lib.shards.merge as merge
from platform_lib.errors import format_user_error
from platform_lib.shards.build import BuildConfig, build_dataset
from platform_lib.shards.merge import build_part, part_key
from platform_lib.sources.hashing import hash_listing, hash_log_location, hash_raw_log
from platform_lib.sources.raw_files import MAX_IMAGE_BYTES, RawFileChangedError, scan_raw_files

CONFIG = BuildConfig(split="by_log", val_fraction=0.0, shard_size_mb=0.05)
TARGET = "camera/front_camera/000003.jpg"


@pytest.fixture
def log(synthetic_root: Path, tmp_path: Path) -> Path:
    """A writable copy of one synthetic log (8 frames)."""
    copy = tmp_path / "raw" / "synth-0000"
    shutil.copytree(synthetic_root / "synth-0000", copy)
    return copy


def _swap(log: Path) -> bytes:
    """Replace TARGET with another valid JPEG of the log; return its original bytes."""
    target = log / TARGET
    original = target.read_bytes()
    target.write_bytes(target.with_name("000002.jpg").read_bytes())
    return original


def _published(store: Path) -> list[Path]:
    return sorted(store.rglob("manifest.json")) if store.exists() else []


def test_a_read_of_other_bytes_than_hashed_is_one_line_naming_the_file(log: Path) -> None:
    files = scan_raw_files(log)
    hash_listing(files)
    same = files.read(log / "camera/front_camera/000002.jpg", max_bytes=MAX_IMAGE_BYTES)
    assert same == (log / "camera/front_camera/000002.jpg").read_bytes()
    _swap(log)
    with pytest.raises(RawFileChangedError) as caught:
        files.read(log / TARGET, max_bytes=MAX_IMAGE_BYTES)
    line = format_user_error(caught.value)
    assert "\n" not in line
    assert line.startswith("error: raw file changed while the build read it")
    assert f"({log / TARGET})" in line and line.endswith("re-run the build")
    with pytest.raises(RawFileChangedError):  # a stream opened through the listing: the same
        files.open(log / TARGET)


def test_the_build_refuses_a_file_swapped_after_hashing_and_publishes_nothing(
    log: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_hash_logs = build.hash_logs

    def hash_then_swap(log_dirs):  # the build's own hashing, then the file changes
        hashed = real_hash_logs(log_dirs)
        _swap(log)
        return hashed

    monkeypatch.setattr(build, "hash_logs", hash_then_swap)
    out = tmp_path / "out"
    with pytest.raises(RawFileChangedError, match="changed while the build read it") as caught:
        build_dataset("synthetic", log.parent, out, CONFIG)
    assert caught.value.culprit == str(log / TARGET)
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["raw"]  # no staging folder left either


def test_a_part_changed_and_reverted_while_read_is_not_published(
    log: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store"
    log_hash = hash_log_location(str(log))  # list_raw_logs
    real_iter_log = merge.iter_log_frames

    def changed_during_read(*args, **kwargs):  # A -> B before the first frame, B -> A after
        original = _swap(log)
        try:
            yield from real_iter_log(*args, **kwargs)
        finally:
            (log / TARGET).write_bytes(original)

    monkeypatch.setattr(merge, "iter_log_frames", changed_during_read)
    with pytest.raises(RawFileChangedError, match="changed while the build read it"):
        build_part("synthetic", log, CONFIG, store=str(store), log_hash=log_hash)
    assert hash_log_location(str(log)) == log_hash  # a re-hash afterwards sees nothing
    assert _published(store) == []


def test_a_retried_part_build_does_not_reuse_a_part_of_other_bytes(
    log: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    log_hash = hash_log_location(str(log))  # list_raw_logs, then the log changes
    _swap(log)
    for _attempt in (1, 2):  # the task and its retry
        with pytest.raises(RawFileChangedError, match="changed since it was listed"):
            build_part("synthetic", log, CONFIG, store=str(store), log_hash=log_hash)
    assert _published(store) == []
    part = build_part("synthetic", log, CONFIG, store=str(store))  # listed anew
    assert part.built and part.log_hash == hash_raw_log(log) != log_hash


def test_the_part_key_is_the_hash_of_the_bytes_read(
    log: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store"
    real_iter_log = merge.iter_log_frames

    def swap_then_read(*args, **kwargs):  # build_part hashed the log; it changes before reading
        _swap(log)
        yield from real_iter_log(*args, **kwargs)

    monkeypatch.setattr(merge, "iter_log_frames", swap_then_read)
    with pytest.raises(RawFileChangedError):
        build_part("synthetic", log, CONFIG, store=str(store))
    assert _published(store) == []
    monkeypatch.undo()
    part = build_part("synthetic", log, CONFIG, store=str(store))  # the retry
    read_hash = hash_raw_log(log)
    assert part.built and part.log_hash == read_hash
    assert Path(part.location).name == part_key("synthetic", read_hash, CONFIG)
    manifest = json.loads((Path(part.location) / "manifest.json").read_text())
    assert manifest["source_logs"][0]["content_hash"] == read_hash


_BOMB_CHILD = r"""
import resource, sys
from pathlib import Path
resource.setrlimit(resource.RLIMIT_AS, (1536 << 20, 1536 << 20))
import platform_lib.sources.pandaset_files as pf
from platform_lib.sources.frame import FrameError
from platform_lib.sources.raw_files import scan_raw_files
root = Path(sys.argv[1])
files = scan_raw_files(root)
pf.MAX_UNPICKLED_BYTES = int(sys.argv[2])
for name in sys.argv[3:]:
    try:
        pf.load_pickled_frame(
            root / name, files=files, reason="corrupt_lidar", log_id="bomb", frame_index=0
        )
    except FrameError as exc:
        print(exc.reason, str(exc).replace("\n", " "))
"""


def test_a_pickle_bomb_is_a_corrupt_frame_without_allocating_gigabytes(tmp_path: Path) -> None:
    root = tmp_path / "bomb"
    root.mkdir()
    proto, stop = b"\x80\x04", b"."
    # 1) declares one 3 GiB bytes object (1 MiB follows): the unpickler's allocation fails
    with gzip.open(root / "declared.pkl.gz", "wb") as g:
        g.write(proto + b"\x8e" + struct.pack("<Q", 3 << 30) + bytes(1 << 20) + stop)
    # 2) a list of 16 x 1 MiB bytes objects: 16 MiB decompressed, past a 4 MiB cap
    with gzip.open(root / "inflated.pkl.gz", "wb") as g:
        g.write(proto + b"]" + b"(")
        for i in range(16):
            g.write(b"\x8e" + struct.pack("<Q", 1 << 20) + bytes([i]) * (1 << 20))
        g.write(b"e" + stop)
    assert (root / "inflated.pkl.gz").stat().st_size < 200_000
    child = subprocess.run(
        [sys.executable, "-c", _BOMB_CHILD, str(root), str(4 << 20)]
        + ["declared.pkl.gz", "inflated.pkl.gz"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(Path(__file__).resolve().parents[2]), "PATH": "/usr/bin:/bin"},
    )
    assert child.returncode == 0, child.stderr[-2000:]
    declared, inflated = child.stdout.splitlines()
    assert declared.startswith("corrupt_lidar ") and "MemoryError" in declared
    assert inflated.startswith("corrupt_lidar ") and f"more than {4 << 20} bytes" in inflated
