"""Fixtures for registry tests: an isolated, real MLflow store (SQLite) per test."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def mlflow_home(tmp_path_factory: pytest.TempPathFactory):
    """Point DRIVETRAIN_HOME at a temp folder and clear MLFLOW_TRACKING_URI (restored after).

    One store per test module (creating the SQLite schema takes seconds); tests use distinct
    run and model names.
    """
    home = tmp_path_factory.mktemp("drivetrain-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DRIVETRAIN_HOME", str(home))
        mp.setenv("MLFLOW_TRACKING_URI", "placeholder")  # recorded so teardown restores it
        mp.delenv("MLFLOW_TRACKING_URI")
        yield home
