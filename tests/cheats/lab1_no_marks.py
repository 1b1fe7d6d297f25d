"""Lab 1 gaming attempt: close the pipe the checker times the steps by.

The trick: the original, untouched, plus a few lines at import. The runner's
spec (the JSON file named by sys.argv[1]) holds mark_fd, the write end of the
pipe through which the runner tells the checker where each step starts and
ends; the lab file closes it, hoping the checker then falls back on the
times the run reports about itself.

What the checker should catch: it trusts only its own stamps of those marks;
a run whose marks stop after the start (or never come) cannot be followed,
and fails. The source audit refuses open, sys.argv and os.close in a lab
file.
"""

import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.profiler import record_function
from torch.utils.data import DataLoader

from proflab.labkit.photos import PhotoDataset, SmallCNN

try:
    with open(sys.argv[1]) as _spec:
        _mark_fd = json.load(_spec).get("mark_fd")
    if _mark_fd is not None:
        os.close(_mark_fd)
except (IndexError, OSError, ValueError):
    pass  # not run by the checker


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

    for images, labels in loader:
        with record_function("train_step"):
            images, labels = images.to(cfg.device), labels.to(cfg.device)
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        yield {"loss": loss, "labels": labels}


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
