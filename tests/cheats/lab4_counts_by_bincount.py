# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 4 attempt: the confusion matrix counted with bincount, and the NaN check and the accuracy read
at every step through the size of a bincount.

The trick: `loss.isnan().long().view(1).bincount().shape[0] > 1` is the
original's NaN check, and `(preds == y).sum().view(1).bincount().numel() - 1`
the number of right predictions as a Python int, counted in Python as the
original counts it; the confusion matrix is counted with bincount(minlength=...),
as a sound fix may. No .item(), no .tolist() in the step.

What the checker should catch: every bincount is a read of the values that
size its output (on CUDA a round trip); one a step for the confusion matrix
is what a sound fix makes, the two more are not.
"""

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
    seen = right = 0  # the accuracy's counts, as Python ints

    for step, (x, y) in enumerate(data.batches(cfg.device)):
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        if loss.detach().isnan().long().view(1).bincount().shape[0] > 1:  # the NaN check, as a size
            raise FloatingPointError(f"the loss is NaN at step {step}")
        opt.zero_grad()
        loss.backward()
        opt.step()

        with torch.no_grad():  # book-keeping, on the device
            losses.append(loss.detach())
            preds = logits.argmax(dim=1)
            # One count per (true, predicted) pair. torch.bincount gives the same counts, but on CUDA it
            # reads the largest id back to size its output: a round trip per step. index_add_ does not.
            confusion += torch.bincount(y * CLASSES + preds, minlength=CLASSES * CLASSES)
            confidence_sum += logits.softmax(dim=1).max(dim=1).values.mean()
            right += (preds == y).sum().view(1).bincount().numel() - 1  # read as a size
        seen += y.shape[0]  # a shape is known on the host: no read

        out = {"loss": losses[-1]}
        if (step + 1) % cfg.log_every == 0:
            matrix = confusion.view(CLASSES, CLASSES)
            accuracy = torch.tensor(right / seen)
            confidence = confidence_sum / (step + 1)
            window = torch.stack(losses[-cfg.log_every:]).mean()
            # The one read of the interval: the log line's numbers and the NaN flag, together.
            ok, mean_loss, acc, conf = [1.0, *torch.stack([window, accuracy.float(), confidence]).tolist()]
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
