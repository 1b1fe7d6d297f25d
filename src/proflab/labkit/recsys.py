"""Lab 2's world: a log of recommendation requests, and a small scoring model.

Every request asks "how likely is this user to click this item?" and carries
two *bags* of ids, each of its own length:

    user bag   the user's features: who they are, what they did recently
               (4 to 40 ids into the user table)
    item bag   the candidate item's features: the item, its category, its tags
               (1 to 8 ids into the item table)

The requests are generated deterministically under ``data/requests`` the first
time they are needed, and stored packed: for each side, one flat tensor of
ids and the offset where each request's bag starts. ``RequestLog.batches`` hands them out in arrival order.

The model's weights (two embedding tables and an MLP) are not stored: they are
drawn from a fixed seed every time a ``Recommender`` is built, so every
version of the lab scores with exactly the same weights.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch
from torch import nn

from . import build_once, save, seed_for

NUM_REQUESTS = 6144
USER_VOCAB = 100_000  # rows of the user table
ITEM_VOCAB = 50_000  # rows of the item table
EMBEDDING_DIM = 32
USER_BAG = (4, 40)  # shortest and longest user bag
ITEM_BAG = (1, 8)  # shortest and longest item bag
_FORMAT = "requests-v2"  # the data's format; a change to the code that builds it rebuilds it too (labkit.fingerprint)
_REQUESTS_SEED = 2_000_003
_WEIGHTS_SEED = 3_000_017


def _zipf_ids(n: int, vocab: int, g: torch.Generator) -> torch.Tensor:
    """``n`` ids in ``[0, vocab)``, a few popular ones far more often than the rest."""
    u = torch.rand(n, generator=g, dtype=torch.float64)
    return ((vocab ** u - 1.0)).long().clamp_(0, vocab - 1)


def _bags(lengths: torch.Tensor, vocab: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    ids = _zipf_ids(int(lengths.sum()), vocab, g)
    offsets = torch.cumsum(lengths, 0) - lengths
    return ids, offsets


def _write_requests(folder: Path) -> None:
    g = torch.Generator().manual_seed(_REQUESTS_SEED)
    user_lengths = torch.randint(USER_BAG[0], USER_BAG[1] + 1, (NUM_REQUESTS,), generator=g)
    item_lengths = torch.randint(ITEM_BAG[0], ITEM_BAG[1] + 1, (NUM_REQUESTS,), generator=g)
    user_ids, user_offsets = _bags(user_lengths, USER_VOCAB, g)
    item_ids, item_offsets = _bags(item_lengths, ITEM_VOCAB, g)
    save({"user_ids": user_ids, "user_offsets": user_offsets,
          "item_ids": item_ids, "item_offsets": item_offsets}, folder / "requests.pt")


def ensure_requests(data_dir: str | os.PathLike) -> Path:
    """Generate the request log once; return its folder."""
    return build_once(data_dir, "requests", _FORMAT, _write_requests)


def _split(ids: torch.Tensor, offsets: torch.Tensor) -> list[list[int]]:
    starts = offsets.tolist()
    ends = starts[1:] + [len(ids)]
    flat = ids.tolist()
    return [flat[s:e] for s, e in zip(starts, ends)]


@dataclass(frozen=True)
class Batch:
    """A batch of requests: every request's two bags of ids, packed.

    ``user_ids`` holds every request's user bag, one after another;
    ``user_offsets[r]`` is where request ``r``'s bag starts in it. The same
    for the item side. ``len(batch)`` is the number of requests.
    """

    user_ids: torch.Tensor
    user_offsets: torch.Tensor
    item_ids: torch.Tensor
    item_offsets: torch.Tensor

    def __len__(self) -> int:
        return len(self.user_offsets)

    def requests(self) -> list[tuple[list[int], list[int]]]:
        """One ``(user_bag, item_bag)`` pair of plain Python lists per request."""
        return list(zip(_split(self.user_ids, self.user_offsets), _split(self.item_ids, self.item_offsets)))

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "Batch":
        return Batch(*(t.to(device, non_blocking=non_blocking)
                       for t in (self.user_ids, self.user_offsets, self.item_ids, self.item_offsets)))

    def pin_memory(self) -> "Batch":
        return Batch(*(t.pin_memory() for t in (self.user_ids, self.user_offsets, self.item_ids, self.item_offsets)))


class RequestLog:
    """The recorded requests, replayed in arrival order."""

    def __init__(self, data_dir: str | os.PathLike):
        self.root = ensure_requests(data_dir)
        log = torch.load(self.root / "requests.pt", weights_only=True)
        self.user_ids, self.item_ids = log["user_ids"], log["item_ids"]
        # Python lists: cutting a batch out of the log costs no tensor indexing.
        self.user_starts = log["user_offsets"].tolist() + [len(self.user_ids)]
        self.item_starts = log["item_offsets"].tolist() + [len(self.item_ids)]

    def __len__(self) -> int:
        return len(self.user_starts) - 1

    @staticmethod
    def _side(ids: torch.Tensor, starts: list[int], start: int, stop: int):
        begin, end = starts[start], starts[stop]
        offsets = torch.tensor(starts[start:stop], dtype=torch.long) - begin
        return ids[begin:end].clone(), offsets

    def batches(self, batch_size: int) -> Iterator[Batch]:
        """Consecutive batches of ``batch_size`` requests; a short last batch is dropped.

        Every batch is cut out of the log before the first is served (a few slices each, in the
        first step), so that a profiled step holds the pipeline's own lookups, not the log's."""
        cut = [Batch(*self._side(self.user_ids, self.user_starts, start, start + batch_size),
                     *self._side(self.item_ids, self.item_starts, start, start + batch_size))
               for start in range(0, len(self) - batch_size + 1, batch_size)]
        yield from cut


class Recommender(nn.Module):
    """Two embedding tables and an MLP that turns a user and an item into a click score.

    ``users`` and ``items`` hold one learned vector per id. A request's bag of
    ids becomes one vector by the *mean* of its rows; the two vectors,
    concatenated (user first), go through ``mlp``, which ends in a sigmoid:
    the score is a probability, one per request. The weights come from a fixed
    seed, the same in every process and every version of the lab.
    """

    def __init__(self):
        super().__init__()
        with torch.random.fork_rng(devices=[]):  # leave the caller's random state alone
            torch.manual_seed(seed_for(_WEIGHTS_SEED))
            self.users = nn.Embedding(USER_VOCAB, EMBEDDING_DIM)
            self.items = nn.Embedding(ITEM_VOCAB, EMBEDDING_DIM)
            self.mlp = nn.Sequential(
                nn.Linear(2 * EMBEDDING_DIM, 128), nn.ReLU(),
                nn.Linear(128, 64), nn.ReLU(),
                nn.Linear(64, 1), nn.Sigmoid(),
            )
        self.eval()
        self.requires_grad_(False)
