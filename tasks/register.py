"""Registration task: goodput report, MLflow run (params, step metrics, eval table) + model version.

First it finishes the run's goodput report on this CPU pod (`finish_goodput`: baseline
comparison, final figures and flags, report files, in the MLflow run training streamed to); its
page is the task's "Goodput" Deck. Then the champion gate (`platform_lib.registry.gate`)
evaluates the champion on the same frames and decides; its page (decision, plots, per-slice
table) is the task's "Promotion" Deck.

MLflow credentials: `tasks/secrets.py` (environment or the Flyte secrets `mlflow/*`).
"""

from __future__ import annotations

from pathlib import Path

from flytekit import Cache, Deck, current_context, task
from flytekit.deck import DeckField
from flytekit.types.directory import FlyteDirectory

from platform_lib.registry.gate import parse_promotion
from platform_lib.registry.lineage import resolve_code_version
from platform_lib.registry.record import record_training_run
from platform_lib.registry.register import resolve_model_name
from platform_lib.telemetry.mlflow_goodput import finish_goodput
from platform_lib.telemetry.publish import GOODPUT_HTML
from platform_lib.training.config import TrainConfig
from tasks.errors import download_input, task_errors
from tasks.image import TASK_IMAGE
from tasks.secrets import MLFLOW_SECRETS, mlflow_credentials

__all__ = ["check_model_name", "register_model"]

#: The folder these tasks were imported from: its git commit is the run's code version when it
#: is a work tree (an editable install); in an image, `$DRIVETRAIN_CODE_VERSION` or the version.
CHECKOUT = Path(__file__).resolve().parents[1]


@task(container_image=TASK_IMAGE, cache=Cache(version="1"), retries=1)
def check_model_name(model_name: str, source: str) -> str:
    """Return the name to register under ("" names "drivetrain-bev-<source>").

    The pipeline's first task: a name MLflow would refuse at registration fails here, in one
    line naming `model_name`, before any data is built or trained on.
    """
    with task_errors("checking the model name"):
        return resolve_model_name(model_name, source)


@task(container_image=TASK_IMAGE, cache=Cache(version="1"), retries=1)
def check_promotion(promotion: str) -> str:
    """Return the champion gate's rule as canonical JSON ("" is the default rule).

    Checked before any work, like the model name: a margin outside [0, 1], an unknown field or
    slice fails here in one line naming `promotion`.
    """
    with task_errors("checking the promotion rule"):
        return parse_promotion(promotion).model_dump_json()


@task(
    container_image=TASK_IMAGE,
    cache=Cache(version="2"),
    retries=3,
    secret_requests=MLFLOW_SECRETS,
    enable_deck=True,
    deck_fields=(DeckField.INPUT, DeckField.OUTPUT),
)
def register_model(
    model_name: str,
    source: str,
    raw_logs_hash: str,
    dataset: FlyteDirectory,
    run: FlyteDirectory,
    eval_table: FlyteDirectory,
    config: TrainConfig,
    promotion: str = "",
) -> str:
    """Publish the run's goodput report, register its model with lineage tags; return its URI.

    Returns `models:/<name>/<version>`. `model_name` "" registers as "drivetrain-bev-<source>";
    `eval_table` is the evaluation folder (`evaluate_model`). The champion moves only when the
    gate promotes under `promotion` (`check_promotion`'s JSON; "" the default rule).
    """
    with task_errors("logging to MLflow"), mlflow_credentials():
        run_dir = download_input(run, "train_model")
        finish_goodput(run_dir, config=config)  # before registration: it names the MLflow run
        Deck("Goodput", (Path(run_dir) / GOODPUT_HTML).read_text(encoding="utf-8"))
        registration = record_training_run(
            model_name=model_name or f"drivetrain-bev-{source}",
            run_dir=run_dir,
            dataset_dir=download_input(dataset, "merge_dataset"),
            eval_json=str(Path(download_input(eval_table, "evaluate_model")) / "eval_metrics.json"),
            config=config,
            raw_logs_hash=raw_logs_hash,
            execution_id=current_context().execution_id.name or "local",
            code_version=resolve_code_version(CHECKOUT),
            gate_dir=Path(current_context().working_directory) / "promotion",
            promotion=parse_promotion(promotion),
        )
    if registration.page is not None:
        Deck("Promotion", Path(registration.page).read_text(encoding="utf-8"))
    return registration.model_uri
