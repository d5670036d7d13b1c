"""Fixtures for tests/unit and tests/integration: the real PandaSet sample (../shared/data/pandaset
beside the repo), small synthetic raw logs, a node cache, an isolated MLflow store and S3 settings.

Functions that tests call with arguments (dataset and frame makers, service starters) live in
tests/support/; server fixtures live in tests/integration/conftest.py.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Fuzzing budget (tests/unit/test_fuzz_*.py): CI runs a fixed, derandomised set of examples
# (the same every run, a few seconds per file); `DRIVETRAIN_FUZZ=long make test-unit` runs a
# longer random search (docs/security.md).
settings.register_profile(
    "ci",
    max_examples=60,
    derandomize=True,
    database=None,
    deadline=2000,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile(
    "long",
    max_examples=5000,
    deadline=10_000,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile(os.environ.get("DRIVETRAIN_FUZZ", "ci"))

#: `shared/` lies beside the repository root (CI clones the repo with shared/ next to it).
SHARED_DIR = Path(__file__).resolve().parents[1].parent / "shared"
PANDASET_DIR = SHARED_DIR / "data" / "pandaset"


@pytest.fixture(scope="session", autouse=True)
def node_cache_dir(tmp_path_factory) -> Path:
    """A per-session node cache (shard downloads, shard verification records), never ~/.cache."""
    path = tmp_path_factory.mktemp("node-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DRIVETRAIN_CACHE", str(path))
        yield path


@pytest.fixture(autouse=True)
def fresh_s3_filesystems():
    """No s3 filesystem outlives its test: fsspec caches instances by their arguments, not by
    the endpoint and credentials they read from the environment the test set."""
    yield
    s3fs = sys.modules.get("s3fs")
    if s3fs is not None:
        s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture(scope="session")
def pandaset_root() -> Path:
    """PandaSet root holding sequence 002 (10 frames); skips when the sample is absent."""
    if not (PANDASET_DIR / "002" / "lidar" / "poses.json").is_file():
        pytest.skip(
            f"PandaSet sample not found at {PANDASET_DIR / '002'} (expected the shared/ "
            "folder beside the repository root)"
        )
    return PANDASET_DIR


@pytest.fixture
def pandaset_copy(pandaset_root: Path, tmp_path: Path) -> Path:
    """A writable copy of sequence 002 under tmp_path (for corrupting it in bad-input tests)."""
    copy = tmp_path / "pandaset" / "002"
    shutil.copytree(pandaset_root / "002", copy)
    return copy


@pytest.fixture(scope="session")
def synthetic_root(tmp_path_factory) -> Path:
    """Synthetic raw logs of the default small config (4 logs x 8 frames, 160x96 images)."""
    from platform_lib.sources.synthetic import SyntheticConfig, write_synthetic_logs

    root = tmp_path_factory.mktemp("synthetic-raw")
    write_synthetic_logs(SyntheticConfig(), root, progress=False)
    return root


@pytest.fixture(scope="session")
def golden_dataset(tmp_path_factory) -> Path:
    """The golden-loss run's dataset (2 synthetic logs x 6 frames, split by frame range; see
    tests/support/golden_run.py), built once per session; tests only read it."""
    from platform_lib.zoo.dataset import build_golden_dataset

    return build_golden_dataset(tmp_path_factory.mktemp("golden"))


@pytest.fixture
def s3_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Point boto/s3fs at loopback only: test credentials, no ~/.aws files, no instance metadata.

    Yields a function `use(endpoint)` that sets the endpoint (and clears fsspec's cache of s3
    filesystem instances, which remember their endpoint).
    """
    import fsspec

    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-credentials"),
        "AWS_CONFIG_FILE": str(tmp_path / "no-config"),
    }.items():
        monkeypatch.setenv(key, value)

    def use(endpoint: str) -> None:
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        monkeypatch.setenv("FSSPEC_S3_ENDPOINT_URL", endpoint)
        fsspec.filesystem("s3").clear_instance_cache()

    yield use


@pytest.fixture(scope="session")
def mlflow_db(tmp_path_factory: pytest.TempPathFactory):
    """Make a real, empty MLflow SQLite store: `make(path) -> "sqlite:///<path>"`.

    MLflow creates its schema by running every migration (seconds); that happens once per
    session in a template database, which `make` copies to `path` (milliseconds). The copy is
    what a fresh store is: same schema, no experiments but the Default one.
    """
    template = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"

    def make(path: Path) -> str:
        if not template.exists():
            from mlflow.tracking import MlflowClient

            MlflowClient(tracking_uri=f"sqlite:///{template}").search_experiments()
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(template, path)
        return f"sqlite:///{path}"

    return make


@pytest.fixture(scope="module")
def mlflow_home(tmp_path_factory: pytest.TempPathFactory, mlflow_db):
    """Point DRIVETRAIN_HOME at a temp folder holding an empty MLflow store (`mlflow.db`, the
    default store there) and clear MLFLOW_TRACKING_URI (restored after).

    One store per test module; tests use distinct run and model names.
    """
    home = tmp_path_factory.mktemp("drivetrain-home")
    mlflow_db(home / "mlflow.db")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DRIVETRAIN_HOME", str(home))
        mp.setenv("MLFLOW_TRACKING_URI", "placeholder")  # recorded so teardown restores it
        mp.delenv("MLFLOW_TRACKING_URI")
        yield home


@pytest.fixture
def trained():
    """An FSDP-sharded 2-layer model after one AdamW step (so the optimizer has state), world size 1."""
    import torch

    from platform_lib.training.distributed import destroy_distributed, init_distributed
    from platform_lib.training.parallel import apply_fsdp, build_mesh, build_mp_policy

    ctx = init_distributed("gloo")
    torch.manual_seed(0)
    model = apply_fsdp(
        torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Linear(32, 1)),
        build_mesh(ctx),
        build_mp_policy(False),
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.randn(8, 32)).sum().backward()
    optimizer.step()
    yield model, optimizer
    destroy_distributed(ctx)


@pytest.fixture(scope="module")
def synthetic_builds(tmp_path_factory) -> Path:
    """Two independent synthetic raw generations and builds (raw-a/ds-a, raw-b/ds-b), same seed."""
    from platform_lib.cli import main

    base = tmp_path_factory.mktemp("cli")
    synth = ["--source", "synthetic", "--num-logs", "2", "--frames-per-log", "3", "--seed", "7"]
    for name in ("a", "b"):
        code = main(
            [
                "data",
                "build",
                *synth,
                "--input",
                str(base / f"raw-{name}"),
                "--output",
                str(base / f"ds-{name}"),
                "--shard-size-mb",
                "0.3",
            ]
        )
        assert code == 0
    return base
