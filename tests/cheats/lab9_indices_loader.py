# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 9 attempt: the photos loaded in the training loop, from a DataLoader that hands out indices.

The trick: the reference fix's fused GELU and metrics kept, and its
DataLoader replaced by one over the indices alone (the same shuffle, from
the same generator): it waits for nothing. Each photo is then read from
storage, decoded and augmented in the loop itself, one after another, in
the main process, as the original's loader did. The DataLoader's bar in the
trace is empty; the step waits on storage as long as the original's.

What the checker should catch: loading is the DataLoader's wait wherever it
runs.
"""

import torch
import torch.nn.functional as F
from torch.profiler import record_function
from torch.utils.data import DataLoader

from proflab.labkit.capstone import ConvNet, Photos


def pipeline(cfg):
    on_cuda = cfg.device.type == "cuda"
    dataset = Photos(cfg.data_dir)
    order = DataLoader(range(len(dataset)), batch_size=cfg.batch_size, shuffle=True, drop_last=True,
                       generator=torch.Generator().manual_seed(cfg.seed))  # indices only: nothing to wait for

    model = ConvNet(act=lambda x: F.gelu(x, approximate="tanh")).to(cfg.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    classes = dataset.num_classes
    seen = torch.zeros(classes, device=cfg.device)
    right = torch.zeros(classes, device=cfg.device)
    top3 = torch.zeros((), device=cfg.device)
    confidence = torch.zeros((), dtype=torch.float64, device=cfg.device)
    total = 0

    while True:
        for indices in order:
            samples = [dataset[i] for i in indices.tolist()]  # read, decode, augment: here, one by one
            images = torch.stack([image for image, _ in samples]).to(cfg.device)
            labels = torch.tensor([label for _, label in samples]).to(cfg.device)
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
