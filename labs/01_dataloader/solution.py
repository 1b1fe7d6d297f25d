"""Lab 1, reference solution: keep the GPU (or the CPU's math) fed.

The trace of the original shows every training step waiting inside
enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__: the main process
reads, decodes and augments each sample itself, one after another, and most of
that time is spent waiting on storage. Worker processes load the next batches
while the model trains on this one, and their waits overlap each other.

On CUDA, pinned (page-locked) host memory lets the copy to the device run
asynchronously with non_blocking=True. Persistent workers survive between
epochs, and prefetch_factor sets how many batches each worker keeps ready.
"""

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
        num_workers=8,  # storage waits overlap: 8 reads in flight at once
        persistent_workers=True,  # keep the workers alive from epoch to epoch
        prefetch_factor=4,  # each worker keeps up to 4 batches ready
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
