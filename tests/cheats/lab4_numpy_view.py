"""Lab 4 gaming attempt: read the books every step through a numpy view, where the profiler cannot see it.

The trick: the reference fix's structure (the books kept as tensors, the
confusion matrix counted with index_add_), plus a small CPU tensor that each
step's loss, correct count and confidence are copied into in place. A numpy
view of it is made once, before the first step; every step then reads the
view in Python for the NaN check and a per-step log line, as the original
did with .item(). Reading a numpy view runs no operator, so the trace shows
no aten::item, aten::_local_scalar_dense or aten::resolve_neg in the steps.

What the checker should catch: on CUDA, the copy into the CPU tensor is a
device-to-host copy that makes the host wait at every step (a
cudaStreamSynchronize in the trace). On the CPU, a numpy view of a CPU tensor
costs no round trip at all: there the per-step reads are invisible to the
profiler and also cost next to nothing, so this attempt is as fast as the fix
and the checker may well pass it.
"""

import math

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
    mirror = torch.zeros(3)  # this step's loss, correct count and confidence, on the host
    view = mirror.numpy()  # made once: reading it later runs no operator

    for step, (x, y) in enumerate(data.batches(cfg.device)):
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()

        with torch.no_grad():  # book-keeping, on the device
            losses.append(loss.detach())
            preds = logits.argmax(dim=1)
            confusion.index_add_(0, y * CLASSES + preds, torch.ones_like(y))
            confidence = logits.softmax(dim=1).max(dim=1).values.mean()
            confidence_sum += confidence
            mirror.copy_(torch.stack([loss.detach(), confusion.view(CLASSES, CLASSES).diagonal().sum().float(),
                                      confidence]))
        seen += y.shape[0]  # a shape is known on the host: no read

        step_loss, correct, step_confidence = float(view[0]), float(view[1]), float(view[2])
        if math.isnan(step_loss):  # the NaN check, every step, from the view
            raise FloatingPointError(f"the loss is NaN at step {step}")
        print(f"step {step:3d}  loss {step_loss:.4f}  accuracy {correct / seen:.3f}  "
              f"confidence {step_confidence:.3f}")

        out = {"loss": losses[-1]}
        if (step + 1) % cfg.log_every == 0:
            matrix = confusion.view(CLASSES, CLASSES)
            out.update(accuracy=matrix.diagonal().sum() / seen, confusion=matrix.clone(),
                       confidence=confidence_sum / (step + 1),
                       weights=torch.stack([p.detach().norm() for p in model.parameters()]))
        yield out


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
