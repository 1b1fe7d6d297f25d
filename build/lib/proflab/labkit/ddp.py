"""Lab 6's world: a wide MLP trained data-parallel, its samples, and a fingerprint of its weights.

The samples are lab 5's (``data/tabular``, generated once); ``Samples`` is
them as a ``torch.utils.data.Dataset``, for a ``DistributedSampler`` to shard
between the ranks. ``WideMLP`` has 1.9 million parameters in 8 hidden layers
of 512 (7.5 MB of float32 gradients at every backward pass), enough for
their all-reduce to weigh against the compute of a micro-batch of 8 samples,
as it does in real data-parallel training; it always starts from the same
weights, drawn from a fixed seed, so every version and every rank trains the
same model.

``fingerprint(model)`` is a few values of every parameter: the ranks of a
data-parallel job hold the same weights after every optimizer step, and the
checker compares these values between the ranks and with the original's.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from . import seed_for
from .mlp import CLASSES, FEATURES, NUM_BATCHES, BATCH, ensure_tabular

WIDTH = 512
LAYERS = 8  # hidden layers of WIDTH
_WEIGHTS_SEED = 6_000_007
FINGERPRINT_VALUES = 8  # values of each parameter in the fingerprint


class Samples(Dataset):
    """The training samples under ``data_dir/tabular``: ``(features, label)``, 10,240 of them."""

    def __init__(self, data_dir: str | os.PathLike):
        saved = torch.load(ensure_tabular(data_dir) / "tabular.pt")
        train = NUM_BATCHES * BATCH
        self.inputs, self.labels = saved["inputs"][:train], saved["labels"][:train]

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inputs[i], self.labels[i]


class WideMLP(nn.Sequential):
    """From ``FEATURES`` to ``CLASSES`` logits through ``LAYERS`` hidden layers of ``WIDTH``, from fixed weights."""

    def __init__(self):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed_for(_WEIGHTS_SEED))
            layers: list[nn.Module] = [nn.Linear(FEATURES, WIDTH), nn.GELU()]
            for _ in range(LAYERS - 1):
                layers += [nn.Linear(WIDTH, WIDTH), nn.GELU()]
            super().__init__(*layers, nn.Linear(WIDTH, CLASSES))


def loss_of(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The cross-entropy of the model's logits for ``x`` against the labels ``y``."""
    return F.cross_entropy(model(x), y)


def fingerprint(model: nn.Module) -> torch.Tensor:
    """The first ``FINGERPRINT_VALUES`` values of every parameter, as one vector (a copy)."""
    return torch.cat([p.detach().reshape(-1)[:FINGERPRINT_VALUES] for p in model.parameters()]).cpu()
