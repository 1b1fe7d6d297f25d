# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 1 gaming attempt: train every step up front, then run three tiny convolutions per step.

The trick: the first step runs the original training for all the steps the
checker takes (3 warm-up + 8 timed + 5 profiled, from lab.toml) and keeps
each step's loss and labels. Every later step runs three convolutions on a
1x3x4x4 input, forward and backward, so the trace still shows
aten::convolution and aten::convolution_backward, and yields the kept values.

What the checker should catch: the work floor counts the convolutions'
floating-point operations from their recorded shapes, and three tiny ones are
a vanishing share of the model's; the first step's extra time (all the reads
and training of 16 steps) also counts, so it is not faster either.
"""

import torch
import torch.nn.functional as F
from torch.profiler import record_function
from torch.utils.data import DataLoader

from proflab.labkit.photos import PhotoDataset, SmallCNN

STEPS = 3 + 8 + 5  # warmup_steps + timed_steps + profile_steps in lab.toml


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

    results = []
    for images, labels in loader:  # all of the checker's steps, in the first one
        images, labels = images.to(cfg.device), labels.to(cfg.device)
        loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        results.append({"loss": loss.detach().clone(), "labels": labels.clone()})
        if len(results) == STEPS:
            break

    yield results[0]
    x = torch.randn(1, 3, 4, 4, device=cfg.device)
    weights = [torch.randn(3, 3, 3, 3, device=cfg.device, requires_grad=True) for _ in range(3)]
    for result in results[1:]:
        with record_function("train_step"):
            h = x
            for w in weights:  # three convolutions, forward and backward
                h = F.conv2d(h, w, padding=1)
            h.sum().backward()
        yield result


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
