"""Model registration: lineage tags, candidate/champion aliases, safetensors round trip."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from platform_lib.mlflow_store import configure_mlflow, start_training_run
from platform_lib.models.catalog import build_model
from platform_lib.registry.gate import ChampionGate
from platform_lib.registry.lineage import Lineage
from platform_lib.registry.register import (
    download_model,
    load_champion,
    load_model_version,
    promote_champion,
    register_model_version,
)
from platform_lib.training.config import hash_config
from platform_lib.training.presets import get_preset


def _lineage(val: str = "v1", **changes) -> Lineage:
    base = Lineage(
        dataset_hash="d" * 64,
        val_split_hash=val,
        raw_logs_hash="r" * 64,
        source_log_hashes='{"002":"abc"}',
        code_version="test",
        config_hash=hash_config(get_preset("small")),
        seed=0,
        flyte_execution_id="local",
    )
    return dataclasses.replace(base, **changes)


def _weights(tmp_path: Path, seed: int) -> tuple[Path, dict[str, torch.Tensor]]:
    torch.manual_seed(seed)
    state = {
        k: v.detach().clone().contiguous()
        for k, v in build_model("bev_fusion_small").state_dict().items()
    }
    path = tmp_path / f"weights-{seed}.safetensors"
    save_file(state, str(path))
    return path, state


def _register(
    name: str,
    tmp_path: Path,
    mean_iou: float,
    seed: int = 0,
    val: str = "v1",
    gate: ChampionGate | None = None,
):
    client = configure_mlflow()
    run_id = start_training_run(client, run_name=name, tags={})
    weights, _ = _weights(tmp_path, seed)
    return register_model_version(
        name=name,
        run_id=run_id,
        weights_path=weights,
        train_config=get_preset("small"),
        lineage=_lineage(val),
        mean_iou=mean_iou,
        gate=gate,
        client=client,
    )


def _gate(decision: str, compared_with: str | None, tmp_path: Path) -> ChampionGate:
    page = tmp_path / "promotion.html"
    page.write_text(f"<p>{decision}</p>")
    tags = {"champion_decision": decision, "diff.all.iou/mean/all": "insufficient"}
    return ChampionGate(decision=decision, compared_with=compared_with, tags=tags, files=(page,))


def test_champion_moves_only_when_the_gate_promotes_against_the_current_champion(
    mlflow_home: Path, tmp_path: Path
) -> None:
    first = _register("m-gate", tmp_path, 0.1, gate=_gate("promoted:first", None, tmp_path))
    assert (first.version, first.decision, first.champion_version) == ("1", "promoted:first", "1")
    assert first.page == str(tmp_path / "promotion.html")
    high_iou = _register("m-gate", tmp_path, 0.9, gate=_gate("kept:insufficient", "1", tmp_path))
    assert (high_iou.decision, high_iou.champion_version) == ("kept:insufficient", "1")
    unchecked = _register("m-gate", tmp_path, 0.9)  # no gate: the champion stays
    assert (unchecked.decision, unchecked.champion_version) == ("kept:not_compared", "1")
    better = _register("m-gate", tmp_path, 0.2, gate=_gate("promoted:better", "1", tmp_path))
    assert (better.version, better.decision, better.champion_version) == (
        "4",
        "promoted:better",
        "4",
    )
    stale = _register("m-gate", tmp_path, 0.3, gate=_gate("promoted:better", "1", tmp_path))
    assert (stale.decision, stale.champion_version) == ("kept:champion_changed", "4")

    client = configure_mlflow()
    assert str(client.get_model_version_by_alias("m-gate", "champion").version) == "4"
    assert str(client.get_model_version_by_alias("m-gate", "candidate").version) == "5"
    tags = client.get_model_version("m-gate", "2").tags
    assert tags["champion_decision"] == "kept:insufficient"
    assert tags["diff.all.iou/mean/all"] == "insufficient"
    assert client.get_model_version("m-gate", "5").tags["champion_decision"] == (
        "kept:champion_changed"
    )
    artifacts = [a.path for a in client.list_artifacts(better.run_id, "promotion")]
    assert artifacts == ["promotion/promotion.html"]


def test_operator_promotes_explicitly(mlflow_home: Path, tmp_path: Path) -> None:
    _register("m-aliases", tmp_path, 0.30)
    _register("m-aliases", tmp_path, 0.99, val="v2")
    client = configure_mlflow()
    tags = client.get_model_version("m-aliases", "2").tags
    assert tags["champion_decision"] == "kept:not_compared" and tags["val_split_hash"] == "v2"
    promote_champion("m-aliases", "2")
    assert str(client.get_model_version_by_alias("m-aliases", "champion").version) == "2"
    assert client.get_model_version("m-aliases", "2").tags["champion_decision"] == "promoted:manual"


def test_version_carries_lineage_tags(mlflow_home: Path, tmp_path: Path) -> None:
    reg = _register("m-tags", tmp_path, 0.4)
    tags = configure_mlflow().get_model_version("m-tags", reg.version).tags
    expected = _lineage().to_tags()
    assert {k: tags[k] for k in expected} == expected
    assert float(tags["mean_iou"]) == 0.4
    assert reg.model_uri == f"models:/m-tags/{reg.version}"


def test_champion_loads_back_from_safetensors(mlflow_home: Path, tmp_path: Path) -> None:
    _register("m-load", tmp_path, 0.1, seed=1)
    promoted = _gate("promoted:better", "1", tmp_path)
    _register("m-load", tmp_path, 0.2, seed=2, gate=promoted)  # champion: weights of seed 2
    _, expected = _weights(tmp_path, 2)
    model, cfg = load_champion("m-load")
    assert cfg == get_preset("small")
    got = model.state_dict()
    assert set(got) == set(expected)
    assert all(torch.equal(got[k], expected[k]) for k in expected)
    _, _, local = load_model_version("models:/m-load/1")
    assert sorted(p.name for p in local.iterdir()) == ["config.json", "model.safetensors"]


def test_register_and_download_refuse_bad_input(mlflow_home: Path, tmp_path: Path) -> None:
    client = configure_mlflow()
    run_id = start_training_run(client, run_name="bad", tags={})
    with pytest.raises(FileNotFoundError, match="training produced no model"):
        register_model_version(
            name="m-bad",
            run_id=run_id,
            weights_path=tmp_path / "none",
            train_config=get_preset("small"),
            lineage=_lineage(),
            mean_iou=0.1,
            client=client,
        )
    client.log_dict(run_id, {"not": "a model"}, "junk/config.json")
    client.create_registered_model("m-junk")
    source = f"{client.get_run(run_id).info.artifact_uri}/junk"
    client.create_model_version("m-junk", source, run_id=run_id)
    with pytest.raises(ValueError, match="not a drivetrain model"):
        download_model("models:/m-junk/1")
