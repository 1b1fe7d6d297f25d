# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 9 attempt: no DataLoader at all, the batches made by a generator of the file's own.

The trick: the reference fix's fused GELU and metrics kept, and the loading
written as a plain Python generator that shuffles the indices with the
original's generator and reads, decodes and augments each photo in the main
process, inside the step, one after another, as the original's DataLoader
did. With no DataLoader there is no DataLoader bar in the trace to measure:
its wait reads 0 ms, while every photo is still waited for in turn.

What the checker should catch: loading is the DataLoader's wait wherever it
runs, whatever makes the batches.
"""

import torch
import torch.nn.functional as F
from torch.profiler import record_function

from proflab.labkit.capstone import ConvNet, Photos


def batches(dataset, batch_size, generator):
    """The batches a shuffled DataLoader with drop_last hands out, epoch after epoch, made here."""
    epoch = 0
    while True:  # each epoch draws from the generator as a DataLoader's does: then a seed, then the order
        if epoch:
            torch.randperm(len(dataset), generator=generator)
        torch.empty((), dtype=torch.int64).random_(generator=generator)
        epoch += 1
        order = torch.randperm(len(dataset), generator=generator).tolist()
        for start in range(0, len(order) - batch_size + 1, batch_size):
            samples = [dataset[i] for i in order[start:start + batch_size]]
            yield torch.stack([s[0] for s in samples]), torch.tensor([s[1] for s in samples])


def pipeline(cfg):
    dataset = Photos(cfg.data_dir)
    model = ConvNet(act=lambda x: F.gelu(x, approximate="tanh")).to(cfg.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    classes = dataset.num_classes
    seen = torch.zeros(classes, device=cfg.device)
    right = torch.zeros(classes, device=cfg.device)
    top3 = torch.zeros((), device=cfg.device)
    confidence = torch.zeros((), dtype=torch.float64, device=cfg.device)
    total = 0

    for images, labels in batches(dataset, cfg.batch_size, torch.Generator().manual_seed(cfg.seed)):
        images, labels = images.to(cfg.device), labels.to(cfg.device)
        with record_function("train_step"):
            logits = model(images)
            loss = F.cross_entropy(logits, labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        with record_function("metrics"), torch.no_grad():
            probs = logits.softmax(dim=1)
            seen.index_add_(0, labels, torch.ones_like(probs[:, 0]))
            right.index_add_(0, labels, (probs.argmax(dim=1) == labels).float())
            top3 += (probs.topk(3, dim=1).indices == labels[:, None]).any(dim=1).sum()
            confidence += probs.gather(1, labels[:, None]).sum()
        total += len(labels)

        yield {"loss": loss.detach(), "labels": labels, "accuracy": right / seen.clamp(min=1),
               "top3": top3 / total,
               "confidence": confidence / total}


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
