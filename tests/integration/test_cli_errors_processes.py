"""CLI errors that need a process of their own: `--debug` through the console script, and a full
disk (a small tmpfs mounted for the test, root only); the rest is in tests/unit/test_cli_errors.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from platform_lib.cli import main


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DRIVETRAIN_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


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
