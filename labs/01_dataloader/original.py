"""Lab 1: the starved DataLoader.

A small CNN learns to classify photos. The photos live on network storage:
each read waits about 8 ms before a byte arrives, then the JPEG is decoded and
augmented on the CPU. The model itself is tiny. So where does a training step
spend its time?

    proflab run dataloader       profile this file (or: python exercise.py)
    proflab tensorboard          look at the trace
    proflab check dataloader     measure your fix against the original

The checker calls pipeline(cfg) and takes one training step for each value it
yields. cfg carries the device, the batch size, the seed and the data folder.
"""

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

    for images, labels in loader:
        with record_function("train_step"):  # a label of our own, in the trace and the tables
            images, labels = images.to(cfg.device), labels.to(cfg.device)
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        yield {"loss": loss, "labels": labels}


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
