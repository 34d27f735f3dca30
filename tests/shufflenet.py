"""A ShuffleNetV2 written from the paper's description (Ma et al. 2018, torchvision's layout of it), for
whole-model compiler tests: channel split (``chunk``), depthwise 3x3 convolutions of stride 1 and 2, 1x1
convolutions, BatchNorm, in-place ReLU, ``cat`` and the channel shuffle (a view, a transpose, a copy)."""
from __future__ import annotations

import torch
import torch.nn as nn

X0_5_WIDTHS = (24, 48, 96, 192, 1024)       # shufflenet_v2_x0_5
REPEATS = (4, 8, 4)


def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    b, c, h, w = x.size()
    x = x.view(b, groups, c // groups, h, w).transpose(1, 2).contiguous()
    return x.view(b, -1, h, w)


def _conv_bn(c_in: int, c_out: int, k: int, stride: int = 1, groups: int = 1, relu: bool = True) -> list:
    layers = [nn.Conv2d(c_in, c_out, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(c_out)]
    return layers + [nn.ReLU(inplace=True)] if relu else layers


class InvertedResidual(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.stride = stride
        half = c_out // 2
        self.branch1 = nn.Sequential()
        if stride > 1:
            self.branch1 = nn.Sequential(*_conv_bn(c_in, c_in, 3, stride, groups=c_in, relu=False),
                                         *_conv_bn(c_in, half, 1))
        c_b2 = c_in if stride > 1 else half
        self.branch2 = nn.Sequential(*_conv_bn(c_b2, half, 1),
                                     *_conv_bn(half, half, 3, stride, groups=half, relu=False),
                                     *_conv_bn(half, half, 1))

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    def __init__(self, repeats=REPEATS, widths=X0_5_WIDTHS, num_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Sequential(*_conv_bn(3, widths[0], 3, 2))
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages, c_in = [], widths[0]
        for n, c_out in zip(repeats, widths[1:]):
            stages.append(nn.Sequential(InvertedResidual(c_in, c_out, 2),
                                        *(InvertedResidual(c_out, c_out, 1) for _ in range(n - 1))))
            c_in = c_out
        self.stages = nn.Sequential(*stages)
        self.conv5 = nn.Sequential(*_conv_bn(c_in, widths[-1], 1))
        self.fc = nn.Linear(widths[-1], num_classes)

    def forward(self, x):
        x = self.stages(self.maxpool(self.conv1(x)))
        return self.fc(self.conv5(x).mean([2, 3]))
