"""World model: sizes, shapes, and pipeline stages that compose to the whole model."""

from __future__ import annotations

import torch

from platform_lib.models.catalog import build_model
from platform_lib.models.presets import get_model_config
from platform_lib.training.config import DataConfig, ModelConfig, TrainConfig
from platform_lib.training.layout import Layout
from platform_lib.training.pipeline import split_stages, stage_boundaries


def _inputs(batch: int = 2):
    cfg = get_model_config("world_model_small")
    g = torch.Generator().manual_seed(0)
    t, h, w = cfg.temporal_frames, cfg.grid.height, cfg.grid.width
    return (
        torch.rand(batch, t, cfg.input_features - 2, h, w, generator=g),
        torch.rand(batch, t, 2, h, w, generator=g),
        torch.eye(4).repeat(batch, t, 1, 1),
    )


def test_parameter_counts_of_the_presets():
    torch.manual_seed(0)
    model = build_model("world_model_small")
    assert (
        sum(p.numel() for p in model.parameters())
        == get_model_config("world_model_small").count_parameters()
    )
    assert 1e9 <= get_model_config("world_model_large").count_parameters() <= 8e9


def test_predicts_the_next_frames_occupancy_from_the_context_frames():
    torch.manual_seed(0)
    model, inputs = build_model("world_model_small"), _inputs()
    logits = model(*inputs)
    assert logits.shape == (2, 3, 64, 64)
    changed = (inputs[0].clone(), *inputs[1:])
    changed[0][:, -1] += 1.0  # the predicted frame's own input is never read
    assert torch.equal(model(*changed), logits)
    changed[0][:, 0] += 1.0
    assert not torch.equal(model(*changed), logits)


def test_pipeline_stages_compose_to_the_whole_model():
    torch.manual_seed(0)
    model, inputs = build_model("world_model_small"), _inputs()
    assert model.pipeline_split_points() == ["layers.1", "layers.2", "layers.3"]
    assert stage_boundaries(model, 2) == [0, 2] and stage_boundaries(model, 4) == [0, 1, 2, 3]
    layout = Layout(dp_replicate=1, dp_shard=1, tp=1, pp=2)
    (first,), (last,) = split_stages(model, layout, 0), split_stages(model, layout, 1)
    assert first.head is None and last.embed is None and list(last.layers) == ["2", "3"]
    names = {n for n, _ in first.named_parameters()} | {n for n, _ in last.named_parameters()}
    assert names == {n for n, _ in model.named_parameters()}  # whole-model names: checkpoints
    torch.testing.assert_close(last(first(*inputs)), model(*inputs), rtol=0, atol=0)


def test_a_world_model_run_loads_windows_of_context_plus_one_frames():
    cfg = TrainConfig(model=ModelConfig(name="world_model_small"), data=DataConfig(window_frames=3))
    assert get_model_config(cfg.model.name).temporal_frames == 3
