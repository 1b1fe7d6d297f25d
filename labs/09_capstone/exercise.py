"""Lab 9: a training script, as it grew.

A small convnet with GELU activations learns to classify photos: a
DataLoader reads each JPEG from storage, decodes and augments it, the model
trains with SGD, and the loop keeps the books a team wants to see: the
accuracy per class, the top-3 accuracy and the mean confidence in the true
class. It works, and the loss goes down, yet a step takes longer than it
should, for more than one reason, and which one matters most depends on
where it runs. Profile it, find what costs most, fix that, and profile again.

    proflab run capstone         profile this file (or: python exercise.py)
    proflab tensorboard          look at the trace
    proflab check capstone       measure your fix against the original

The checker calls pipeline(cfg) and takes one training step for each value it
yields. cfg carries the device, the batch size, the seed, the data folder and
the learning rate (cfg.lr).
"""

import math

import torch
import torch.nn.functional as F
from torch.profiler import record_function
from torch.utils.data import DataLoader

from proflab.labkit.capstone import ConvNet, Photos


def gelu(x):
    """GELU, by its tanh approximation."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def pipeline(cfg):
    dataset = Photos(cfg.data_dir)
    loader = DataLoader(dataset, batch_size=cfg.batch_size, shuffle=True, drop_last=True,
                        generator=torch.Generator().manual_seed(cfg.seed))

    model = ConvNet(act=gelu).to(cfg.device)  # the same initial weights in every version
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    classes = dataset.num_classes
    seen = [0] * classes  # samples seen so far, per class
    right = [0] * classes  # of those, predicted right
    top3 = 0  # samples whose true class is among the three most probable
    confidence = 0.0  # the sum of the probability given to the true class

    while True:  # epoch after epoch
        for images, labels in loader:
            images, labels = images.to(cfg.device), labels.to(cfg.device)
            with record_function("train_step"):
                logits = model(images)
                loss = F.cross_entropy(logits, labels)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()

            with record_function("metrics"):
                probs = logits.detach().softmax(dim=1)
                for i in range(len(labels)):
                    label = labels[i].item()
                    seen[label] += 1
                    right[label] += int(probs[i].argmax().item() == label)
                    top3 += int(label in probs[i].topk(3).indices.tolist())
                    confidence += probs[i, label].item()

            total = sum(seen)
            yield {"loss": loss.detach(), "labels": labels,
                   "accuracy": torch.tensor([r / max(s, 1) for r, s in zip(right, seen)]),
                   "top3": top3 / total, "confidence": confidence / total}


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
