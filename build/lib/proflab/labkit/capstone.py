"""Lab 9's world (capstone): a folder of JPEG photos on slow storage, their augmentation, and a convnet to train.

The photos are 1,024 synthetic 64×64 JPEGs of 10 classes (a class-coloured blob on a noisy gradient,
as lab 1's), generated deterministically under ``data/capstone`` the first time they are needed
(``proflab data`` builds them: the manifest's ``data`` names ``ensure``), the same bytes on every
machine: one file a photo, ``00000.jpg`` to ``01023.jpg``, and which class each is, ``index.json``.
A change to ``_write``, or to what it calls, builds them again in every kit (``labkit.fingerprint``).

Storage: as lab 1's, the photos live on modelled network storage. In every run the kit starts, each
photo comes from the kit's storage service (:mod:`proflab.running.storage`, the lab's ``[storage]``
table: the folder and each read's latency), outside the lab's process, which logs every read; outside
the kit (``PROFLAB_STORAGE`` not set) a read waits ``STORAGE_LATENCY_MS`` here, then reads the file
from the folder: the same wait, the same bytes.

:class:`Photos` reads, decodes and augments a sample in ``__getitem__``, as a torchvision data set
does: the JPEG read from storage and decoded, a random crop, a random horizontal flip, scaled to floats
and normalised per channel. The augmentation of sample ``i`` is seeded from ``i`` alone, so every
sample comes out the same whichever process loads it: the number of DataLoader workers changes the
speed, never the data.

:class:`ConvNet` is a small convnet whose activation the lab file chooses (``act``: any function of a
tensor). Its weights are not stored: they are drawn each time from ``seed_for(_WEIGHTS_SEED)``, so that
every version of the lab trains the same weights, and each round of a check new ones (no version can
replay an earlier round's results).
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Callable

import torch
from torch import nn
from torch.utils.data import Dataset

from ..running.storage import LOAD_RANGE
from . import build_once, seed_for, storage_client

STORAGE_LATENCY_MS = 0.5  # a read outside the kit, where no storage service runs (lab.toml's [storage])
NUM_PHOTOS = 1024
NUM_CLASSES = 10
PHOTO_SIZE = 64
CROP_SIZE = 48
_FORMAT = "capstone-v5"  # the data's format; a change to the code that builds it rebuilds it too (labkit.fingerprint)
_DATA_SEED = 30_000
_AUGMENT_SEED = 2_000_003
_WEIGHTS_SEED = 20000290
_MEAN, _STD = 0.5, 0.25  # per channel, of the photos scaled to [0, 1]


def _draw_all() -> torch.Tensor:
    """Every photo, (NUM_PHOTOS, 3, PHOTO_SIZE, PHOTO_SIZE) uint8: a class-coloured blob on a noisy gradient, drawn
    at once."""
    g = torch.Generator().manual_seed(_DATA_SEED)
    n, size = NUM_PHOTOS, PHOTO_SIZE
    labels = torch.arange(n) % NUM_CLASSES
    ys, xs = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    base = torch.rand(n, 3, 1, 1, generator=g) * 0.5
    img = base + 0.3 * (xs / size) + 0.15 * torch.rand(n, 3, size, size, generator=g)
    cy, cx = torch.randint(20, size - 20, (2, n, 1, 1), generator=g)
    radius = (6 + labels).view(n, 1, 1)
    blob = ((ys - cy) ** 2 + (xs - cx) ** 2) < radius**2  # (n, size, size)
    hue = torch.stack([labels % 3 == 0, labels % 3 == 1, labels % 3 == 2], dim=1).float().view(n, 3, 1, 1)
    colour = (0.35 + 0.06 * labels).view(n, 1, 1, 1) * hue
    img = torch.where(blob[:, None], colour, img)
    return (img.clamp(0, 1) * 255).round().to(torch.uint8)


def _name(index: int) -> str:
    return f"{index:05d}.jpg"


def _write(folder: Path) -> None:
    from PIL import Image

    for i, photo in enumerate(_draw_all()):
        Image.fromarray(photo.permute(1, 2, 0).contiguous().numpy()).save(folder / _name(i), format="JPEG",
                                                                          quality=90)
    labels = [i % NUM_CLASSES for i in range(NUM_PHOTOS)]
    (folder / "index.json").write_text(json.dumps({"labels": labels}))


def ensure(data_dir: str | os.PathLike) -> Path:
    """Generate the photos once; return their folder."""
    return build_once(data_dir, "capstone", _FORMAT, _write)


def _augmentation(index: int) -> tuple[int, int, bool]:
    """Sample ``index``'s random crop (its top and left) and whether it is flipped: drawn from ``index`` alone."""
    h = ((index + _AUGMENT_SEED) * 2_654_435_761) % 2**32  # Knuth's multiplicative hash
    span = PHOTO_SIZE - CROP_SIZE + 1
    return h % span, (h // span) % span, (h // span**2) % 2 == 1


class Photos(Dataset):
    """The photos, each read from storage, decoded and augmented when it is asked for."""

    num_classes = NUM_CLASSES

    def __init__(self, data_dir: str | os.PathLike):
        self.root = ensure(data_dir)
        self.labels = json.loads((self.root / "index.json").read_text())["labels"]

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        with torch.autograd.profiler.record_function(LOAD_RANGE):  # on the thread that loads it
            return self._load(index)

    def _load(self, index: int):
        from PIL import Image

        raw = self._storage_read(_name(index))  # waiting on storage
        img = Image.open(io.BytesIO(raw)).convert("RGB")
        top, left, flip = _augmentation(index)  # this sample's, in any process
        img = img.crop((left, top, left + CROP_SIZE, top + CROP_SIZE))
        if flip:
            img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        x = torch.frombuffer(bytearray(img.tobytes()), dtype=torch.uint8).view(CROP_SIZE, CROP_SIZE, 3)
        return x.permute(2, 0, 1).float().div_(255.0 * _STD).sub_(_MEAN / _STD), self.labels[index]

    def _storage_read(self, name: str) -> bytes:
        """One photo's bytes, from the kit's storage service, or after the same wait from the folder."""
        return storage_client.read_or_wait(name, self.root, STORAGE_LATENCY_MS)


class ConvNet(nn.Module):
    """Three convolutions (the last two of stride 2) and a linear head; ``act`` is the activation after each."""

    def __init__(self, act: Callable[[torch.Tensor], torch.Tensor], num_classes: int = NUM_CLASSES):
        super().__init__()
        self.act = act
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1, stride=2)
        self.conv3 = nn.Conv2d(16, 32, 3, padding=1, stride=2)
        self.head = nn.Linear(32, num_classes)
        g = torch.Generator().manual_seed(seed_for(_WEIGHTS_SEED))
        with torch.no_grad():
            for p in self.parameters():
                fan_in = p[0].numel() if p.dim() > 1 else p.numel()
                p.copy_(torch.randn(p.shape, generator=g) * (1.0 / fan_in) ** 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act(self.conv1(x))
        x = self.act(self.conv2(x))
        x = self.act(self.conv3(x))
        return self.head(x.mean(dim=(2, 3)))
