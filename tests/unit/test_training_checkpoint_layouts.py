"""A checkpoint of another model is refused in one line before DCP reads it (world size 1, gloo)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from platform_lib.errors import UserError, format_user_error
from platform_lib.models.catalog import build_model
from platform_lib.models.presets import get_model_config
from platform_lib.training.checkpoint import Checkpointer
from platform_lib.training.distributed import destroy_distributed, init_distributed
from platform_lib.training.parallel import apply_fsdp, build_mesh, build_mp_policy


@pytest.fixture
def ctx():
    context = init_distributed("gloo")
    yield context
    destroy_distributed(context)


def _sharded(cfg, ctx):
    torch.manual_seed(0)
    model = apply_fsdp(build_model(cfg), build_mesh(ctx), build_mp_policy(False))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def test_a_checkpoint_of_another_model_is_one_line_naming_model_name(ctx, tmp_path):
    model, optimizer = _sharded("world_model_small", ctx)
    ckpt = Checkpointer(tmp_path / "ckpt")
    ckpt.save(1, model, optimizer, {"step": 1})

    other, other_opt = _sharded("bev_fusion_small", ctx)
    with pytest.raises(UserError) as caught:
        ckpt.load(ckpt.latest(), other, other_opt)
    assert caught.value.culprit == "model.name" and "holds another model" in caught.value.what
    assert "\n" not in format_user_error(caught.value)

    wider = dataclasses.replace(get_model_config("world_model_small"), dim=64, mlp_hidden=128)
    resized, resized_opt = _sharded(wider, ctx)
    with pytest.raises(UserError, match=r"0 of this model's .* missing and \d+ differ in shape"):
        ckpt.load(ckpt.latest(), resized, resized_opt)

    same, same_opt = _sharded("world_model_small", ctx)
    assert ckpt.load(ckpt.latest(), same, same_opt)["step"] == 1
