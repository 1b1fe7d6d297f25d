"""Lab 8's world: camera frames to classify, and a small MobileNet-style convnet that serves them.

The frames are generated deterministically under ``data/frames`` the first
time they are needed, stored as 8-bit pixels (a class-coloured shape on a
noisy background) and handed out by ``Frames.batches`` as normalised float
batches, in a fixed order.

``ServingNet`` is shaped like a pretrained MobileNet (version 1): a strided
stem, then depthwise-separable blocks, each convolution followed by a
``BatchNorm2d`` and a ReLU; 17 convolutions, 17 batch norms; global average
pooling and a linear classifier. It is not trained: its weights are drawn
from a fixed seed every time one is built, and its batch norms' running
statistics measured from the activations they see (``_calibrate``), far from
the identity (means away from 0, variances away from 1, scales and shifts of
their own), as a trained network's are: every frame gets logits of its own,
and a batch norm left out or folded wrongly changes every logit. The model is
returned in ``eval()`` mode, as a served model is; everything else (autograd,
memory format, how batch norm runs) is the lab file's business.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import torch
from torch import nn

from . import build_once, save, seed_for

NUM_FRAMES = 3072
IMAGE_SIZE = 64  # frames are IMAGE_SIZE x IMAGE_SIZE, RGB
CLASSES = 10
# (in, out, stride) of each depthwise-separable block after the stem: MobileNet's widths at 0.5x
BLOCKS = [(8, 16, 1), (16, 32, 2), (32, 32, 1), (32, 64, 2), (64, 64, 1), (64, 128, 2), (128, 128, 1),
          (128, 128, 1)]
STEM = 8  # channels out of the stem
_FORMAT = "frames-v1"  # the data's format; a change to the code that builds it rebuilds it too (labkit.fingerprint)
_DATA_SEED = 10_000_019
_WEIGHTS_SEED = 11_000_027
_MEAN, _STD = 0.45, 0.25  # the pixels' normalisation, as a pretrained model's preprocessing has


def _write_frames(folder: Path) -> None:
    g = torch.Generator().manual_seed(_DATA_SEED)
    labels = torch.randint(0, CLASSES, (NUM_FRAMES,), generator=g)
    ys, xs = torch.meshgrid(torch.arange(IMAGE_SIZE), torch.arange(IMAGE_SIZE), indexing="ij")
    colours = torch.rand(CLASSES, 3, 1, 1, generator=g)
    centres = torch.randint(12, IMAGE_SIZE - 12, (NUM_FRAMES, 2), generator=g)
    background = 0.4 * torch.rand(NUM_FRAMES, 3, 1, 1, generator=g) + 0.2 * torch.rand(
        NUM_FRAMES, 3, IMAGE_SIZE, IMAGE_SIZE, generator=g)
    radius = (6 + labels).view(-1, 1, 1)
    blob = ((ys - centres[:, 0].view(-1, 1, 1)) ** 2 + (xs - centres[:, 1].view(-1, 1, 1)) ** 2) < radius ** 2
    frames = torch.where(blob.unsqueeze(1), colours[labels], background)
    save({"pixels": (frames.clamp(0, 1) * 255).round().to(torch.uint8), "labels": labels}, folder / "frames.pt")


def ensure_frames(data_dir: str | os.PathLike) -> Path:
    """Generate the frames once; return their folder."""
    return build_once(data_dir, "frames", _FORMAT, _write_frames)


class Frames:
    """The frames under ``data_dir/frames``, in a fixed order."""

    def __init__(self, data_dir: str | os.PathLike):
        saved = torch.load(ensure_frames(data_dir) / "frames.pt", weights_only=True)
        self.pixels: torch.Tensor = saved["pixels"]  # (NUM_FRAMES, 3, IMAGE_SIZE, IMAGE_SIZE), uint8
        self.labels: torch.Tensor = saved["labels"]

    def __len__(self) -> int:
        return len(self.labels)

    def batches(self, batch_size: int, device: torch.device | str = "cpu") -> Iterator[torch.Tensor]:
        """Consecutive batches of ``batch_size`` frames, ``(batch_size, 3, IMAGE_SIZE, IMAGE_SIZE)`` floats,
        normalised, contiguous (PyTorch's default memory format), on ``device``, without end: after the last
        whole batch the frames start again from the first (a short last batch is dropped). Every frame is
        converted before the first batch is served, so that a step holds the model's work, not the
        preprocessing."""
        images = ((self.pixels.float() / 255.0 - _MEAN) / _STD).to(device)
        while True:
            for start in range(0, len(images) - batch_size + 1, batch_size):
                yield images[start:start + batch_size]


def _conv_bn_relu(c_in: int, c_out: int, kernel: int, stride: int, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, kernel, stride, padding=kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    )


class ServingNet(nn.Sequential):
    """A MobileNet-style classifier of ``IMAGE_SIZE`` frames into ``CLASSES`` logits, from fixed weights.

    ``features`` is a sequence of conv → batch norm → ReLU units (``nn.Sequential`` of
    ``Conv2d``, ``BatchNorm2d``, ``ReLU``: the stem, then a depthwise and a pointwise unit per
    block); ``pool`` averages each channel; ``classifier`` is linear. Built in ``eval()`` mode.
    """

    def __init__(self):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed_for(_WEIGHTS_SEED))
            units = [_conv_bn_relu(3, STEM, 3, 2)]
            for c_in, c_out, stride in BLOCKS:
                units.append(_conv_bn_relu(c_in, c_in, 3, stride, groups=c_in))  # depthwise
                units.append(_conv_bn_relu(c_in, c_out, 1, 1))  # pointwise
            super().__init__()
            self.features = nn.Sequential(*units)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.flatten = nn.Flatten()
            self.classifier = nn.Linear(BLOCKS[-1][1], CLASSES)
            self._calibrate()
        self.eval()

    def _calibrate(self) -> None:
        """Give every batch norm the statistics a trained network's hold: those of the activations it
        sees (measured on a fixed batch of noise, as training measures them on its data), moved a little,
        with scales and shifts of their own. Statistics drawn without looking at the activations would
        shrink the signal at every one of the 17 layers, until every frame got the same logits, and no
        comparison of results could tell one frame's answer from another's."""
        norms = [m for m in self.modules() if isinstance(m, nn.BatchNorm2d)]
        for m in norms:
            m.reset_running_stats()
            m.momentum = None  # a cumulative average: the statistics of the batch itself
        self.train()
        with torch.no_grad():
            self(torch.randn(64, 3, IMAGE_SIZE, IMAGE_SIZE))
            for m in norms:
                n = m.num_features
                m.momentum = 0.1
                m.running_mean.add_(0.1 * m.running_var.sqrt() * torch.randn(n))
                m.running_var.mul_(0.8 + 0.4 * torch.rand(n))
                m.weight.copy_(1.0 + 0.2 * torch.randn(n))
                m.bias.copy_(0.1 * torch.randn(n))
