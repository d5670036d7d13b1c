"""Every user error of the `drivetrain` command is one line `error: <what> (<culprit>): <fix>`.

The traceback goes to $DRIVETRAIN_HOME/logs/errors.log, or to the terminal with --debug.
"""

from __future__ import annotations

import json
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
