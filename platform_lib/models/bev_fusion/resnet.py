"""ResNet-18/34 image backbone and an FPN-lite neck: the camera CNN of the larger BEV fusion presets.

He et al., "Deep Residual Learning for Image Recognition" (CVPR 2016, Table 1) in the layout of
torchvision's `resnet.py`, GroupNorm instead of BatchNorm, no classifier, random init (never
downloaded weights); the neck is the top-down path of Lin et al., "Feature Pyramid Networks
for Object Detection" (CVPR 2017) cut to one output level.

Shape legend (b images, h x w pixels, s = output stride in {8, 16, 32}):
    images    (b, 3, h, w)                  float
    features  (b, neck_channels, h/s, w/s)  float
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["RESNET_LAYERS", "BasicBlock", "FPNLite", "ResNet", "ResNetFPN"]

#: BasicBlocks per stage (He et al. 2016, Table 1).
RESNET_LAYERS: dict[str, tuple[int, int, int, int]] = {
    "resnet18": (2, 2, 2, 2),
    "resnet34": (3, 4, 6, 3),
}
#: Output channels of the four stages.
STAGE_CHANNELS = (64, 128, 256, 512)


def _norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(32, channels)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with a residual shortcut (1x1 projection when the shape changes)."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.norm1 = _norm(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.norm2 = _norm(c_out)
        self.downsample: nn.Module | None = None
        if stride != 1 or c_in != c_out:
            self.downsample = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), _norm(c_out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(b, c_in, h, w) -> (b, c_out, h / stride, w / stride)."""
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.norm1(self.conv1(x)), inplace=True)
        return F.relu(self.norm2(self.conv2(out)) + identity, inplace=True)


class ResNet(nn.Module):
    """ResNet stem and four stages; `forward` returns the features of every stage.

    torchvision's layout: 7x7/2 conv + 3x3/2 max pool, then BasicBlock stages at 64, 128, 256,
    512 channels and strides 4, 8, 16, 32 ([2, 2, 2, 2] blocks: ResNet-18, [3, 4, 6, 3]:
    ResNet-34), 1x1 projection shortcuts where the shape changes, Kaiming-normal fan-out init.
    GroupNorm (32 groups, Wu & He, ECCV 2018) replaces BatchNorm so that results do not depend
    on the per-rank batch size.
    """

    def __init__(self, layers: tuple[int, int, int, int]) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False),
            _norm(64),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        c_in, stages = 64, []
        for i, (blocks, c_out) in enumerate(zip(layers, STAGE_CHANNELS, strict=True)):
            stride = 1 if i == 0 else 2
            stage = [BasicBlock(c_in, c_out, stride)]
            stage += [BasicBlock(c_out, c_out) for _ in range(blocks - 1)]
            stages.append(nn.Sequential(*stage))
            c_in = c_out
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        for m in self.modules():  # torchvision's init
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.GroupNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, images: torch.Tensor) -> list[torch.Tensor]:
        """(b, 3, h, w) -> features at strides 4, 8, 16, 32 (64, 128, 256, 512 channels)."""
        x = self.stem(images)
        features = []
        for stage in (self.layer1, self.layer2, self.layer3, self.layer4):
            x = stage(x)
            features.append(x)
        return features


class FPNLite(nn.Module):
    """Top-down FPN path to one level: stage features -> (b, channels, h / stride, w / stride)."""

    def __init__(self, stride: int, channels: int) -> None:
        super().__init__()
        self.first_level = {8: 1, 16: 2, 32: 3}[stride]  # index of the output stage
        self.lateral = nn.ModuleList(
            nn.Conv2d(c, channels, 1) for c in STAGE_CHANNELS[self.first_level :]
        )
        self.output = nn.Sequential(
            nn.Conv2d(channels, channels, 3, padding=1, bias=False),
            nn.GroupNorm(32 if channels % 32 == 0 else 1, channels),
            nn.ReLU(inplace=True),
        )

    def forward(self, features: list[torch.Tensor]) -> torch.Tensor:
        """Features at strides 4..32 (`ResNet.forward`) -> the output level."""
        levels = features[self.first_level :]
        x = self.lateral[-1](levels[-1])
        for lateral, level in zip(self.lateral[-2::-1], levels[-2::-1], strict=True):
            x = lateral(level) + F.interpolate(x, size=level.shape[-2:], mode="nearest")
        return self.output(x)


class ResNetFPN(nn.Module):
    """ResNet backbone + FPN-lite neck: (b, 3, h, w) -> (b, neck_channels, h / stride, w / stride)."""

    def __init__(self, backbone: str, stride: int, neck_channels: int) -> None:
        """Build `backbone` (a key of RESNET_LAYERS) with its neck at `stride` 8, 16 or 32."""
        super().__init__()
        self.backbone = ResNet(RESNET_LAYERS[backbone])
        self.neck = FPNLite(stride, neck_channels)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Shapes in the module docstring."""
        return self.neck(self.backbone(images))
