"""Lab 4's world: labelled feature vectors, and a small classifier to train on them.

The batches are generated deterministically under ``data/features`` the first
time they are needed: each sample is the centre of its class plus noise, so
the classifier learns, its predictions change from step to step, and the
confusion matrix fills in. ``FeatureBatches.batches`` hands them out in order.

``Classifier`` always starts from the same weights, drawn from a fixed seed,
so every version of the lab trains exactly the same model. How the training
loop logs its metrics is the lesson, and lives in the lab file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import torch
from torch import nn

from . import build_once, save, seed_for

NUM_BATCHES = 48
BATCH = 1024  # samples per batch
FEATURES = 64  # width of a sample
CLASSES = 100  # number of classes
HIDDEN = 128
_FORMAT = "features-v1"  # the data's format; a change to the code that builds it rebuilds it too (labkit.fingerprint)
_DATA_SEED = 6_000_011
_WEIGHTS_SEED = 7_000_003


def _write_features(folder: Path) -> None:
    g = torch.Generator().manual_seed(_DATA_SEED)
    centres = torch.randn(CLASSES, FEATURES, generator=g)
    labels = torch.randint(0, CLASSES, (NUM_BATCHES, BATCH), generator=g)
    inputs = centres[labels] + 1.5 * torch.randn(NUM_BATCHES, BATCH, FEATURES, generator=g)
    save({"inputs": inputs, "labels": labels}, folder / "features.pt")


def ensure_features(data_dir: str | os.PathLike) -> Path:
    """Generate the feature batches once; return their folder."""
    return build_once(data_dir, "features", _FORMAT, _write_features)


class FeatureBatches:
    """The labelled batches under ``data_dir/features``, in a fixed order."""

    def __init__(self, data_dir: str | os.PathLike):
        saved = torch.load(ensure_features(data_dir) / "features.pt")
        self.inputs: torch.Tensor = saved["inputs"]
        self.labels: torch.Tensor = saved["labels"]

    def batches(self, device: torch.device | str = "cpu") -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """``(inputs, labels)`` for every batch: ``(BATCH, FEATURES)`` floats and ``(BATCH,)`` class ids.

        The whole set (12 MB) moves to ``device`` once, before the first batch:
        a copy from the host per batch would make the host wait at every step
        (a copy from pageable memory synchronises), in every version alike,
        and hide the round trips this lab is about.
        """
        inputs, labels = self.inputs.to(device), self.labels.to(device)
        yield from zip(inputs, labels)


class Classifier(nn.Sequential):
    """An MLP from ``FEATURES`` to ``CLASSES`` logits, always from the same initial weights."""

    def __init__(self):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed_for(_WEIGHTS_SEED))
            super().__init__(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES))
