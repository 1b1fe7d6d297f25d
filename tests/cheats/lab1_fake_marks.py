"""Lab 1 gaming attempt: write extra step marks into the checker's pipe.

The trick: the original, untouched, except that during the first step it
writes extra bytes (b"T", the mark of a timed step ending) into the mark pipe,
whose file descriptor it reads from the runner's spec (sys.argv[1]), hoping
the checker stamps timed steps that took no time and averages them in.

What the checker should catch: the marks must follow the exact order the
runner sends (B, W per warm-up step, S, T per timed step, E, then P and Q per
profiled step); any extra or missing byte breaks it and the run fails. The
source audit refuses open, sys.argv and os.write in a lab file.
"""

import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.profiler import record_function
from torch.utils.data import DataLoader

from proflab.labkit.photos import PhotoDataset, SmallCNN


def _mark_fd():
    try:
        with open(sys.argv[1]) as spec:
            return json.load(spec).get("mark_fd")
    except (IndexError, OSError, ValueError):
        return None  # not run by the checker


def pipeline(cfg):
    dataset = PhotoDataset(cfg.data_dir)
    loader = DataLoader(
        dataset,
        batch_size=cfg.batch_size,
        shuffle=True,
        generator=torch.Generator().manual_seed(cfg.seed),
        num_workers=0,
    )

    torch.manual_seed(cfg.seed)
    model = SmallCNN(dataset.num_classes).to(cfg.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    fd = _mark_fd()

    for step, (images, labels) in enumerate(loader):
        with record_function("train_step"):
            images, labels = images.to(cfg.device), labels.to(cfg.device)
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        if step == 0 and fd is not None:
            try:
                os.write(fd, b"T" * 12)  # twelve "timed steps" that took no time
            except OSError:
                pass
        yield {"loss": loss, "labels": labels}


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
