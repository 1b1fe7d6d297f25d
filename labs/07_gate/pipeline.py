"""Lab 7's pipeline: lab 1's training loop, with its fix (you need not have done lab 1).

A small CNN learns to classify photos that live on modelled network storage:
every read waits about 8 ms. Eight DataLoader worker processes read, decode
and augment the next batches while the model trains on this one, so a step no
longer waits for its data. This is the code lab 7's gate keeps fast: the same
code as lab 1's reference fix (labs/01_dataloader/solution.py), a copy of the
lab's own, for you to gate and to break on purpose. From the kit's folder:

    proflab gate labs/07_gate/pipeline.py --baseline labs/01_dataloader/original.py --lab 1
        the fix against the loader it replaced: an improvement

    proflab gate labs/07_gate/pipeline.py --baseline labs/01_dataloader/solution.py --lab 1
        once you have set num_workers=0 below (and removed persistent_workers
        and prefetch_factor, which need workers): a regression, and the report
        names the DataLoader

Put the workers back afterwards (`git checkout -- labs/07_gate/pipeline.py`).
`proflab check 7` never runs this file: it gates the kit's lab-1 files, as
they are shipped, with your settings (exercise.toml).
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

