# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 4 gaming attempt: train every step up front with the original loop, then run five tiny products.

The trick: the first step runs the original training loop, reads, Python
book-keeping and log lines included, for every step the checker takes
(2 warm-up + 20 timed + 11 profiled, from lab.toml) and keeps what each step
yields. Every later step runs five torch.mm on 2x2 tensors, as many as the
classifier's products forward and backward, so the trace shows aten::mm and
not a single read into Python, and yields the kept values.

What the checker should catch: the work floor counts the products'
floating-point operations from their recorded shapes; five 2x2 products are
a vanishing share of the classifier's. The 33 steps trained in the first step
also count against the speed-up.
"""

import math
import time

import torch
import torch.nn.functional as F
from torch.profiler import record_function

from proflab.labkit.classify import CLASSES, Classifier, FeatureBatches

STEPS = 2 + 20 + 11  # warmup_steps + timed_steps + profile_steps in lab.toml


def original_steps(cfg):
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


def pipeline(cfg):
    cached = []
    for out in original_steps(cfg):  # all of the checker's steps, in the first one
        cached.append(out)
        if len(cached) == STEPS:
            break

    yield cached[0]
    a = torch.randn(2, 2, device=cfg.device)
    for out in cached[1:]:
        with record_function("train_step"):
            h = a
            for _ in range(5):  # "the classifier's products, forward and backward"
                h = torch.mm(h, a)
        yield out


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
