"""What a gate's pipeline file may import to wrap a training script it did not write for the kit.

``proflab gate`` runs a file's ``pipeline(cfg)``: a generator that builds what
it needs and yields once per training step (docs/ci.md). An ordinary training
script already has the parts, a loader, a model, an optimizer and a step; two
things it seldom has are what the gate needs of them:

- **the same values twice.** The gate compares every step's values between
  the two versions, and between two runs of the baseline: every random number
  generator the script draws from must start from ``cfg.seed``
  (``seed_everything``);
- **as many steps as the gate asks for.** A gate takes warm-up, timed and
  profiled steps (18 at its defaults), which a small dataset cut for CI runs
  out of in one epoch: ``endless`` goes on into the next epoch, as training
  does.

So a pipeline over a script's own functions is a few lines::

    import train
    from proflab.gatekit import endless, seed_everything

    def pipeline(cfg):
        seed_everything(cfg.seed)
        loader = train.make_loader(cfg.data_dir, cfg.batch_size, seed=cfg.seed)
        model = train.make_model(num_classes=4).to(cfg.device)
        optimizer = train.make_optimizer(model)
        for images, labels in endless(loader):
            loss = train.train_step(model, optimizer, images.to(cfg.device), labels.to(cfg.device))
            yield {"loss": loss, "labels": labels}

docs/examples/own-model/ is that example in full, with the settings for it,
and tests/test_own_model_gate.py gates it for real.
"""

from __future__ import annotations

import random
import sys
from typing import Any, Iterable, Iterator


def seed_everything(seed: int) -> None:
    """Seed every random number generator a training script commonly draws from: Python's ``random``,
    NumPy's global one (when NumPy is imported) and torch's (on every CUDA device too).

    A DataLoader that shuffles draws its order from torch's global generator unless it is given one
    of its own, and its workers' seeds from the same: seeded here, both come out the same in every
    run. NumPy's new-style generators (``np.random.default_rng()`` without a seed) and anything that
    reads the clock are not reached: seed them from ``cfg.seed`` in the script.
    """
    import torch

    random.seed(seed)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # every CUDA device's generator too


def endless(batches: Iterable[Any]) -> Iterator[Any]:
    """The batches of ``batches`` (a DataLoader), epoch after epoch, for as long as they are asked for.

    Each epoch is a new pass over the loader, as in training: a shuffling loader draws a new order,
    and a loader without ``persistent_workers`` starts its workers again (that time counts, as it does
    in training). A sampler with ``set_epoch`` (``DistributedSampler``) is told the epoch first. A loader
    that yields nothing raises ``ValueError`` rather than loop forever.
    """
    epoch = 0
    while True:
        for holder in (getattr(batches, "sampler", None), getattr(batches, "batch_sampler", None)):
            set_epoch = getattr(holder, "set_epoch", None)
            if callable(set_epoch):
                set_epoch(epoch)
        empty = True
        for batch in batches:
            empty = False
            yield batch
        if empty:
            raise ValueError(f"the loader yielded no batch in epoch {epoch}: is its data folder empty, or "
                             "smaller than one batch with drop_last=True?")
        epoch += 1
