"""The evaluation workflow on a dataset with a flipped byte in a val sample: one line, no traceback.

Runs `workflows.evaluation.evaluate_model` in this process on the golden dataset after one
byte of a val sample's member is flipped: the sample is refused (its sha256 differs from the
index) and the task ends in the one `error:` line naming the dataset (before: a 150-line rich
traceback ending in SampleIntegrityError).
"""

from __future__ import annotations

import collections
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.integration.test_evaluation_workflow import (  # noqa: F401 - fixtures
    NAME,
    counted,
    registered,
)


def _flip_a_val_byte(dataset: Path) -> str:
    """Flip one byte in the middle of a val sample's first member; return the sample's key."""
    rows = [r for r in pq.read_table(dataset / "index.parquet").to_pylist() if r["split"] == "val"]
    row = rows[0]
    member = row["members"][0]
    with open(dataset / row["shard"], "r+b") as shard:
        shard.seek(member["offset"] + member["size"] // 2)
        byte = shard.read(1)
        shard.seek(-1, 1)
        shard.write(bytes([byte[0] ^ 0xFF]))
    return row["key"]


def test_corrupt_val_shard_is_one_line(
    registered: Path,  # noqa: F811 - the fixture
    counted: collections.Counter,  # noqa: F811 - the fixture
) -> None:
    from workflows.evaluation import evaluate_model

    key = _flip_a_val_byte(registered)
    with pytest.raises(Exception) as caught:  # noqa: PT011 - flytekit's wrapper; text checked
        evaluate_model(model_uri=f"models:/{NAME}@champion", dataset=str(registered), spec="")
    message = str(caught.value).strip()
    assert message.startswith("error: "), message[-3000:]
    assert "\n" not in message, message[-3000:]
    assert key in message and f"({registered})" in message, message
    assert counted["evaluate_version"] == 1, counted


def test_pipeline_evaluation_of_a_corrupt_val_shard_is_one_line(local_flyte: Path) -> None:
    from flytekit.types.directory import FlyteDirectory
    from safetensors.torch import save_file

    from platform_lib.models.catalog import build_model
    from platform_lib.training.presets import get_preset
    from platform_lib.zoo.dataset import build_golden_dataset
    from tasks.evaluate import evaluate_model

    dataset = build_golden_dataset(local_flyte / "golden")
    run = local_flyte / "run"
    run.mkdir()
    state = build_model("bev_fusion_small").state_dict()
    save_file({k: v.contiguous() for k, v in state.items()}, str(run / "model.safetensors"))
    key = _flip_a_val_byte(dataset)
    with pytest.raises(Exception) as caught:  # noqa: PT011 - flytekit's wrapper; text checked
        evaluate_model(
            dataset=FlyteDirectory(str(dataset)),
            run=FlyteDirectory(str(run)),
            config=get_preset("small"),
        )
    message = str(caught.value).strip()
    assert message.startswith("error: ") and "\n" not in message, message[-3000:]
    assert key in message and f"({dataset})" in message, message
