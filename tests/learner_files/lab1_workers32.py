"""Lab 1 with 32 DataLoader workers instead of the reference fix's 8: sound, but costly to start.

Thirty-two reads in flight at once, one per worker process: the wait on
storage is gone from the trace, and each sample's augmentation is seeded from
its index alone, so the samples are the original's. But 32 workers with
prefetch_factor=2 ask for 64 batches at once, the whole epoch, and on a
2-core machine they share the cores while they decode it: the first batch
arrives only after most of them are done. The check's report says that its
first step ran past the start-up it is allowed, and that the rest counts.
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
        num_workers=32,
        persistent_workers=True,  # keep the workers alive from epoch to epoch
        prefetch_factor=2,  # batches each worker keeps ready
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
