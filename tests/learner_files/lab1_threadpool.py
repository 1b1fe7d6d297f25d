"""Lab 1, fixed with a pool of threads instead of DataLoader worker processes.

The trace of the original shows every step waiting on storage, one sample
after another. The waits are I/O: a thread that waits for a read holds no
lock, so 16 threads in the training process keep 16 reads in flight, and the
samples of the next batch load while the model trains on this one.

The order of the samples is the original's: a DataLoader over the indices
alone, shuffled with the same generator, hands out each batch's indices as
the original's DataLoader would. Each batch is collated as the DataLoader's
default_collate does: the images stacked, the labels one int64 tensor.
"""

from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn.functional as F
from torch.profiler import record_function
from torch.utils.data import DataLoader

from proflab.labkit.photos import PhotoDataset, SmallCNN

THREADS = 16  # reads in flight at once
AHEAD = 2  # batches being loaded while the model trains


def collate(samples):
    """What default_collate makes of (image, label) pairs: a stacked batch and an int64 tensor."""
    images = torch.stack([image for image, _ in samples])
    labels = torch.tensor([label for _, label in samples])
    return images, labels


def pipeline(cfg):
    dataset = PhotoDataset(cfg.data_dir)
    order = DataLoader(  # indices only: the same shuffle, from the same generator, as the original
        range(len(dataset)),
        batch_size=cfg.batch_size,
        shuffle=True,
        generator=torch.Generator().manual_seed(cfg.seed),
        num_workers=0,
    )

    torch.manual_seed(cfg.seed)
    model = SmallCNN(dataset.num_classes).to(cfg.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    pool = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="photo-reader")
    pending = []  # each entry: one batch's samples, as futures in the batch's order
    indices = iter(order)

    def sample(i):
        return dataset[i]  # read from storage, decode, augment: the waits overlap across threads

    def load_next():
        batch = next(indices, None)
        if batch is not None:
            pending.append([pool.submit(sample, i) for i in batch.tolist()])

    try:
        for _ in range(AHEAD):
            load_next()
        while pending:
            samples = [f.result() for f in pending.pop(0)]
            load_next()  # keep AHEAD batches loading while this one trains
            images, labels = collate(samples)
            with record_function("train_step"):
                images, labels = images.to(cfg.device), labels.to(cfg.device)
                loss = F.cross_entropy(model(images), labels)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
            yield {"loss": loss, "labels": labels}
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
