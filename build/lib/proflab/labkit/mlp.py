"""Lab 5's world: a residual MLP, its training batches and a validation set.

The data are generated deterministically under ``data/tabular`` the first time
they are needed: each sample is the centre of its class plus noise, so the
model learns and its validation loss falls. ``Tabular.batches`` hands out the
training batches in order; ``Tabular.validation`` is the held-out set, in
chunks the size of a batch of evaluation.

``ResidualMLP`` always starts from the same weights, drawn from a fixed seed,
so every version of the lab trains exactly the same model. Its blocks
(LayerNorm, a 4× wider hidden layer, GELU) save several activations for the
backward pass, as a transformer's MLP does: what a forward pass with autograd
on keeps alive is the lesson, and lives in the lab file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from . import build_once, save, seed_for

NUM_BATCHES = 40
BATCH = 256  # training samples per batch
VALIDATION = 8192  # held-out samples
EVAL_BATCH = 1024  # validation samples per forward pass
FEATURES = 64  # width of a sample
CLASSES = 10
HIDDEN = 128
BLOCKS = 2
_FORMAT = "tabular-v1"  # the data's format; a change to the code that builds it rebuilds it too (labkit.fingerprint)
_DATA_SEED = 8_000_009
_WEIGHTS_SEED = 9_000_011


def _write_tabular(folder: Path) -> None:
    g = torch.Generator().manual_seed(_DATA_SEED)
    centres = torch.randn(CLASSES, FEATURES, generator=g)
    labels = torch.randint(0, CLASSES, (NUM_BATCHES * BATCH + VALIDATION,), generator=g)
    inputs = centres[labels] + 2.0 * torch.randn(len(labels), FEATURES, generator=g)
    save({"inputs": inputs, "labels": labels}, folder / "tabular.pt")


def ensure_tabular(data_dir: str | os.PathLike) -> Path:
    """Generate the samples once; return their folder."""
    return build_once(data_dir, "tabular", _FORMAT, _write_tabular)


class Tabular:
    """The training batches and the validation set under ``data_dir/tabular``, in a fixed order."""

    def __init__(self, data_dir: str | os.PathLike, device: torch.device | str = "cpu"):
        saved = torch.load(ensure_tabular(data_dir) / "tabular.pt")
        inputs, labels = saved["inputs"].to(device), saved["labels"].to(device)  # about 5 MB, moved once
        train = NUM_BATCHES * BATCH
        self.inputs, self.labels = inputs[:train].view(NUM_BATCHES, BATCH, FEATURES), labels[:train].view(-1, BATCH)
        self.val_inputs, self.val_labels = inputs[train:], labels[train:]

    def batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """``(inputs, labels)`` for every training batch: ``(BATCH, FEATURES)`` floats and ``(BATCH,)`` ids."""
        yield from zip(self.inputs, self.labels)

    def validation(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The validation set in chunks of ``EVAL_BATCH`` samples."""
        yield from zip(self.val_inputs.split(EVAL_BATCH), self.val_labels.split(EVAL_BATCH))


class Block(nn.Module):
    """``x + W2 · gelu(W1 · layernorm(x))``, the MLP half of a transformer block."""

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(HIDDEN)
        self.up = nn.Linear(HIDDEN, 4 * HIDDEN)
        self.down = nn.Linear(4 * HIDDEN, HIDDEN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


class ResidualMLP(nn.Sequential):
    """From ``FEATURES`` to ``CLASSES`` logits through ``BLOCKS`` residual blocks, always from the same weights."""

    def __init__(self):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed_for(_WEIGHTS_SEED))
            super().__init__(nn.Linear(FEATURES, HIDDEN), *[Block() for _ in range(BLOCKS)],
                             nn.LayerNorm(HIDDEN), nn.Linear(HIDDEN, CLASSES))
