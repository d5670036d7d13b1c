"""Model registration: versions with lineage tags, `candidate` / `champion` aliases, loading back.

A version's artifacts are data, never code: `model/model.safetensors` (the state dict) and
`model/config.json` (`{"format": "drivetrain-model/1", "train_config": {...}}`). `candidate`
moves to every new version; `champion` to the first version of a model, then only to one the
champion gate promotes (`registry.gate`: the paired rule against the champion it was compared
with, which must still be champion), else an operator promotes it with `promote_champion`.
The alias rules in full: docs/pipeline.md, "Lineage and the registry".
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlflow
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from platform_lib.errors import UserError
from platform_lib.mlflow_store import configure_mlflow, log_json, redact_values
from platform_lib.redact import redact
from platform_lib.registry.gate import ChampionGate, render_version_description
from platform_lib.registry.lineage import Lineage

__all__ = [
    "MODEL_FORMAT",
    "Registration",
    "current_champion",
    "download_model",
    "load_champion",
    "load_model_version",
    "promote_champion",
    "register_model_version",
    "resolve_model_name",
]

MODEL_FORMAT = "drivetrain-model/1"
_TAG_MAX = 5000  # characters MLflow stores per model-version tag


@dataclass(kw_only=True, frozen=True)
class Registration:
    """Outcome of `register_model_version`."""

    name: str
    """registered model name"""
    version: str
    """new model version number"""
    run_id: str
    """MLflow run holding the artifacts"""
    champion_version: str
    """version holding the `champion` alias after this registration"""
    decision: str
    """why the champion moved or stayed, e.g. "promoted:first", "kept:not_better" """
    page: str | None = None
    """local HTML page of the champion gate (decision, plots, per-slice table), if any"""

    @property
    def model_uri(self) -> str:
        """`models:/<name>/<version>` of the new version."""
        return f"models:/{self.name}/{self.version}"


def _safe_tags(lineage: Lineage) -> dict[str, str]:
    tags = lineage.to_tags()
    for key, value in tags.items():
        if len(value) > _TAG_MAX:  # many source logs: keep a digest, full list in lineage.json
            tags[key] = "sha256:" + hashlib.sha256(value.encode()).hexdigest()
    return tags


def resolve_model_name(model_name: str, source: str) -> str:
    """Return the registered model name of a pipeline run ("" names "drivetrain-bev-<source>").

    MLflow's rules (not blank, no "/" or ":", `mlflow.utils.validation._validate_model_name`)
    and the model URI's (no "@": `models:/<name>@<alias>`), checked before any work.

    Raises:
        UserError: the name breaks a rule (culprit `model_name`).
    """
    name = model_name or f"drivetrain-bev-{source}"
    bad = sorted({c for c in name if c in "/:@"})
    if name.strip() and not bad:
        return name
    what = f"contains {', '.join(map(repr, bad))}" if bad else "is blank"
    raise UserError(
        f"model name {name!r} {what}",
        "model_name",
        "use a name without '/', ':' or '@', e.g. drivetrain-bev-pandaset, or '' for "
        "drivetrain-bev-<source>",
    )


def current_champion(client: MlflowClient, name: str):
    """Return the model version holding alias `champion` of `name`, or None."""
    try:
        return client.get_model_version_by_alias(name, "champion")
    except MlflowException:
        return None


def register_model_version(
    *,
    name: str,
    run_id: str,
    weights_path: str | Path,
    train_config: Any,
    lineage: Lineage,
    mean_iou: float,
    gate: ChampionGate | None = None,
    client: MlflowClient | None = None,
) -> Registration:
    """Log the model artifacts to `run_id`, register a new version and move the aliases.

    Args:
        name: registered model name.
        run_id: MLflow run of the training (receives `model/` and `lineage.json`).
        weights_path: safetensors file with the network's state dict.
        train_config: the training config dataclass (stored as JSON, never pickled).
        lineage: tags of the version (`build_lineage`).
        mean_iou: validation mean IoU of this model on the split identified by
            `lineage.val_split_hash` (a tag; the champion rule is the gate's).
        gate: the champion gate's decision (`registry.gate`); its tags go on the version, its
            Markdown table and reasons in the version's description, its files under
            `promotion/` of the run. None: the champion stays unless there is
            none ("kept:not_compared").
        client: MLflow client; None: `configure_mlflow()`.

    Returns:
        The new version and where `champion` points now (see module docstring for the rules).

    Raises:
        FileNotFoundError: `weights_path` does not exist.
    """
    weights_path = Path(weights_path)
    if not weights_path.is_file():
        raise FileNotFoundError(f"weights {weights_path} do not exist: training produced no model")
    client = client or configure_mlflow()
    with tempfile.TemporaryDirectory() as tmp:  # one canonical artifact name
        staged = Path(tmp) / "model.safetensors"
        shutil.copyfile(weights_path, staged)
        client.log_artifact(run_id, str(staged), "model")
    config = {"format": MODEL_FORMAT, "train_config": train_config.to_dict()}
    log_json(client, run_id, config, "model/config.json")
    log_json(client, run_id, dataclasses.asdict(lineage), "lineage.json")
    try:
        client.create_registered_model(name)
    except MlflowException:
        client.get_registered_model(name)  # exists already (raises if something else broke)

    tags = redact_values(
        _safe_tags(lineage) | {"mean_iou": repr(float(mean_iou)), "weights": weights_path.name}
    )
    source = f"{client.get_run(run_id).info.artifact_uri}/model"
    version = client.create_model_version(name, source, run_id=run_id, tags=tags).version
    client.set_registered_model_alias(name, "candidate", version)

    champion = current_champion(client, name)
    if champion is None:
        decision = "promoted:first"
    elif gate is None:
        decision = "kept:not_compared"
    elif gate.compared_with != str(champion.version):  # another registration moved it meanwhile
        decision = "kept:champion_changed"
    else:
        decision = gate.decision
    if gate is not None:
        for path in gate.files:
            client.log_artifact(run_id, str(path), "promotion")
        for key, value in sorted(redact_values(gate.tags).items()):
            client.set_model_version_tag(name, version, key, value[:_TAG_MAX])
    if decision.startswith("promoted"):
        client.set_registered_model_alias(name, "champion", version)
    client.set_model_version_tag(name, version, "champion_decision", decision)
    if gate is not None:  # the MLflow UI renders it on the version's page
        description = render_version_description(gate.record, decision)
        client.update_model_version(name, version, description=redact(description))
    champion_version = version if decision.startswith("promoted") else champion.version
    page = gate.page if gate is not None else None
    return Registration(
        name=name,
        version=str(version),
        run_id=run_id,
        champion_version=str(champion_version),
        decision=decision,
        page=str(page) if page is not None else None,
    )


def promote_champion(name: str, version: str, client: MlflowClient | None = None) -> None:
    """Move alias `champion` of `name` to `version` (an operator's explicit decision)."""
    client = client or configure_mlflow()
    client.get_model_version(name, version)  # raises if it does not exist
    client.set_registered_model_alias(name, "champion", version)
    client.set_model_version_tag(name, version, "champion_decision", "promoted:manual")


def download_model(model_uri: str, dst: str | Path | None = None) -> Path:
    """Download `model/` of a registry URI (e.g. `models:/drivetrain-bev@champion`).

    Returns:
        Local folder holding `model.safetensors` and `config.json`.

    Raises:
        ValueError: the artifacts are not in the drivetrain model format.
    """
    configure_mlflow()
    local = Path(mlflow.artifacts.download_artifacts(model_uri, dst_path=str(dst) if dst else None))
    config_path = local / "config.json"
    if not (local / "model.safetensors").is_file() or not config_path.is_file():
        raise ValueError(
            f"{model_uri} ({local}) lacks model.safetensors or config.json: not a drivetrain model"
        )
    fmt = json.loads(config_path.read_text())["format"]
    if fmt != MODEL_FORMAT:
        raise ValueError(f"{model_uri} has model format {fmt!r}; this code reads {MODEL_FORMAT!r}")
    return local


def load_model_version(model_uri: str) -> tuple[Any, Any, Path]:
    """Load a registered model from its safetensors weights and JSON config.

    Returns:
        (model in eval mode on CPU, TrainConfig, local folder with the artifacts).
    """
    from safetensors.torch import load_file

    from platform_lib.models.catalog import build_model
    from platform_lib.training.config import TrainConfig

    local = download_model(model_uri)
    cfg = TrainConfig.from_dict(json.loads((local / "config.json").read_text())["train_config"])
    model = build_model(cfg.model.name)
    model.load_state_dict(load_file(local / "model.safetensors"), strict=True)
    return model.eval(), cfg, local


def load_champion(name: str) -> tuple[Any, Any]:
    """Load `models:/<name>@champion` (safetensors weights, no unpickling).

    Returns:
        (model in eval mode on CPU, TrainConfig).
    """
    model, cfg, _ = load_model_version(f"models:/{name}@champion")
    return model, cfg
