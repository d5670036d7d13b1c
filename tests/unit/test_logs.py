"""`report_user_error`: one line on stderr, the traceback (redacted) in $DRIVETRAIN_HOME/logs/errors.log only."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from platform_lib.errors import UserError
from platform_lib.logs import report_user_error, setup_logging


def _raised(error: BaseException) -> BaseException:
    try:
        raise error
    except BaseException as caught:  # noqa: BLE001 - a real traceback to log
        return caught


def test_one_line_on_stderr_and_the_redacted_traceback_in_the_current_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, caplog
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "s3cr3t-value")
    setup_logging()
    for name in ("first", "second"):  # the log follows DRIVETRAIN_HOME from call to call
        monkeypatch.setenv("DRIVETRAIN_HOME", str(tmp_path / name))
        error = _raised(UserError("bad s3cr3t-value", "input", "fix"))
        line, path = report_user_error(error, error, f"drivetrain ['{name}']")
        assert line == "error: bad *** (input): fix"
        assert capsys.readouterr().err == line + "\n"
        assert path == tmp_path / name / "logs" / "errors.log"
        text = path.read_text()
        assert text.startswith("--- ") and f"drivetrain ['{name}']" in text
        assert "Traceback (most recent call last)" in text and "raise error" in text
        assert "s3cr3t-value" not in text and "UserError: bad *** (input): fix" in text
    assert (tmp_path / "first" / "logs" / "errors.log").read_text().count("Traceback") == 1
    assert not [r for r in caplog.records if r.name == "drivetrain.errors"]  # never the terminal


def test_an_unwritable_home_still_prints_the_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    home = tmp_path / "home"
    home.write_text("a file, not a folder")
    monkeypatch.setenv("DRIVETRAIN_HOME", str(home))
    error = _raised(UserError("bad", "input", "fix"))
    assert report_user_error(error, error, "drivetrain []") == ("error: bad (input): fix", None)
    assert capsys.readouterr().err == "error: bad (input): fix\n"
    assert not logging.getLogger("drivetrain.errors").handlers
