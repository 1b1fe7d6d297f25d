# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 9 attempt: the reference fix's loader and GELU, the original's per-sample books, each number read
as the size of a torch.bincount.

The trick: for every sample, its label, its predicted class and whether the
label is among the three most probable are read into Python as the size of a
bincount (a bincount of [v] has v + 1 bins), and counted in Python as the
original counts them: three reads a sample, no .item() and no .tolist() in
the trace.

What the checker should catch: the evidence counts every bincount as a read
(on CUDA each waits for the device), as many a step as the original's
per-sample .item() calls.
"""

import torch
import torch.nn.functional as F
from torch.profiler import record_function
from torch.utils.data import DataLoader

from proflab.labkit.capstone import ConvNet, Photos


def pipeline(cfg):
    on_cuda = cfg.device.type == "cuda"
    dataset = Photos(cfg.data_dir)
    loader = DataLoader(dataset, batch_size=cfg.batch_size, shuffle=True, drop_last=True,
                        generator=torch.Generator().manual_seed(cfg.seed),
                        num_workers=2,  # read and decode the next batches while the model trains on this one
                        persistent_workers=True,  # started once, not at every epoch
                        pin_memory=on_cuda)  # page-locked buffers: an asynchronous copy to the device

    model = ConvNet(act=lambda x: F.gelu(x, approximate="tanh")).to(cfg.device)  # one fused operator
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    classes = dataset.num_classes
    seen = [0] * classes  # samples seen so far, per class, counted in Python
    right = [0] * classes  # of those, predicted right
    top3 = 0  # samples whose true class is among the three most probable
    confidence = torch.zeros((), dtype=torch.float64, device=cfg.device)  # the probability given to the true class
    total = 0

    while True:  # epoch after epoch
        for images, labels in loader:
            images = images.to(cfg.device, non_blocking=on_cuda)
            labels = labels.to(cfg.device, non_blocking=on_cuda)
            with record_function("train_step"):
                logits = model(images)
                loss = F.cross_entropy(logits, labels)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()

            with record_function("metrics"), torch.no_grad():  # per sample, as the original counts
                probs = logits.softmax(dim=1)
                preds = probs.argmax(dim=1)
                in_top3 = (probs.topk(3, dim=1).indices == labels[:, None]).any(dim=1).long()
                for i in range(len(labels)):  # each number read as the size of a bincount
                    label = len(labels[i:i + 1].bincount()) - 1
                    seen[label] += 1
                    right[label] += int(len(preds[i:i + 1].bincount()) - 1 == label)
                    top3 += len(in_top3[i:i + 1].bincount()) - 1
                confidence += probs.gather(1, labels[:, None]).sum()
            total += len(labels)  # a shape is known on the host: no read

            yield {"loss": loss.detach(), "labels": labels,
                   "accuracy": torch.tensor([r / max(s, 1) for r, s in zip(right, seen)]),
                   "top3": top3 / total,
                   "confidence": confidence / total}


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
