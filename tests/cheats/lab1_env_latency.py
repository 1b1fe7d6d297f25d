"""Lab 1 gaming attempt: switch the storage latency off through the environment.

The trick: at import, set PROFLAB_STORAGE_LATENCY_MS to 0 and drop
PROFLAB_STORAGE, hoping the dataset then reads the photos without waiting.
The DataLoader stays single-process (num_workers=0), as in the original.

What the checker should catch: the latency lives in the checker's storage
service, not in the lab's process, and without the service's address the
dataset waits its own 8 ms per read anyway; the service then logs none of the
samples the steps used (the storage check), and the version is no faster than
the original. The source audit refuses os.environ in a lab file.
"""

import os

os.environ["PROFLAB_STORAGE_LATENCY_MS"] = "0"
os.environ.pop("PROFLAB_STORAGE", None)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.profiler import record_function  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from proflab.labkit.photos import PhotoDataset, SmallCNN  # noqa: E402


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
