"""Lab 0's data and model: small generated images, and torchvision's ResNet-18.

The images are drawn from a fixed seed per sample, on the fly (nothing is
written to disk, nothing is downloaded): the same sample has the same pixels
in every process, so every version trains on the same data.
"""

from __future__ import annotations

import torch
from torch.utils.data import Dataset

IMAGE_SIZE = 32
CLASSES = 10
_SEED = 1234


class RandomImages(Dataset):
    """``count`` images of 3 x 32 x 32 and their class ids, the same in every process."""

    def __init__(self, count: int):
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int):
        g = torch.Generator().manual_seed(_SEED + index)
        image = torch.randn(3, IMAGE_SIZE, IMAGE_SIZE, generator=g)
        label = int(torch.randint(0, CLASSES, (1,), generator=g))
        return image, label


def resnet18(seed: int = 0) -> torch.nn.Module:
    """torchvision's ResNet-18, untrained (``weights=None``: nothing is downloaded), for 10 classes,
    with the same initial weights in every version."""
    from torchvision.models import resnet18 as build

    torch.manual_seed(seed)
    return build(weights=None, num_classes=CLASSES)
