# audit: plain Python, every fix of the reference, with the books kept on a quarter of each batch
"""Lab 9 gaming attempt: the metrics computed on fewer samples.

The trick: the loader and the activation fixed as in the reference, and the per-class accuracy, the top-3
accuracy and the confidence counted on tensors, without a read, but only on the first quarter of each
batch, as if a sample of it told the same story: a quarter of the metric's work, on the CPU and, on CUDA,
of its kernels.

What the checker should catch: the metrics are not the original's. Same results compares every value
the pipeline yields at every step, and the accuracy of each class over a quarter of the samples is not
the accuracy over all of them.
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
                        num_workers=2,  # decode the next batches while the model trains on this one
                        persistent_workers=True,  # started once, not at every epoch
                        pin_memory=on_cuda)  # page-locked buffers: an asynchronous copy to the device

    model = ConvNet(act=lambda x: F.gelu(x, approximate="tanh")).to(cfg.device)  # one fused operator
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    classes = dataset.num_classes
    seen = torch.zeros(classes, device=cfg.device)  # samples seen so far, per class
    right = torch.zeros(classes, device=cfg.device)  # of those, predicted right
    top3 = torch.zeros((), device=cfg.device)  # samples whose true class is among the three most probable
    confidence = torch.zeros((), dtype=torch.float64, device=cfg.device)  # the probability given to the true class
    total = 0

    while True:  # epoch after epoch
        for images, labels in loader:
            images = images.to(cfg.device, non_blocking=on_cuda)
            labels = labels.to(cfg.device, non_blocking=on_cuda)
            batch_labels = labels
            with record_function("train_step"):
                logits = model(images)
                loss = F.cross_entropy(logits, labels)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()

            with record_function("metrics"), torch.no_grad():  # a quarter of the batch stands for all of it
                probs = logits[: len(labels) // 4].softmax(dim=1)
                labels = labels[: len(labels) // 4]
                seen.index_add_(0, labels, torch.ones_like(probs[:, 0]))
                right.index_add_(0, labels, (probs.argmax(dim=1) == labels).float())
                top3 += (probs.topk(3, dim=1).indices == labels[:, None]).any(dim=1).sum()
                confidence += probs.gather(1, labels[:, None]).sum()
            total += len(labels)

            yield {"loss": loss.detach(), "labels": batch_labels, "accuracy": right / seen.clamp(min=1),
                   "top3": top3 / total,
                   "confidence": confidence / total}


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
