# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 1 gaming attempt: load every batch it will need in the first (untimed) step.

The trick: num_workers=0 as in the original, but the first step pulls every
batch the checker will take through the normal DataLoader into a list, paying all
the storage waits there, and every step trains from that list: the same
samples in the same order, so the results are the original's, and the timed
steps never wait on storage.

What the checker should catch: the first step is left out of the timing only
up to what the original's first step takes (plus a little slack and the
lab's startup_s); the rest of its time, here every read of the epoch, counts
as work moved out of the timed steps, and the version is slower than the
original overall.
"""

import itertools

import torch
import torch.nn.functional as F
from torch.profiler import record_function
from torch.utils.data import DataLoader

from proflab.labkit.photos import PhotoDataset, SmallCNN


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

    # The batches the checker takes (21 of the epoch's 64: the warm-up, timed
    # and profiled steps of lab.toml), all read in the first step.
    batches = iter(loader)
    ahead = [next(batches) for _ in range(21)]
    for images, labels in itertools.chain(ahead, batches):
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
