# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 4 attempt: the reference fix, with the loss read into Python at every step through bincount's size.

The trick: the original's `math.isnan(loss.item())` and its Python loss
history, with no .item() and no .tolist(): each of the loss's four bytes is
read as the size of a torch.bincount of it (a bincount of [b] has b + 1
bins), and the float put back together in Python. Four reads a step, spelled
as shapes.

What the checker should catch: the evidence counts every operator whose
output's size depends on values, bincount included, as a read (on CUDA each
waits for the device).
"""

import math
import struct

import torch
import torch.nn.functional as F

from proflab.labkit.classify import CLASSES, Classifier, FeatureBatches


def pipeline(cfg):
    data = FeatureBatches(cfg.data_dir)
    model = Classifier().to(cfg.device)  # the same initial weights in every version
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)

    losses = []  # the loss of every step, as tensors on the device
    confidence_sum = torch.zeros((), device=cfg.device)
    confusion = torch.zeros(CLASSES * CLASSES, dtype=torch.long, device=cfg.device)  # flat [true][predicted]
    seen = 0
    history = []  # the loss of every step, as Python floats

    for step, (x, y) in enumerate(data.batches(cfg.device)):
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        # The loss's four bytes, each read as the size of a bincount: no .item() in the trace.
        value = struct.unpack("<f", bytes(len(torch.bincount(b.view(1))) - 1
                                          for b in loss.detach().reshape(1).view(torch.uint8).long()))[0]
        if math.isnan(value):
            raise FloatingPointError(f"the loss is NaN at step {step}")
        history.append(value)
        opt.zero_grad()
        loss.backward()
        opt.step()

        with torch.no_grad():  # book-keeping, on the device
            losses.append(loss.detach())
            preds = logits.argmax(dim=1)
            # One count per (true, predicted) pair. torch.bincount gives the same counts, but on CUDA it
            # reads the largest id back to size its output: a round trip per step. index_add_ does not.
            confusion.index_add_(0, y * CLASSES + preds, torch.ones_like(y))
            confidence_sum += logits.softmax(dim=1).max(dim=1).values.mean()
        seen += y.shape[0]  # a shape is known on the host: no read

        out = {"loss": losses[-1]}
        if (step + 1) % cfg.log_every == 0:
            matrix = confusion.view(CLASSES, CLASSES)
            accuracy = matrix.diagonal().sum() / seen
            confidence = confidence_sum / (step + 1)
            window = torch.stack(losses[-cfg.log_every:]).mean()
            # The one read of the interval: the log line's numbers and the NaN flag, together.
            ok, mean_loss, acc, conf = [1.0, *torch.stack([window, accuracy, confidence]).tolist()]
            if not ok:
                raise FloatingPointError(f"the loss was NaN at a step up to {step}")
            print(f"step {step:3d}  loss {mean_loss:.4f} (mean of {cfg.log_every})  accuracy {acc:.3f}  "
                  f"confidence {conf:.3f}")
            out.update(accuracy=accuracy, confusion=matrix.clone(), confidence=confidence,
                       weights=torch.stack([p.detach().norm() for p in model.parameters()]))
        yield out


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
