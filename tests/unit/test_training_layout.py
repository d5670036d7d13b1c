"""`resolve_layout`: degrees -> a Layout whose product is the world size, or one line naming the field."""

from __future__ import annotations

import pytest

from platform_lib.errors import UserError, format_user_error
from platform_lib.training.config import ParallelConfig, TrainConfig, hash_config
from platform_lib.training.layout import Layout, resolve_layout


def test_default_degrees_are_plain_fsdp_over_the_world():
    layout = resolve_layout(ParallelConfig(), 8, 8)
    assert (layout.dp_replicate, layout.dp_shard, layout.tp, layout.pp) == (1, 8, 1, 1)
    assert layout.is_fsdp_only and layout.world_size == layout.dp == 8


def test_dp_shard_takes_what_the_other_degrees_leave():
    layout = resolve_layout(ParallelConfig(tp=2, pp=2), 8, 4, model_name="world_model_small")
    assert layout.mesh_shape == (2, 1, 2, 2) and layout.dp == 2
    assert layout.describe() == "pp=2 x dp_replicate=1 x dp_shard=2 x tp=2"
    assert layout.pp_microbatches == 2  # default: one per stage
    # tp innermost: ranks 0 and 1 are TP peers and load the same data slice
    assert [layout.dp_rank(r) for r in range(8)] == [0, 0, 1, 1, 0, 0, 1, 1]
    assert layout.coordinates(5) == {"pp": 1, "dp_replicate": 0, "dp_shard": 0, "tp": 1}


def test_hsdp_layout_orders_replicas_before_shards():
    layout = resolve_layout(ParallelConfig(dp_replicate=2, dp_shard=2), 4, 4)
    assert Layout(dp_replicate=2, dp_shard=2, tp=1, pp=1) == layout
    assert [layout.dp_rank(r) for r in range(4)] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("degrees", "world", "local", "model", "field", "choices"),
    [
        ({"dp_shard": 3}, 4, 4, None, "parallel.dp_shard", "set parallel.dp_shard to -1"),
        ({"tp": 3}, 4, 4, None, "parallel.dp_replicate x parallel.tp x parallel.pp", "1, 2, 4"),
        ({"tp": 8}, 8, 4, None, "parallel.tp", "one of 1, 2, 4"),
        ({"tp": 2}, 4, 4, "bev_fusion_small", "parallel.tp", "world_model_"),
        ({"tp": 8}, 8, 8, "world_model_small", "parallel.tp", "one of 1, 2, 4"),
        ({"pp": 2}, 4, 4, "bev_fusion_small", "parallel.pp", "cannot be pipelined"),
        (
            {"pp": 4, "pp_schedule": "Interleaved1F1B"},
            4,
            4,
            "world_model_small",
            "parallel.pp",
            "at most 2",
        ),
        ({"cp": 2}, 4, 4, None, "parallel.cp", "set parallel.cp to 1"),
        ({"pp": 2, "pp_microbatches": 1}, 4, 4, None, "parallel.pp_microbatches", "at least 2"),
        (
            {"pp": 2, "pp_microbatches": 3, "pp_schedule": "Interleaved1F1B"},
            4,
            4,
            None,
            "parallel.pp_microbatches",
            "multiple of 2",
        ),
    ],
)
def test_an_impossible_layout_is_one_line_naming_the_field(
    degrees, world, local, model, field, choices
):
    with pytest.raises(UserError) as caught:
        resolve_layout(ParallelConfig(**degrees), world, local, model_name=model)
    line = format_user_error(caught.value)
    assert caught.value.culprit == field and choices in caught.value.fix
    assert "\n" not in line and line.startswith("error: ")


def test_microbatches_must_divide_the_batch():
    with pytest.raises(UserError, match=r"do not divide data.batch_size=6.*1, 2, 3, 6"):
        resolve_layout(ParallelConfig(pp=2, pp_microbatches=4), 4, 4, batch_size=6)


def test_dp_shard_zero_is_refused_by_the_config():
    with pytest.raises(ValueError, match="parallel.dp_shard"):
        ParallelConfig(dp_shard=0)


def test_default_degrees_leave_the_config_hash_unchanged():
    plain = TrainConfig()
    assert "tp" not in plain.to_dict()["parallel"]
    same = TrainConfig(parallel=ParallelConfig(tp=1, pp=1, dp_shard=-1, pp_schedule="1F1B"))
    assert hash_config(same) == hash_config(plain)
    assert hash_config(TrainConfig(parallel=ParallelConfig(tp=2))) != hash_config(plain)
