"""Lab 1's world: a folder of JPEG photos on slow storage, and a small CNN.

The photos are generated deterministically under ``data/photos`` the first
time they are needed. Reading one costs a fixed latency (the time a network
file system or an object store takes to answer), then it is decoded and
augmented on the CPU. The augmentation of sample ``i`` is seeded from ``i``
alone, so every sample comes out the same whichever process loads it: the
number of DataLoader workers changes the speed, never the data.

Storage: in every run the kit starts, the photos come from the kit's storage
service (:mod:`proflab.running.storage`), whose address is in the environment
variable ``PROFLAB_STORAGE``. The service answers each read after its latency
(the lab's setting, 8 ms) and keeps a log of the reads, so the kit knows each
sample really came from storage. Outside the kit (``PROFLAB_STORAGE`` not
set) a read waits ``STORAGE_LATENCY_MS`` here and then reads the file from
the folder: the same wait, the same bytes, the same lesson.
"""

from __future__ import annotations

import io
import os
import random
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import Dataset

from ..running.storage import LOAD_RANGE
from . import build_once, storage_client

STORAGE_LATENCY_MS = 8.0  # a read outside the kit, where no storage service runs
NUM_PHOTOS = 2048
NUM_CLASSES = 10
PHOTO_SIZE = 64
CROP_SIZE = 56
_FORMAT = "photos-v2"  # the data's format; a change to the code that builds it rebuilds it too (labkit.fingerprint)
_AUGMENT_SEED = 1_000_003
_MEAN = torch.tensor([0.5, 0.5, 0.5]).view(3, 1, 1)
_STD = torch.tensor([0.25, 0.25, 0.25]).view(3, 1, 1)


def _draw(index: int) -> torch.Tensor:
    """One synthetic photo: a class-coloured blob on a noisy gradient."""
    g = torch.Generator().manual_seed(index)
    label = index % NUM_CLASSES
    ys, xs = torch.meshgrid(torch.arange(PHOTO_SIZE), torch.arange(PHOTO_SIZE), indexing="ij")
    base = torch.rand(3, 1, 1, generator=g) * 0.5
    img = base + 0.3 * (ys / PHOTO_SIZE) + 0.1 * torch.rand(3, PHOTO_SIZE, PHOTO_SIZE, generator=g)
    cy, cx = (torch.randint(16, PHOTO_SIZE - 16, (2,), generator=g)).tolist()
    radius = 8 + label
    blob = ((ys - cy) ** 2 + (xs - cx) ** 2) < radius**2
    hue = torch.tensor([label % 3 == 0, label % 3 == 1, label % 3 == 2], dtype=torch.float32)
    img = torch.where(blob, (0.4 + 0.06 * label) * hue.view(3, 1, 1), img)
    return (img.clamp(0, 1) * 255).round().to(torch.uint8)


def _write_photos(folder: Path) -> None:
    from PIL import Image

    labels = []
    for i in range(NUM_PHOTOS):
        array = _draw(i).permute(1, 2, 0).contiguous().numpy()
        Image.fromarray(array).save(folder / f"{i:05d}.jpg", quality=90)
        labels.append(str(i % NUM_CLASSES))
    (folder / "labels.txt").write_text("\n".join(labels) + "\n")


def ensure_photos(data_dir: str | os.PathLike) -> Path:
    """Generate the photos once; return their folder."""
    return build_once(data_dir, "photos", _FORMAT, _write_photos)


class PhotoDataset(Dataset):
    """JPEG photos on slow storage, decoded and augmented per sample."""

    def __init__(self, data_dir: str | os.PathLike):
        self.root = ensure_photos(data_dir)
        self.labels = [int(x) for x in (self.root / "labels.txt").read_text().split()]
        self.num_classes = NUM_CLASSES

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        with torch.autograd.profiler.record_function(LOAD_RANGE):  # on the thread that loads it
            return self._load(index)

    def _load(self, index: int):
        from PIL import Image

        raw = self._storage_read(f"{index:05d}.jpg")  # waiting on storage
        img = Image.open(io.BytesIO(raw)).convert("RGB")
        rng = random.Random(_AUGMENT_SEED + index)  # this sample's augmentation, in any process
        top, left = rng.randrange(PHOTO_SIZE - CROP_SIZE + 1), rng.randrange(PHOTO_SIZE - CROP_SIZE + 1)
        img = img.crop((left, top, left + CROP_SIZE, top + CROP_SIZE))
        if rng.random() < 0.5:
            img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        x = torch.frombuffer(bytearray(img.tobytes()), dtype=torch.uint8).view(CROP_SIZE, CROP_SIZE, 3)
        x = x.permute(2, 0, 1).float()
        return (x / 255.0 - _MEAN) / _STD, self.labels[index]

    def _storage_read(self, name: str) -> bytes:
        """One photo's bytes, from the kit's storage service, or after the same wait from the folder."""
        return storage_client.read_or_wait(name, self.root, STORAGE_LATENCY_MS)


class SmallCNN(nn.Module):
    """Three conv blocks and a linear head: small enough to wait on its data."""

    def __init__(self, num_classes: int = NUM_CLASSES):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(64, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))
