"""Lab 4: a training loop that keeps stopping to talk to the host.

A classifier learns 100 classes from feature vectors. The training loop also
keeps the books, as real training code does: it checks the loss for NaN, keeps
a loss history, tracks accuracy, a confusion matrix and the model's mean
confidence, times each step and prints a log line. The model is small, yet a
step takes far longer than its forward and backward passes. Why?

    proflab run syncs            profile this file (or: python exercise.py)
    proflab tensorboard          look at the trace
    proflab check syncs          measure your fix against the original

The checker calls pipeline(cfg) and takes one training step for each value it
yields. Every cfg.log_every steps the pipeline also yields the metrics it has
kept so far; they must stay exactly what they are. cfg carries the device, the
seed, the data folder, the learning rate (cfg.lr) and cfg.log_every.
"""

import math
import time

import torch
import torch.nn.functional as F

from proflab.labkit.classify import CLASSES, Classifier, FeatureBatches


def pipeline(cfg):
    data = FeatureBatches(cfg.data_dir)
    model = Classifier().to(cfg.device)  # the same initial weights in every version
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)

    losses = []  # the loss of every step
    confidences = []  # the mean top-class probability of every step
    confusion = [[0] * CLASSES for _ in range(CLASSES)]  # confusion[true][predicted]
    correct = seen = 0

    for step, (x, y) in enumerate(data.batches(cfg.device)):
        start = time.perf_counter()
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        if math.isnan(loss.item()):
            raise FloatingPointError(f"the loss is NaN at step {step}")
        opt.zero_grad()
        loss.backward()
        opt.step()

        # Book-keeping, in Python.
        losses.append(loss.item())
        preds = logits.argmax(dim=1).cpu().tolist()
        labels = y.cpu().tolist()
        correct += sum(p == t for p, t in zip(preds, labels))
        seen += len(labels)
        for t, p in zip(labels, preds):
            confusion[t][p] += 1
        probs = logits.softmax(dim=1).detach().cpu().tolist()
        confidences.append(sum(max(row) for row in probs) / len(probs))

        if cfg.device.type == "cuda":
            torch.cuda.synchronize()  # so that the time below is right
        ms = (time.perf_counter() - start) * 1000
        print(f"step {step:3d}  loss {losses[-1]:.4f}  accuracy {correct / seen:.3f}  "
              f"confidence {confidences[-1]:.3f}  {ms:.1f} ms")

        out = {"loss": losses[-1]}
        if (step + 1) % cfg.log_every == 0:  # the metrics so far, every log_every steps
            out.update(accuracy=correct / seen, confusion=torch.tensor(confusion),
                       confidence=sum(confidences) / len(confidences),
                       weights=torch.stack([p.detach().norm() for p in model.parameters()]))
        yield out


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
