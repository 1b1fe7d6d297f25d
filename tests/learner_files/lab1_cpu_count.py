"""Lab 1, fixed with as many DataLoader workers as the machine has cores (``os.cpu_count()``).

Natural code: ``import os`` to size the pool by the machine. The audit lets it through, since every run is
sandboxed. Each sample's augmentation is seeded from its index alone, so every worker count loads the same
samples, in the same order, with the same pixels; only the speed changes.
"""

import os

import torch
import torch.nn.functional as F
from torch.profiler import record_function
from torch.utils.data import DataLoader

from proflab.labkit.photos import PhotoDataset, SmallCNN


def pipeline(cfg):
    dataset = PhotoDataset(cfg.data_dir)
    on_cuda = cfg.device.type == "cuda"
    loader = DataLoader(
        dataset,
        batch_size=cfg.batch_size,
        shuffle=True,
        generator=torch.Generator().manual_seed(cfg.seed),
        num_workers=os.cpu_count() or 2,  # one worker per core
        persistent_workers=True,  # keep the workers alive from epoch to epoch
        prefetch_factor=8,  # batches each worker keeps ready
        pin_memory=on_cuda,  # page-locked buffers make the copy asynchronous
    )

    torch.manual_seed(cfg.seed)
    model = SmallCNN(dataset.num_classes).to(cfg.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    for images, labels in loader:
        with record_function("train_step"):
            images = images.to(cfg.device, non_blocking=on_cuda)
            labels = labels.to(cfg.device, non_blocking=on_cuda)
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        yield {"loss": loss, "labels": labels}


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
