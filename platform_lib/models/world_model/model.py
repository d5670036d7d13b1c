"""`WorldModel`: a BEV-token temporal transformer predicting the next frame's BEV occupancy.

Each of the k context frames' BEV input (LiDAR statistics + radar) is cut into
patch_size x patch_size patches, one token per patch; a token gets a learnt position of its
patch and of its frame and the frame's ego motion to the predicted frame. Pre-norm blocks
(RMSNorm, multi-head attention over all k x N tokens, SwiGLU MLP; Llama's block as torchtitan
writes it) mix them; the last frame's tokens decode to the next frame's occupancy logits.
The model knows no ranks: it declares `tp_plan()` (for `parallelize_module`),
`pipeline_split_points()` and `blocks()`; `platform_lib.training.parallel` applies them.

Shape legend (B batch, T = k + 1 frames of a loader window, oldest first; H x W cells; N
tokens per frame; S = k N tokens; d = dim):
    lidar_bev   (B, T, 4 + Z, H, W)  float32  (the last frame's is not read)
    radar_bev   (B, T, 2, H, W)      float32  (the last frame's is not read)
    ego_motion  (B, T, 4, 4)         float32  the predicted frame's pose seen from frame t
    hidden      (B, S, d)            the residual stream (what crosses a pipeline stage)
    logits      (B, C, H, W)         the predicted (last) frame's occupancy
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from platform_lib.models.bev_fusion.temporal import prepare_window
from platform_lib.models.world_model.config import MOTION_FEATURES, WorldModelConfig

__all__ = ["WorldModel", "prepare_world_window"]

#: Batch keys of a world-model sample (`prepare_world_window`), inputs in `forward`'s order.
INPUT_KEYS = ("lidar_bev", "radar_bev", "ego_motion")


def prepare_world_window(sample: Mapping[str, Any], cfg: WorldModelConfig) -> dict[str, Any]:
    """Return the world model's tensors of one loader window of `cfg.temporal_frames` frames.

    Raises:
        ValueError: as `prepare_window` (naming the sample key).
    """
    window = prepare_window(sample, cfg.bev_config())
    return {k: window[k] for k in (*INPUT_KEYS, "target")}


class Attention(nn.Module):
    """Multi-head self-attention without biases; under TP each rank holds heads / tp heads."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.head_dim = dim // heads
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(dim, dim, bias=False) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, S, d) -> (B, S, d); the heads are those of this rank's weights (-1 in the view)."""
        b, s, _ = x.shape
        q, k, v = (
            w(x).view(b, s, -1, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv)
        )
        out = F.scaled_dot_product_attention(q, k, v)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    """SwiGLU MLP: w2(silu(w1 x) * w3 x)."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, S, d) -> (B, S, d)."""
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    """Pre-norm transformer block: x + attention(norm(x)), then + feed_forward(norm(x))."""

    def __init__(self, cfg: WorldModelConfig) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(cfg.dim, eps=1e-6)
        self.attention = Attention(cfg.dim, cfg.heads)
        self.ffn_norm = nn.RMSNorm(cfg.dim, eps=1e-6)
        self.feed_forward = FeedForward(cfg.dim, cfg.mlp_hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, S, d) -> (B, S, d) (under TP: this rank's sequence shard)."""
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


class WorldModel(nn.Module):
    """Tokens of k BEV frames -> transformer blocks -> the next frame's occupancy logits.

    A pipeline stage is this module with some parts set to None (`training/pipeline.py`):
    without `embed` it takes the hidden states (B, S, d) instead of the inputs, without
    `head` it returns them.
    """

    input_keys = INPUT_KEYS
    target_key = "target"

    def __init__(self, cfg: WorldModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        p, d = cfg.patch_size, cfg.dim
        self.embed: nn.Linear | None = nn.Linear(cfg.input_features * p * p, d)
        self.motion: nn.Linear | None = nn.Linear(MOTION_FEATURES, d)
        self.positions: nn.Embedding | None = nn.Embedding(
            cfg.tokens_per_frame + cfg.context_frames, d
        )
        self.layers = nn.ModuleDict({str(i): Block(cfg) for i in range(cfg.layers)})
        self.norm: nn.RMSNorm | None = nn.RMSNorm(d, eps=1e-6)
        self.head: nn.Linear | None = nn.Linear(d, cfg.num_classes * p * p)
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.normal_(module.weight, std=0.02)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)

    def blocks(self) -> list[str]:
        """Return the parallelism units: each transformer block (one FSDP unit each)."""
        return [f"layers.{name}" for name in self.layers]

    def pipeline_split_points(self) -> list[str]:
        """Return the blocks a pipeline stage may start at (every block but the first)."""
        return self.blocks()[1:]

    def tp_plan(self) -> dict[str, Any]:
        """Return the tensor-parallel plan, for `parallelize_module(model, tp_mesh, plan)`.

        Megatron-style, as torchtitan's Llama plan: q/k/v and w1/w3 column-wise, wo and w2
        row-wise back to sequence shards, the norms sequence-parallel. The residual stream
        enters each block replicated, is cut into sequence shards (no communication) and
        leaves gathered again, so embedding and head run replicated on every TP rank.
        """
        from torch.distributed.tensor import Replicate, Shard
        from torch.distributed.tensor.parallel import (
            ColwiseParallel,
            PrepareModuleInput,
            PrepareModuleInputOutput,
            RowwiseParallel,
            SequenceParallel,
        )

        gather = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
        return {
            "layers.*": PrepareModuleInputOutput(
                input_layouts=(Replicate(),),
                desired_input_layouts=(Shard(1),),
                use_local_input=True,
                output_layouts=(Shard(1),),
                desired_output_layouts=(Replicate(),),
                use_local_output=True,
            ),
            "layers.*.attention_norm": SequenceParallel(),
            "layers.*.attention": gather,
            "layers.*.attention.wq": ColwiseParallel(),
            "layers.*.attention.wk": ColwiseParallel(),
            "layers.*.attention.wv": ColwiseParallel(),
            "layers.*.attention.wo": RowwiseParallel(output_layouts=Shard(1)),
            "layers.*.ffn_norm": SequenceParallel(),
            "layers.*.feed_forward": gather,
            "layers.*.feed_forward.w1": ColwiseParallel(),
            "layers.*.feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
            "layers.*.feed_forward.w3": ColwiseParallel(),
        }

    def tokens(
        self, lidar_bev: torch.Tensor, radar_bev: torch.Tensor, ego_motion: torch.Tensor
    ) -> torch.Tensor:
        """Return the (B, S, d) tokens of the k context frames (shapes: module docstring)."""
        assert self.embed is not None and self.motion is not None and self.positions is not None
        cfg, k = self.cfg, self.cfg.context_frames
        p, n = cfg.patch_size, cfg.tokens_per_frame
        frames = torch.cat([lidar_bev[:, :k], radar_bev[:, :k]], dim=2)  # (B, k, F, H, W)
        b, _, f, h, w = frames.shape
        patches = frames.reshape(b, k, f, h // p, p, w // p, p).permute(0, 1, 3, 5, 2, 4, 6)
        x = self.embed(patches.reshape(b, k, n, f * p * p))  # (B, k, N, d)
        x = x + self.motion(ego_motion[:, :k].reshape(b, k, MOTION_FEATURES))[:, :, None]
        x = x + self.positions.weight[:n][None, None] + self.positions.weight[n:][None, :, None]
        return x.reshape(b, k * n, -1)

    def decode(self, hidden: torch.Tensor) -> torch.Tensor:
        """Return the (B, C, H, W) logits of the next frame from the last frame's tokens."""
        assert self.norm is not None and self.head is not None
        cfg, p = self.cfg, self.cfg.patch_size
        rows, cols = cfg.grid.height // p, cfg.grid.width // p
        out = self.head(self.norm(hidden[:, -cfg.tokens_per_frame :]))  # (B, N, C p p)
        b = out.shape[0]
        out = out.reshape(b, rows, cols, cfg.num_classes, p, p).permute(0, 3, 1, 4, 2, 5)
        return out.reshape(b, cfg.num_classes, rows * p, cols * p)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        """Inputs (`input_keys`) -> logits; a pipeline stage: inputs or hidden -> hidden or logits."""
        hidden = self.tokens(*inputs) if self.embed is not None else inputs[0]
        for layer in self.layers.values():
            hidden = layer(hidden)
        return self.decode(hidden) if self.head is not None else hidden
