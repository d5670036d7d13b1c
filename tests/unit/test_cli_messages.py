"""The `drivetrain data` errors a new user met name the right thing (TRIAL2, finding F).

Each bad input is one line `error: <what> (<culprit>): <what to do>` whose culprit is what the
user must fix: a file given as `--input` is "not a folder" (it was "does not exist"); a file or
FIFO given to `data inspect` is "not a dataset folder" (it was "rebuild it with --output
<file>"); a part store URL with credentials, or a part store refusing connections, names the
part store with the password masked (it named the `--input` folder); an argparse error is one
line with a hint to `--help` (it was a dozen lines of usage first). errors.log, which holds the
tracebacks, is created 0600 (it was 0644).
"""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from platform_lib.cli import main

pytestmark = pytest.mark.timeout(60)


def _error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    errors = [line for line in err if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in "\n".join(err), err
    return errors[0]


@pytest.mark.parametrize(
    "argv",
    [
        ["data", "build", "--source", "synthetic", "--input", "raw", "--output"],
        ["data", "build", "--source", "nope", "--input", "raw", "--output", "out"],
        ["data", "bogus"],
    ],
)
def test_an_argparse_error_is_one_line_with_a_hint_to_help(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("error: ") and "usage:" not in err[0]
    assert err[0].endswith("--help`")


def test_an_argparse_error_masks_a_password_it_echoes(capsys):
    with pytest.raises(SystemExit):
        main(["data", "build", "--source", "s3://u:hunter2pw@h/x", "--input", "r", "--output", "o"])
    err = capsys.readouterr().err
    assert "hunter2pw" not in err and err.count("\n") == 1


@pytest.mark.parametrize("source", ["pandaset", "synthetic"])
def test_a_file_as_input_is_not_a_folder(source, tmp_path, capsys):
    file = tmp_path / "a-file"
    file.write_text("not logs\n")
    argv = ["data", "build", "--source", source, "--input", str(file), "--output"]
    assert main([*argv, str(tmp_path / "out")]) == 1
    line = _error_line(capsys)
    assert line.startswith("error: --input is not a folder") and f"({file})" in line
    assert "does not exist" not in line


@pytest.mark.parametrize("command", ["inspect", "validate"])
@pytest.mark.parametrize("kind", ["file", "fifo"])
def test_a_file_or_fifo_given_as_dataset_is_not_a_dataset_folder(command, kind, tmp_path, capsys):
    path = tmp_path / kind
    if kind == "fifo":
        os.mkfifo(path)  # never opened: no writer would make an open block
    else:
        path.write_text("{}\n")
    assert main(["data", command, str(path)]) == 1
    line = _error_line(capsys)
    assert line.startswith("error: not a dataset folder") and f"({path})" in line
    assert "rebuild it" not in line and "--output " + str(path) not in line


def _per_log_build(tmp_path: Path) -> list[str]:
    raw = tmp_path / "raw"
    argv = ["data", "build", "--source", "synthetic", "--input", str(raw), "--output"]
    return [*argv, str(tmp_path / "out"), "--parts", "per-log", "--num-logs", "1"]


def test_a_part_store_url_with_credentials_is_refused_naming_the_store_masked(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("DRIVETRAIN_PART_STORE", "s3://u:hunter2pw@127.0.0.1:9/parts")
    assert main(_per_log_build(tmp_path)) == 1
    line = _error_line(capsys)
    assert "hunter2pw" not in line
    assert "(part store s3://***@127.0.0.1:9/parts)" in line and "credentials" in line
    assert f"({tmp_path / 'raw'})" not in line


def test_a_part_store_refusing_connections_is_named_not_the_input(
    tmp_path, monkeypatch, capsys, s3_env
):
    with socket.socket() as probe:  # a loopback port nobody listens on: connections refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    s3_env(f"http://127.0.0.1:{port}")
    monkeypatch.setenv("DRIVETRAIN_STORAGE_RETRIES", "1")
    monkeypatch.setenv("DRIVETRAIN_PART_STORE", "s3://bucket/parts")
    assert main(_per_log_build(tmp_path)) == 1
    line = _error_line(capsys)
    assert "(part store s3://bucket/parts)" in line and "cannot reach storage" in line
    assert f"({tmp_path / 'raw'})" not in line


def test_errors_log_is_created_readable_by_its_owner_only(tmp_path, monkeypatch, capsys):
    home = tmp_path / "home"
    monkeypatch.setenv("DRIVETRAIN_HOME", str(home))
    assert main(["data", "inspect", str(tmp_path / "missing")]) == 1
    _error_line(capsys)
    log = home / "logs" / "errors.log"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert stat.S_IMODE(log.parent.stat().st_mode) == 0o700


def test_an_errors_log_written_before_the_rule_is_narrowed_to_0600(tmp_path, monkeypatch, capsys):
    home = tmp_path / "home"
    (home / "logs").mkdir(parents=True)
    (home / "logs" / "errors.log").write_text("--- an older entry\n")
    (home / "logs" / "errors.log").chmod(0o644)
    monkeypatch.setenv("DRIVETRAIN_HOME", str(home))
    assert main(["data", "inspect", str(tmp_path / "missing")]) == 1
    _error_line(capsys)
    log = home / "logs" / "errors.log"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert log.read_text().startswith("--- an older entry\n")  # appended to, not replaced
