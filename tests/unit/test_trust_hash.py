"""The raw content hash covers every byte the build reads (links, FIFOs, deep JSON, log ids).

Tiny real PandaSet-layout sequences (one frame, 8x8 JPEGs) are written to temporary folders;
links, FIFOs and renames are real file-system operations. The property test records every file
the PandaSet reader opens with a Python audit hook (the `open` event of `open()` and
`os.open`) and checks it against the hashed listing.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from platform_lib.errors import UserError, format_user_error
from platform_lib.sources.catalog import read_frames
from platform_lib.sources.frame import FrameError
from platform_lib.sources.hashing import hash_listing, hash_raw_location, hash_raw_log
from platform_lib.sources.pandaset import CAMERA_NAMES, load_pandaset_log
from platform_lib.sources.raw_files import scan_raw_files

_POSE = [
    {"position": {"x": 0.0, "y": 0.0, "z": 0.0}, "heading": {"w": 1.0, "x": 0, "y": 0, "z": 0}}
]


def _jpeg(shade: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (shade, shade, shade)).save(out, "JPEG")
    return out.getvalue()


def _write_sequence(seq: Path, shade: int = 90) -> Path:
    """Write a one-frame PandaSet sequence (lidar, poses, six cameras) at `seq`."""
    (seq / "lidar").mkdir(parents=True)
    points = np.random.default_rng(0).uniform(-5, 5, size=(50, 4))
    df = pd.DataFrame(points, columns=["x", "y", "z", "i"])
    with gzip.open(seq / "lidar" / "00.pkl.gz", "wb") as fh:
        df.to_pickle(fh)
    (seq / "lidar" / "poses.json").write_text(json.dumps(_POSE))
    (seq / "lidar" / "timestamps.json").write_text("[0.0]")
    for name in CAMERA_NAMES:
        cam = seq / "camera" / name
        cam.mkdir(parents=True)
        (cam / "00.jpg").write_bytes(_jpeg(shade))
        (cam / "intrinsics.json").write_text('{"fx": 8, "fy": 8, "cx": 4, "cy": 4}')
        (cam / "poses.json").write_text(json.dumps(_POSE))
        (cam / "timestamps.json").write_text("[0.0]")
    return seq


def _move_and_link(path: Path, target: Path, *, relative: bool = False) -> None:
    """Move `path` to `target` and leave a symbolic link to it at `path`."""
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(path, target)
    link = os.path.relpath(target, path.parent) if relative else target
    os.symlink(link, path)


@contextlib.contextmanager
def _deadline(seconds: float):
    """Fail with TimeoutError instead of hanging (SIGALRM on the main thread)."""

    def _expired(*_):
        raise TimeoutError(f"no answer within {seconds} s: a read blocked")

    old = signal.signal(signal.SIGALRM, _expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# ----------------------------------------------------------------------------- the bug


def test_camera_folder_behind_a_directory_link_is_hashed(tmp_path: Path) -> None:
    seq = _write_sequence(tmp_path / "raw" / "001")
    elsewhere = tmp_path / "other-disk" / "front_camera"
    _move_and_link(seq / "camera" / "front_camera", elsewhere)
    before, location_before = hash_raw_log(seq), hash_raw_location(str(tmp_path / "raw"))
    assert "camera/front_camera/00.jpg" in scan_raw_files(seq).files

    new_jpeg = _jpeg(200)
    (elsewhere / "00.jpg").write_bytes(new_jpeg)  # behind the link

    assert hash_raw_log(seq) != before
    assert hash_raw_location(str(tmp_path / "raw")) != location_before
    (frame,) = read_frames("pandaset", seq)  # the build reads the new bytes, and the hash saw them
    assert frame.cameras["front_camera"].jpeg == new_jpeg


def test_retargeting_a_link_changes_the_hash_even_with_the_same_bytes(tmp_path: Path) -> None:
    seq = _write_sequence(tmp_path / "001")
    first = tmp_path / "disk-a" / "front_camera"
    _move_and_link(seq / "camera" / "front_camera", first)
    before = hash_raw_log(seq)
    second = tmp_path / "disk-b" / "front_camera"
    shutil.copytree(first, second)
    os.unlink(seq / "camera" / "front_camera")
    os.symlink(second, seq / "camera" / "front_camera")
    assert hash_raw_log(seq) != before


def test_symlink_free_hash_is_unchanged_format(tmp_path: Path) -> None:
    """Ordinary logs hash as before: sha256 over sorted `relpath NUL sha256(bytes) LF`."""
    import hashlib

    seq = _write_sequence(tmp_path / "001")
    lines = "".join(
        f"{p.relative_to(seq).as_posix()}\0{hashlib.sha256(p.read_bytes()).hexdigest()}\n"
        for p in sorted(seq.rglob("*"), key=lambda p: p.relative_to(seq).as_posix())
        if p.is_file()
    )
    expected = hashlib.sha256(lines.encode()).hexdigest()
    assert hash_listing(scan_raw_files(seq)) == hash_raw_location(str(seq)) == expected


# ----------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("behind_link", [False, True])
def test_fifo_in_a_camera_folder_is_one_line_error_without_hanging(
    tmp_path: Path, behind_link: bool
) -> None:
    seq = _write_sequence(tmp_path / "001")
    jpg = seq / "camera" / "front_camera" / "00.jpg"
    jpg.unlink()
    fifo = tmp_path / "elsewhere.fifo" if behind_link else jpg
    os.mkfifo(fifo)
    if behind_link:
        os.symlink(fifo, jpg)
    for action in (hash_raw_log, load_pandaset_log):
        with _deadline(10), pytest.raises(UserError) as caught:
            action(seq)
        line = format_user_error(caught.value)
        assert "\n" not in line and "FIFO" in line and str(jpg) in line, line


def test_dangling_link_and_link_loop_are_one_line_errors(tmp_path: Path) -> None:
    seq = _write_sequence(tmp_path / "001")
    os.symlink(tmp_path / "gone", seq / "camera" / "front_camera" / "01.jpg")
    with pytest.raises(UserError, match="dangling symbolic link") as caught:
        hash_raw_log(seq)
    assert str(seq / "camera" / "front_camera" / "01.jpg") in format_user_error(caught.value)
    os.unlink(seq / "camera" / "front_camera" / "01.jpg")
    os.symlink("../..", seq / "camera" / "front_camera" / "up")  # back to the sequence folder
    with pytest.raises(UserError, match="loop"):
        hash_raw_log(seq)
    with pytest.raises(UserError, match="loop"):
        load_pandaset_log(seq)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("[" * 100_000, "nested deeper than 64"), ("[" * 100 + "]" * 100, "nested deeper than 64")],
)
def test_deeply_nested_json_is_one_line_error_naming_the_file(
    tmp_path: Path, text: str, expected: str
) -> None:
    seq = _write_sequence(tmp_path / "001")
    poses = seq / "camera" / "left_camera" / "poses.json"
    poses.write_text(text)
    with pytest.raises(FrameError) as caught:
        load_pandaset_log(seq)
    line = format_user_error(caught.value)
    assert "\n" not in line and str(poses) in line and expected in line, line
    assert caught.value.reason == "corrupt_metadata"


def test_deeply_nested_synthetic_metadata_is_one_line_error(tmp_path: Path) -> None:
    from platform_lib.sources.synthetic import SyntheticConfig, write_synthetic_logs
    from platform_lib.sources.synthetic_io import load_synthetic_log

    write_synthetic_logs(SyntheticConfig(num_logs=1, frames_per_log=1), tmp_path)
    log = tmp_path / "synth-0000"
    (log / "calib.json").write_text("{" + '"a":{' * 50_000)
    with pytest.raises(FrameError) as caught:
        load_synthetic_log(log)
    line = format_user_error(caught.value)
    assert "\n" not in line and str(log / "calib.json") in line, line


# ----------------------------------------------------------------------------- log ids


def test_identical_sequences_under_two_names_get_distinct_parts(tmp_path: Path) -> None:
    from platform_lib.shards.build import BuildConfig
    from platform_lib.shards.merge import build_part, merge_parts

    a = _write_sequence(tmp_path / "raw" / "a")
    b = tmp_path / "raw" / "b"
    shutil.copytree(a, b)
    assert hash_raw_log(a) != hash_raw_log(b)
    config = BuildConfig(split="by_frame_range", val_frames_per_log=0)
    store = str(tmp_path / "parts")
    parts = [build_part("pandaset", log, config, store=store) for log in (a, b)]
    assert parts[0].location != parts[1].location and all(p.built for p in parts)
    merged = merge_parts([p.location for p in parts], tmp_path / "ds", config, source="pandaset")
    assert [e.log_id for e in merged.source_logs] == ["a", "b"]


def test_renamed_sequence_gets_its_new_log_id(tmp_path: Path) -> None:
    from platform_lib.shards.build import BuildConfig
    from platform_lib.shards.manifest import load_manifest
    from platform_lib.shards.merge import build_part

    config = BuildConfig(split="by_frame_range", val_frames_per_log=0)
    store = str(tmp_path / "parts")
    old = _write_sequence(tmp_path / "raw" / "017")
    first = build_part("pandaset", old, config, store=store)
    new = tmp_path / "raw" / "018"
    old.rename(new)
    second = build_part("pandaset", new, config, store=store)
    assert second.built and second.location != first.location
    assert [e.log_id for e in load_manifest(second.location).source_logs] == ["018"]


def test_log_location_hash_is_the_log_hash(tmp_path: Path) -> None:
    from platform_lib.sources.hashing import check_raw_logs_unchanged, hash_log_location

    seq = _write_sequence(tmp_path / "001")
    assert hash_log_location(str(seq)) == hash_log_location(seq.as_uri()) == hash_raw_log(seq)
    before = hash_raw_log(seq)
    check_raw_logs_unchanged(str(seq), before)
    (seq / "lidar" / "timestamps.json").write_text("[0.5]")
    with pytest.raises(UserError, match="raw logs changed"):
        check_raw_logs_unchanged(str(seq), before)


# ----------------------------------------------------------------------------- property

#: Paths (relative to the sequence) that a generated tree may move away and link back.
_LINKABLE = (
    "lidar",
    "lidar/00.pkl.gz",
    "lidar/poses.json",
    *(f"camera/{name}" for name in CAMERA_NAMES),
    "camera/front_camera/00.jpg",
    "camera/back_camera/intrinsics.json",
    "camera",
)
_HOW = st.sampled_from(["plain", "absolute", "relative", "chain", "inside"])

_opened: list[str] | None = None


def _record_opens(event: str, args: tuple) -> None:
    if event == "open" and _opened is not None and isinstance(args[0], (str, bytes, os.PathLike)):
        _opened.append(os.fsdecode(args[0]))


sys.addaudithook(_record_opens)


def _link_tree(root: Path, seq: Path, choices: dict[str, str]) -> None:
    """Move the chosen entries out (or elsewhere inside the sequence) and link them back."""
    for rel, how in choices.items():
        path = seq / rel
        if how == "plain" or not os.path.lexists(path) or path.is_symlink():
            continue
        relative = how in ("relative", "inside")
        if any(p.is_symlink() for p in path.parents if seq in p.parents):
            relative = False  # below a linked folder: a relative link would resolve from there
        slug = rel.replace("/", "_")
        if how == "inside":
            _move_and_link(path, seq / "store" / slug, relative=relative)
        elif how == "chain":
            _move_and_link(path, root / "outside" / slug)
            hop = root / "hops" / slug
            hop.parent.mkdir(parents=True, exist_ok=True)
            os.rename(path, hop)  # path -> hop -> target
            os.symlink(hop, path)
        else:
            _move_and_link(path, root / "outside" / slug, relative=relative)


@settings(
    max_examples=25,
    deadline=5000,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    choices=st.dictionaries(st.sampled_from(_LINKABLE), _HOW, max_size=5),
    extras=st.lists(st.sampled_from([".hidden", "notes.txt", "camera/.DS_Store"]), max_size=3),
    poke=st.integers(min_value=0),
)
def test_every_file_the_reader_opens_is_hashed(choices, extras, poke) -> None:
    global _opened
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        seq = _write_sequence(root / "seq")
        for rel in extras:
            (seq / rel).write_text("tool state")
        _link_tree(root, seq, dict(sorted(choices.items(), key=lambda kv: kv[0].count("/"))))
        hashed = set(scan_raw_files(seq).files)
        before = hash_raw_log(seq)
        _opened = []
        try:
            frames = list(read_frames("pandaset", seq))
        finally:
            opened, _opened = _opened, None
        inside = [p for p in opened if p.startswith(tmp)]
        assert len(frames) == 1 and len(inside) >= 6 * 4 + 3
        for path in inside:
            rel = os.path.relpath(path, seq)
            assert rel in hashed, f"the reader opened {path}, which the hash does not cover"
        target = Path(os.path.realpath(sorted(set(inside))[poke % len(set(inside))]))
        with target.open("ab") as fh:
            fh.write(b"\0")  # any byte the reader read changes the hash
        assert hash_raw_log(seq) != before


def test_hidden_sequence_folders_are_neither_hashed_nor_read(tmp_path: Path) -> None:
    from platform_lib.sources.pandaset import list_pandaset_logs

    _write_sequence(tmp_path / "001")
    _write_sequence(tmp_path / ".001-backup", shade=10)
    assert [p.name for p in list_pandaset_logs(tmp_path)] == ["001"]
    assert not any(rel.startswith(".") for rel in scan_raw_files(tmp_path).files)


def test_hostile_pandaset_pickle_is_refused_without_running_code(pandaset_copy, tmp_path):
    """A lidar pkl.gz whose pickle calls os.system is a corrupt-frame error, and nothing runs."""
    import gzip
    import pickle

    from platform_lib.sources.frame import FrameError
    from platform_lib.sources.pandaset_files import load_pickled_frame
    from platform_lib.sources.raw_files import scan_raw_files

    marker = tmp_path / "ran"

    class Hostile:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    path = pandaset_copy / "lidar" / "01.pkl.gz"
    with gzip.open(path, "wb") as handle:
        pickle.dump(Hostile(), handle, protocol=2)
    files = scan_raw_files(pandaset_copy)
    with pytest.raises(FrameError) as caught:
        load_pickled_frame(path, files=files, reason="corrupt_lidar", log_id="002", frame_index=1)
    assert "refused global posix.system" in str(caught.value) and not marker.exists()
