"""Lab 3's world: batches of token embeddings, and the weights of one transformer block.

The batches are generated deterministically under ``data/tokens`` the first
time they are needed: each holds the input embeddings of a few sequences and
the target the block learns to produce for them. ``TokenBatches.batches``
hands them out in order.

The block's weights are not stored: ``init_params`` draws them from a fixed
seed every time, so every version of the lab starts from exactly the same
weights. How the block computes with them is the lesson, and lives in the lab
file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import torch

from . import build_once, handout, save, seed_for

NUM_BATCHES = 64
BATCH = 4  # sequences per batch
SEQ_LEN = 256  # tokens per sequence
DIM = 32  # width of a token's embedding
HEADS = 4  # attention heads; each one DIM // HEADS wide
MLP_DIM = 4 * DIM
_FORMAT = "tokens-v1"  # the data's format; a change to the code that builds it rebuilds it too (labkit.fingerprint)
_DATA_SEED = 4_000_037
_WEIGHTS_SEED = 5_000_011


def _write_tokens(folder: Path) -> None:
    g = torch.Generator().manual_seed(_DATA_SEED)
    inputs = torch.randn(NUM_BATCHES, BATCH, SEQ_LEN, DIM, generator=g)
    # A target that depends on earlier tokens: each token's running mean, mixed by a fixed matrix.
    positions = torch.arange(1, SEQ_LEN + 1, dtype=torch.float32).view(1, 1, SEQ_LEN, 1)
    running = inputs.cumsum(dim=2) / positions
    mix = torch.randn(DIM, DIM, generator=g) / DIM ** 0.5
    targets = inputs + torch.tanh(running @ mix)
    save({"inputs": inputs, "targets": targets}, folder / "tokens.pt")


def ensure_tokens(data_dir: str | os.PathLike) -> Path:
    """Generate the token batches once; return their folder."""
    return build_once(data_dir, "tokens", _FORMAT, _write_tokens)


class TokenBatches:
    """The token batches under ``data_dir/tokens``, in a fixed order."""

    def __init__(self, data_dir: str | os.PathLike):
        saved = torch.load(ensure_tokens(data_dir) / "tokens.pt")
        self.inputs: torch.Tensor = saved["inputs"]
        self.targets: torch.Tensor = saved["targets"]

    def batches(self, device: torch.device | str = "cpu") -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """``(inputs, targets)`` for every batch, each ``(BATCH, SEQ_LEN, DIM)``, on ``device``.

        In a check, which stored batch each step takes is handed out by the checker as the step begins
        (``labkit.handout``); elsewhere they come in order.
        """
        for step in range(len(self.inputs)):
            i = handout.next_index(len(self.inputs), step)
            yield self.inputs[i].to(device), self.targets[i].to(device)


def init_params(device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """The block's weights, drawn from a fixed seed, as leaf tensors that require grad.

    ``ln1_*`` and ``ln2_*`` are the scale and shift of the two LayerNorms;
    ``qkv`` projects a token to its query, key and value (``DIM`` to ``3 * DIM``);
    ``proj`` mixes the heads' outputs; ``fc1`` and ``fc2`` are the MLP. Every
    matrix is stored ``(in, out)``, to be used as ``x @ w + b``.
    """
    g = torch.Generator().manual_seed(seed_for(_WEIGHTS_SEED))

    def matrix(n_in: int, n_out: int) -> torch.Tensor:
        return torch.randn(n_in, n_out, generator=g) / n_in ** 0.5

    params = {
        "ln1_weight": 1.0 + 0.1 * torch.randn(DIM, generator=g), "ln1_bias": 0.1 * torch.randn(DIM, generator=g),
        "qkv_weight": matrix(DIM, 3 * DIM), "qkv_bias": torch.zeros(3 * DIM),
        "proj_weight": matrix(DIM, DIM), "proj_bias": torch.zeros(DIM),
        "ln2_weight": 1.0 + 0.1 * torch.randn(DIM, generator=g), "ln2_bias": 0.1 * torch.randn(DIM, generator=g),
        "fc1_weight": matrix(DIM, MLP_DIM), "fc1_bias": torch.zeros(MLP_DIM),
        "fc2_weight": matrix(MLP_DIM, DIM), "fc2_bias": torch.zeros(DIM),
    }
    return {name: p.to(device).requires_grad_() for name, p in params.items()}
