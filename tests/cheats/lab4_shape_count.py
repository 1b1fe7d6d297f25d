# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 4 attempt: the reference fix, with one read per step spelled as a shape.

The trick: the batch's size is counted as the number of labels that are at
least 0, `(y >= 0).nonzero().shape[0]`. No `.item()`, no `.tolist()`: the
trace holds no aten::_local_scalar_dense. But the size of nonzero's output
depends on the values, so the host reads them at every step (on CUDA, it
waits for the device first): a round trip per step, spelled another way.

What the checker should catch: the evidence counts every operator whose
output's size depends on values (aten::nonzero here) as a read.
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
    finite = torch.ones((), dtype=torch.bool, device=cfg.device)
    seen = 0

    for step, (x, y) in enumerate(data.batches(cfg.device)):
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        finite &= torch.isfinite(loss)  # the NaN check, without reading the loss
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
        seen += (y >= 0).nonzero().shape[0]  # the batch's size, as a count of its labels

        out = {"loss": losses[-1]}
        if (step + 1) % cfg.log_every == 0:
            matrix = confusion.view(CLASSES, CLASSES)
            accuracy = matrix.diagonal().sum() / seen
            confidence = confidence_sum / (step + 1)
            window = torch.stack(losses[-cfg.log_every:]).mean()
            # The one read of the interval: the log line's numbers and the NaN flag, together.
            ok, mean_loss, acc, conf = torch.stack([finite.float(), window, accuracy, confidence]).tolist()
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
