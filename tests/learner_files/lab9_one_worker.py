"""Lab 9, a sound fix: one DataLoader worker, the activation as an nn.GELU module, the per-class counts with
torch.bincount."""

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import record_function
from torch.utils.data import DataLoader

from proflab.labkit.capstone import ConvNet, Photos


def pipeline(cfg):
    on_cuda = cfg.device.type == "cuda"
    dataset = Photos(cfg.data_dir)
    loader = DataLoader(dataset, batch_size=cfg.batch_size, shuffle=True, drop_last=True,
                        generator=torch.Generator().manual_seed(cfg.seed),
                        num_workers=1,  # one process decodes the next batches while the model trains
                        persistent_workers=True,  # started once, not at every epoch
                        pin_memory=on_cuda)  # page-locked buffers: an asynchronous copy to the device

    model = ConvNet(act=nn.GELU(approximate="tanh")).to(cfg.device)
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
            with record_function("train_step"):
                logits = model(images)
                loss = F.cross_entropy(logits, labels)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()

            with record_function("metrics"), torch.no_grad():  # the whole batch at once, on the device
                probs = logits.softmax(dim=1)
                seen += torch.bincount(labels, minlength=classes)
                right += torch.bincount(labels, weights=(probs.argmax(dim=1) == labels).float(), minlength=classes)
                top3 += (probs.topk(3, dim=1).indices == labels[:, None]).any(dim=1).sum()
                confidence += probs.gather(1, labels[:, None]).sum()
            total += len(labels)  # a shape is known on the host: no read

            yield {"loss": loss.detach(), "labels": labels, "accuracy": right / seen.clamp(min=1),
                   "top3": top3 / total,
                   "confidence": confidence / total}


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
