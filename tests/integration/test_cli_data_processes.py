"""`drivetrain data build` with worker processes and the installed console script, run as processes;
the in-process CLI tests are in tests/unit/test_cli_data.py.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from platform_lib.cli import build_parser, main

SYNTH = ["--source", "synthetic", "--num-logs", "2", "--frames-per-log", "3", "--seed", "7"]


def _hashes(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_parallel_build_gives_the_same_bytes(synthetic_builds, tmp_path):
    code = main(
        [
            "data",
            "build",
            *SYNTH,
            "--input",
            str(synthetic_builds / "raw-a"),
            "--output",
            str(tmp_path / "ds"),
            "--shard-size-mb",
            "0.3",
            "--workers",
            "2",
        ]
    )
    assert code == 0
    assert _hashes(tmp_path / "ds") == _hashes(synthetic_builds / "ds-a")


def test_parser_has_data_group_and_console_script():
    parser = build_parser()
    args = parser.parse_args(["data", "validate", "/x"])
    assert args.group == "data" and args.command == "validate"
    result = subprocess.run(
        [Path(sys.executable).parent / "drivetrain", "data", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and "build" in result.stdout and "validate" in result.stdout


def test_help_does_not_import_torch_or_pyarrow():
    """`drivetrain --help` must start fast: the command modules import heavy deps lazily."""
    code = (
        "import sys; from platform_lib.cli import build_parser; build_parser(); "
        "print(sorted(m for m in ('torch', 'pyarrow', 'pandera') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def _run_on_a_terminal(args: list[str]) -> str:
    """Run `drivetrain ARGS` with stderr on a real pseudo-terminal (100x40); return its text."""
    import fcntl
    import os
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "platform_lib.cli", *args],
        stdout=subprocess.DEVNULL,
        stderr=slave,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert proc.wait(timeout=120) == 0
    return b"".join(chunks).decode(errors="replace")


def test_build_shows_progress_on_a_terminal_only(synthetic_builds, tmp_path, capsys):
    raw = str(synthetic_builds / "raw-a")
    shown = _run_on_a_terminal(
        ["data", "build", "--source", "synthetic", "--input", raw, "--output", str(tmp_path / "t")]
    )
    assert "hash raw logs: 100%" in shown and "2/2" in shown, shown  # a bar over the logs
    assert "build: 6frame" in shown and "synth-0001" in shown, shown  # frames, current log
    code = main(["data", "build", *SYNTH, "--input", raw, "--output", str(tmp_path / "p")])
    assert code == 0
    err = capsys.readouterr().err
    assert "\r" not in err and "hash raw logs" not in err and "build:" not in err, err
