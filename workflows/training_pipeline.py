r"""The main job: raw driving logs -> dataset -> elastic training -> evaluation -> MLflow registry.

    pyflyte run workflows/training_pipeline.py training_pipeline
    pyflyte run workflows/training_pipeline.py training_pipeline \
        --source pandaset --raw_logs ../shared/data/pandaset/002 --preset pandaset_smoke

Wiring only; the tasks live in `tasks/`, the logic in `platform_lib/`. See docs/pipeline.md.
"""

from __future__ import annotations

import warnings

from flytekit import workflow

from platform_lib.sources.synthetic import SyntheticConfig
from tasks.data import (
    build_log_parts,
    dataset_config,
    hash_raw_logs,
    list_raw_logs,
    materialize_raw_logs,
    merge_dataset,
)
from tasks.evaluate import evaluate_model
from tasks.register import check_model_name, check_promotion, register_model
from tasks.train import check_fault_switch, resolve_config, train_model, warn_skipped_faults
from tasks.triage import record_pipeline_failure
from tasks.view import build_training_view, choose_training_view

__all__ = ["training_pipeline"]

# `pyflyte run` declares a bool input as two click options, `--quarantine/--no_quarantine` and
# `--quarantine/--no-quarantine` (flytekit's `to_click_option`, since flyteorg/flytekit#2764),
# and click >= 8.2 warns about the shared `--quarantine` each time it parses the command line.
# Both spellings work; the warning is flytekit's, not ours, and only this one is ignored.
warnings.filterwarnings(
    "ignore", message=r"The parameter --quarantine is used more than once", category=UserWarning
)

#: Workflow input default (a frozen dataclass; module-level so the default is shared).
DEFAULT_SYNTHETIC = SyntheticConfig()


@workflow(on_failure=record_pipeline_failure)  # classifies a rank killed by a signal
def training_pipeline(
    source: str = "synthetic",
    raw_logs: str = "",
    preset: str = "synthetic_default",
    overrides: str = "",
    seed: int = 0,
    model_name: str = "",
    synthetic: SyntheticConfig = DEFAULT_SYNTHETIC,
    split: str = "",
    quarantine: bool = False,
    promotion: str = "",
) -> str:
    """Build, train, evaluate and register; return the new model version's `models:/` URI.

    Args:
        source: raw-log format, "synthetic" or "pandaset".
        raw_logs: folder (local or object-storage URL) of raw logs: a PandaSet root or one
            sequence folder; empty with source="synthetic" generates `synthetic` logs.
        preset: training preset (`platform_lib.training.presets`).
        overrides: JSON object of preset fields to replace, e.g. '{"max_steps": 5}' or
            '{"optimizer.lr": 0.01}' (`platform_lib.training.overrides`); "" keeps the preset.
            `preset` and `seed` are inputs of their own: overrides naming them are an error.
        seed: training seed (weights init and data order).
        model_name: registered model name; empty: "drivetrain-bev-<source>".
        synthetic: generator settings when synthetic logs are generated.
        split: train/val split method ("by_log" or "by_frame_range"); "" uses the source's
            default (`platform_lib.sources.catalog.DEFAULT_SPLITS`).
        quarantine: leave bad frames out of the dataset (listed in its manifest) instead of
            failing the build.
        promotion: the champion gate's rule, a JSON object of `PromotionConfig` fields, e.g.
            '{"margin": 0.05, "gated_slices": ["all", "moving"]}'; "" the default rule.
    """
    checked_at = check_fault_switch()  # a bad DRIVETRAIN_FAULTS fails before anything runs
    name = check_model_name(model_name=model_name, source=source)
    checked_at >> name
    rule = check_promotion(promotion=promotion)
    config = resolve_config(preset=preset, overrides=overrides, seed=seed)
    name >> config  # training waits for the name check on a cluster too (nodes run in parallel)
    rule >> config
    logs = materialize_raw_logs(source=source, raw_logs=raw_logs, synthetic=synthetic)
    checked_at >> logs
    logs_hash = hash_raw_logs(source=source, raw_logs=logs, requested=raw_logs)
    build_config = dataset_config(source=source, split=split, quarantine=quarantine)
    present = list_raw_logs(source=source, raw_logs=logs)
    parts = build_log_parts(source, present.logs, present.log_hashes, build_config)
    dataset = merge_dataset(source=source, parts=parts, config=build_config)
    # A model whose camera input is smaller than the cameras trains on a view at that size;
    # evaluation and registration read the full-size dataset (the source of truth).
    view = choose_training_view(dataset=dataset, config=config)
    train_data = build_training_view(dataset=dataset, view=view)
    run = train_model(dataset=train_data, config=config)
    warn_skipped_faults(run=run, checked_at=checked_at)  # a cache hit injects no fault
    table = evaluate_model(dataset=dataset, run=run, config=config)
    return register_model(
        model_name=name,
        source=source,
        raw_logs_hash=logs_hash,
        dataset=dataset,
        run=run,
        eval_table=table,
        config=config,
        promotion=rule,
    )
