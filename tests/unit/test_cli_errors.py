"""Every user error of the `drivetrain` command is one line `error: <what> (<culprit>): <fix>`.

The traceback goes to $DRIVETRAIN_HOME/logs/errors.log, or to the terminal with --debug.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from platform_lib.cli import main


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DRIVETRAIN_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("error: ") and "Traceback" not in err[0]
    return err[0]


@pytest.mark.parametrize("command", ["inspect", "validate"])
def test_missing_dataset_folder(command, tmp_path, capsys, _home):
    missing = tmp_path / "no-such-dataset"
    assert main(["data", command, str(missing)]) == 1
    assert _one_line(capsys) == (
        f"error: dataset folder does not exist ({missing}): pass the --output "
        "folder of `drivetrain data build` (or a dataset URL)"
    )
    assert "Traceback" in (_home / "logs" / "errors.log").read_text()


def test_missing_input_folder(tmp_path, capsys):
    missing = tmp_path / "no-logs"
    assert (
        main(
            [
                "data",
                "build",
                "--source",
                "pandaset",
                "--input",
                str(missing),
                "--output",
                str(tmp_path / "ds"),
            ]
        )
        == 1
    )
    assert (
        _one_line(capsys)
        == f"error: raw-log folder does not exist ({missing}): pass --input a folder of pandaset logs"
    )


def test_one_pandaset_sequence_gets_val_frames_by_default(pandaset_copy, tmp_path, capsys):
    assert (
        main(
            [
                "data",
                "build",
                "--source",
                "pandaset",
                "--input",
                str(pandaset_copy),
                "--output",
                str(tmp_path / "ds"),
            ]
        )
        == 0
    )
    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    assert manifest["splits"]["method"] == "by_frame_range"
    assert manifest["splits"]["counts"] == {"train": 8, "val": 2}
    assert "warning" not in capsys.readouterr().err


def test_empty_val_split_warns_naming_the_split_option(pandaset_copy, tmp_path, capsys):
    assert (
        main(
            [
                "data",
                "build",
                "--source",
                "pandaset",
                "--split",
                "by_log",
                "--input",
                str(pandaset_copy),
                "--output",
                str(tmp_path / "ds"),
            ]
        )
        == 0
    )
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning")]
    assert warnings == [
        "warning: split 'val' is empty (split by_log, counts {'train': 10, 'val': 0}) "
        "(--split): split by frame range instead (split=by_frame_range, the last "
        "val_frames_per_log frames of every log go to val) or give more logs "
        "(val_fraction of them go to val)"
    ]


def test_bad_jpeg_names_quarantine_which_works(pandaset_copy, tmp_path, capsys):
    (pandaset_copy / "camera" / "front_camera" / "03.jpg").write_bytes(b"not a jpeg")
    args = ["data", "build", "--source", "pandaset", "--input", str(pandaset_copy)]
    assert main([*args, "--output", str(tmp_path / "a")]) == 1
    line = _one_line(capsys)
    assert (
        line.startswith("error: 1 bad frame(s) (")
        and f"({pandaset_copy}): fix or remove those files, or rebuild with --quarantine" in line
    )
    assert main([*args, "--output", str(tmp_path / "b"), "--quarantine"]) == 0
    assert "quarantined 1 frame(s)" in capsys.readouterr().out


def test_debug_shows_the_traceback(tmp_path):
    missing = tmp_path / "nope"
    result = subprocess.run(
        [Path(sys.executable).parent / "drivetrain", "--debug", "data", "inspect", str(missing)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1 and "Traceback (most recent call last)" in result.stderr
    assert "UserError: dataset folder does not exist" in result.stderr
    plain = subprocess.run(
        [Path(sys.executable).parent / "drivetrain", "data", "inspect", str(missing)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        plain.returncode == 1 and plain.stderr.count("\n") == 1 and "Traceback" not in plain.stderr
    )


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 1 MiB tmpfs (needs root; skipped elsewhere)."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {made.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def test_disk_full_during_build(small_disk, tmp_path, capsys):
    code = main(
        [
            "data",
            "build",
            "--source",
            "synthetic",
            "--num-logs",
            "2",
            "--frames-per-log",
            "4",
            "--input",
            str(tmp_path / "raw"),
            "--output",
            str(small_disk / "ds"),
        ]
    )
    assert code == 1
    line = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error")]
    assert len(line) == 1 and line[0].startswith(
        "error: disk full while writing (No space left on device) ("
    )
    assert str(small_disk) in line[0] and line[0].endswith(
        "): free space on that disk or write the output to a larger one (--output, TMPDIR)"
    )
