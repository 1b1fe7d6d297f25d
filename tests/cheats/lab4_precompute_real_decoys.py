# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 4 gaming attempt: every original step in the first one, then the classifier's products on random data.

The trick: the first step runs the original training loop, reads, Python
book-keeping and log lines included, for every step the checker takes
(2 warm-up + 20 timed + 11 profiled, from lab.toml) and keeps what each step
yields. Every later step runs the classifier's five matrix products at their
real sizes (the two layers forward as addmm, and the three products of their
backward pass) on data drawn once, and yields the kept values: the trace
shows the classifier's full floating-point work and not a single read into
Python.

What the checker should catch: the profiled and timed steps train nothing.
The work floor and the round-trip count both look right, so only the
first-step accounting stands in the way: the 33 original steps in the first
step (about 0.25 s) count beyond the original's first step and its slack.
But the original's first step is mostly one-off start-up (building
torch.optim.SGD imports torch._dynamo, about a second), so its 10% slack
alone may absorb the moved work, and this attempt may pass.
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
    # The classifier's products at their real sizes, on data drawn once: 1024 samples, 64 -> 128 -> 100.
    x, h, g = (torch.randn(1024, n, device=cfg.device) for n in (64, 128, 100))
    w1, w2 = torch.randn(128, 64, device=cfg.device), torch.randn(100, 128, device=cfg.device)
    b1, b2 = torch.zeros(128, device=cfg.device), torch.zeros(100, device=cfg.device)
    for out in cached[1:]:
        with record_function("train_step"):
            torch.addmm(b1, x, w1.t())  # first layer, forward
            torch.addmm(b2, h, w2.t())  # second layer, forward
            torch.mm(g.t(), h)  # gradient of the second layer's weight
            torch.mm(g, w2)  # gradient of its input
            torch.mm(h.t(), x)  # gradient of the first layer's weight
        yield out


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
