"""The same registry code against a real `mlflow server` on 127.0.0.1 (MLFLOW_TRACKING_URI)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from platform_lib.mlflow_store import configure_mlflow, start_training_run
from platform_lib.models.catalog import build_model
from platform_lib.registry.lineage import Lineage
from platform_lib.registry.register import load_champion, register_model_version
from platform_lib.training.presets import get_preset
from tests.support.services import start_plain_mlflow, stop


@pytest.fixture
def mlflow_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mlflow_db):
    """A real `mlflow server` on 127.0.0.1 (SQLite store, artifacts in tmp_path/artifacts)."""
    proc, url = start_plain_mlflow(tmp_path, mlflow_db(tmp_path / "server.db"))
    try:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
        monkeypatch.setenv("DRIVETRAIN_HOME", str(tmp_path / "unused-home"))
        yield tmp_path
    finally:
        stop(proc)


def test_register_and_load_champion_through_a_server(mlflow_server: Path) -> None:
    client = configure_mlflow()
    run_id = start_training_run(client, run_name="server", tags={})
    torch.manual_seed(0)
    state = {
        k: v.detach().clone().contiguous()
        for k, v in build_model("bev_fusion_small").state_dict().items()
    }
    save_file(state, str(mlflow_server / "w.safetensors"))
    lineage = Lineage(
        dataset_hash="d",
        val_split_hash="v",
        raw_logs_hash="r",
        source_log_hashes="{}",
        code_version="test",
        config_hash="c",
        seed=0,
        flyte_execution_id="local",
    )
    reg = register_model_version(
        name="served",
        run_id=run_id,
        weights_path=mlflow_server / "w.safetensors",
        train_config=get_preset("small"),
        lineage=lineage,
        mean_iou=0.5,
        client=client,
    )
    assert reg.decision == "promoted:first"
    model, cfg = load_champion("served")
    assert cfg == get_preset("small")
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state.items())
    assert list((mlflow_server / "artifacts").rglob("model.safetensors"))  # on the server side
    assert not (mlflow_server / "unused-home" / "mlflow.db").exists()
