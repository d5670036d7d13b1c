"""Record one finished training run in MLflow and register its model: the pipeline's last step.

`record_training_run` reads only files the earlier steps wrote (run folder of `train()`,
dataset manifest/index, evaluation table and per-frame counts), so it can be re-run on its own
for a past run. Before registering, the current champion is evaluated on the same frames and
the champion gate decides (`registry.gate`).
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

from mlflow.entities import RunTag
from mlflow.tracking import MlflowClient

from platform_lib.evaluation.promotion import PromotionConfig
from platform_lib.evaluation.slices import SliceSpec
from platform_lib.mlflow_store import (
    configure_mlflow,
    log_eval_table,
    log_params,
    log_redacted_file,
    log_step_metrics,
    redact_values,
    start_training_run,
)
from platform_lib.registry.gate import (
    DEFAULT_PROMOTION,
    ChampionGate,
    compute_masks,
    decide_champion,
    load_frame_counts,
)
from platform_lib.registry.lineage import build_lineage
from platform_lib.registry.register import (
    Registration,
    current_champion,
    load_model_version,
    register_model_version,
)
from platform_lib.shards.manifest import load_manifest
from platform_lib.telemetry.mlflow_goodput import load_streamed_run
from platform_lib.training.evaluate import FRAME_COUNTS_JSON, count_model_frames
from platform_lib.training.trained_on import load_trained_on

__all__ = ["record_training_run"]


def _eval_table(eval_json: Path) -> dict[str, Any]:
    data = json.loads(eval_json.read_text())
    keys = ("iou", "mean_iou", "baseline_iou", "baseline_mean_iou", "num_samples", "split")
    return {key: data[key] for key in keys} | {"table": data.get("table", [])}


def record_training_run(
    *,
    model_name: str,
    run_dir: str | Path,
    dataset_dir: str | Path,
    eval_json: str | Path,
    config: Any,
    raw_logs_hash: str = "",
    execution_id: str | None = None,
    code_version: str | None = None,
    promotion: PromotionConfig = DEFAULT_PROMOTION,
    slice_spec: SliceSpec | None = None,
    gate_dir: str | Path | None = None,
) -> Registration:
    """Log params, step metrics, eval table and lineage to the run's MLflow run; register the model.

    The MLflow run is the one training streamed to (`run_dir/mlflow_run.json`), else a new one.

    Args:
        model_name: registered model name.
        run_dir: output folder of `platform_lib.training.train` (model.safetensors,
            metrics.jsonl; trained_on.json: the dataset training read, a view or this one).
        dataset_dir: the dataset evaluated on (manifest.json, index.parquet): the one trained
            on, or the parent of the training view it read.
        eval_json: eval_metrics.json written by `platform_lib.training.evaluate`, with
            frame_counts.json beside it.
        config: the TrainConfig of the run.
        raw_logs_hash: content hash of the raw logs the dataset was built from.
        execution_id: Flyte execution id; from the environment (or "local") when None.
        code_version: version of the training code (see `resolve_code_version`).
        promotion: the champion gate's rule (primary metric, gated slices, margins, bootstrap).
        slice_spec: slices of the gate; None: the built-in `gate.DEFAULT_SLICE_SPEC`.
        gate_dir: where the gate's files go (promotion.json, plots, promotion.html); None: a
            temporary folder (then `Registration.page` is gone on return).

    Returns:
        The new model version and the champion decision.

    Raises:
        FileNotFoundError: a required file is missing (named).
        ValueError: the evaluation has no mean IoU (empty validation split).
        EvaluationError: the gate cannot pair the champion's frames with the new model's, or
            a slice needs an attribute the dataset lacks (one line each).
        UserError: the run trained on a dataset that is neither `dataset_dir` nor a view of
            it, or its trained_on.json is malformed.
    """
    run_dir, dataset_dir, eval_json = Path(run_dir), Path(dataset_dir), Path(eval_json)
    frame_counts = eval_json.parent / FRAME_COUNTS_JSON
    for path in (run_dir / "model.safetensors", run_dir / "metrics.jsonl", eval_json, frame_counts):
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} is missing: the training/evaluation step did not finish"
            )
    manifest = load_manifest(dataset_dir)
    table = _eval_table(eval_json)
    if table["mean_iou"] is None or not math.isfinite(table["mean_iou"]):
        raise ValueError(f"{eval_json} has no mean IoU: the validation split has nothing to score")
    lineage = build_lineage(
        manifest=manifest,
        dataset_dir=dataset_dir,
        config=config,
        seed=config.seed,
        raw_logs_hash=raw_logs_hash,
        execution_id=execution_id,
        code_version=code_version,
        trained_on=load_trained_on(run_dir),
    )
    client = configure_mlflow()
    tags = redact_values(lineage.to_tags() | {"model_name": model_name, "source": manifest.source})
    streamed = load_streamed_run(run_dir)  # training streamed metrics to this run: continue it
    run_id = streamed.get("run_id") if streamed else None
    if run_id:
        client.log_batch(run_id, tags=[RunTag(k, v) for k, v in sorted(tags.items())])
    else:
        run_id = start_training_run(
            client, run_name=f"{model_name}-{lineage.config_hash[:8]}", tags=tags
        )
    try:
        log_params(
            client,
            run_id,
            {
                "train": config.to_dict(),
                "dataset": {
                    "dataset_hash": manifest.dataset_hash,
                    "source": manifest.source,
                    "num_samples": manifest.num_samples,
                    "splits": dict(manifest.splits.counts),
                },
            },
        )
        log_step_metrics(client, run_id, run_dir / "metrics.jsonl")
        log_eval_table(client, run_id, table)
        log_redacted_file(client, run_id, eval_json, "eval")
        log_redacted_file(client, run_id, frame_counts, "eval")
        with tempfile.TemporaryDirectory() as tmp:
            gate = _champion_gate(
                client,
                model_name,
                frame_counts,
                dataset_dir,
                table["split"],
                promotion,
                slice_spec,
                Path(gate_dir) if gate_dir is not None else Path(tmp),
            )
            registration = register_model_version(
                name=model_name,
                run_id=run_id,
                weights_path=run_dir / "model.safetensors",
                train_config=config,
                lineage=lineage,
                mean_iou=table["mean_iou"],
                gate=gate,
                client=client,
            )
    except BaseException:
        client.set_terminated(run_id, status="FAILED")
        raise
    client.set_terminated(run_id, status="FINISHED")
    return registration


def _champion_gate(
    client: MlflowClient,
    model_name: str,
    frame_counts: Path,
    dataset_dir: Path,
    split: str,
    promotion: PromotionConfig,
    slice_spec: SliceSpec | None,
    out_dir: Path,
) -> ChampionGate:
    """Evaluate the current champion on the new model's frames and apply the paired rule."""
    challenger = load_frame_counts(frame_counts)
    masks, skipped = compute_masks(dataset_dir, challenger, slice_spec)
    champion = current_champion(client, model_name)
    if champion is None:
        return decide_champion(model_name, None, challenger, masks, skipped, promotion, out_dir)
    version = str(champion.version)
    _, champion_config, local = load_model_version(f"models:/{model_name}/{version}")
    counts = count_model_frames(
        str(local / "model.safetensors"), champion_config, str(dataset_dir), split=split
    )
    return decide_champion(
        model_name, (version, counts), challenger, masks, skipped, promotion, out_dir
    )
