"""Fixtures for integration tests: real servers (moto S3), an isolated Flyte local cache, temp
dirs and MLflow store for pipeline runs."""

from __future__ import annotations

import collections
import re
import tempfile
from pathlib import Path

import pytest


@pytest.fixture
def pandaset_002(pandaset_root: Path) -> Path:
    """The 10-frame PandaSet sample next to the repo (../shared/data/pandaset/002)."""
    return pandaset_root / "002"


@pytest.fixture
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Isolate everything a pipeline run writes under `tmp_path`; return the environment.

    HOME (flytekit's local cache ~/.flyte/local-cache), TMPDIR (flytekit's raw outputs and the
    elastic run folders), DRIVETRAIN_HOME (MLflow store); MLFLOW_TRACKING_URI cleared. The same
    is set in this process (for workflows run in it).
    """
    from tests.support.pipeline import ISOLATED, isolated_environ

    env = isolated_environ(tmp_path)
    for key in ISOLATED:
        monkeypatch.setenv(key, env[key])
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "placeholder")  # recorded so teardown restores it
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    return env


@pytest.fixture
def registry_store(isolated_env: dict[str, str], mlflow_db) -> str:
    """An empty MLflow store where a run in `isolated_env` registers (`$DRIVETRAIN_HOME/mlflow.db`),
    copied from the session's migrated template; returns its URI.

    For tests whose subject is not the store's creation: they skip MLflow's schema migrations.
    test_pipeline_pandaset.py keeps a fresh home (the store created by the run, as on a new
    machine).
    """
    return mlflow_db(Path(isolated_env["DRIVETRAIN_HOME"]) / "mlflow.db")


@pytest.fixture
def local_flyte(isolated_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Run workflows in this process against a fresh local cache and raw-output folder."""
    from flytekit.core import local_cache
    from flytekit.core.context_manager import FlyteContextManager
    from flytekit.core.data_persistence import FileAccessProvider

    monkeypatch.setattr(local_cache, "CACHE_LOCATION", str(tmp_path / "home" / "flyte-cache"))
    monkeypatch.setattr(local_cache.LocalTaskCache, "_initialized", False)
    monkeypatch.setattr(local_cache.LocalTaskCache, "_cache", None, raising=False)
    access = FileAccessProvider(
        local_sandbox_dir=str(tmp_path / "flyte-sandbox"),
        raw_output_prefix=str(tmp_path / "flyte-raw"),
    )
    ctx = FlyteContextManager.current_context()
    with FlyteContextManager.with_context(ctx.with_file_access(access)):
        yield tmp_path


@pytest.fixture
def executions(monkeypatch: pytest.MonkeyPatch) -> collections.Counter:
    """Count real executions (cache misses) of every task of `training_pipeline`, by short name."""
    from workflows.training_pipeline import training_pipeline

    counts: collections.Counter = collections.Counter()
    for node in training_pipeline.nodes:
        entity = node.flyte_entity
        original, short = entity.sandbox_execute, entity.name.split(".")[-1]
        short = re.sub(r"^(map_.+)_[0-9a-f]{32}-arraynode$", r"\1", short)  # map tasks

        def counted(ctx, input_literal_map, _original=original, _name=short):
            counts[_name] += 1
            return _original(ctx, input_literal_map)

        monkeypatch.setattr(entity, "sandbox_execute", counted)
    return counts


@pytest.fixture
def parts_built(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Log ids whose part `build_log_part` really built (not found in the part store)."""
    import tasks.data

    built: list[str] = []

    def counting(*args, **kwargs):
        part = original(*args, **kwargs)
        if part.built:
            built.append(part.log_id)
        return part

    original = tasks.data.build_part
    monkeypatch.setattr(tasks.data, "build_part", counting)
    return built


@pytest.fixture
def moto_server(tmp_path: Path):
    """Start real moto S3 servers on 127.0.0.1: `start(env=None) -> (process, endpoint URL)`.

    `env` adds variables to the server's environment (see `tests.support.services.start_moto`).
    A test may stop a server itself (to test an outage); every server still running is stopped
    at teardown.
    """
    from tests.support.services import start_moto, stop

    started: list = []

    def start(env: dict[str, str] | None = None):
        proc, endpoint = start_moto(tmp_path / f"moto-{len(started)}.log", env=env)
        started.append(proc)
        return proc, endpoint

    yield start
    for proc in started:
        stop(proc)
