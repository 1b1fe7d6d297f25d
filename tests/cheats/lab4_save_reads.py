"""Lab 4 attempt: the books kept on tensors, but read into Python at every step through torch.save.

Every step still reads the loss (NaN check, loss history) and the running
accuracy and confidence into Python for a log line: a host round trip per
step, which the lesson moves to once per log interval. The read is spelled
torch.save(t, io.BytesIO()) and the raw float32 bytes at the end of the legacy
format are unpacked with struct: no aten::item, no aten::_local_scalar_dense, no
aten::resolve_neg in the trace, and none of the names the lab's
untraced_reads audit refuses (numpy, storage, data_ptr, DLPack). The checker
should count such a read (1 per step; at most 0.5 are allowed).
"""

import io
import math
import struct

import torch
import torch.nn.functional as F

from proflab.labkit.classify import CLASSES, Classifier, FeatureBatches


def read(t):
    """The values of a small float tensor, as Python floats."""
    buf = io.BytesIO()
    torch.save(t.detach().float().contiguous().clone(), buf, _use_new_zipfile_serialization=False)
    raw = buf.getvalue()[-4 * t.numel():]  # the legacy format ends with the storage's raw bytes
    return struct.unpack(f"<{t.numel()}f", raw)


def pipeline(cfg):
    data = FeatureBatches(cfg.data_dir)
    model = Classifier().to(cfg.device)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    losses = []
    confusion = torch.zeros(CLASSES * CLASSES, dtype=torch.long, device=cfg.device)
    correct = torch.zeros((), dtype=torch.long, device=cfg.device)
    confidence_sum = torch.zeros((), dtype=torch.float64, device=cfg.device)
    seen = 0
    for step, (x, y) in enumerate(data.batches(cfg.device)):
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            preds = logits.argmax(dim=1)
            correct += (preds == y).sum()
            seen += len(y)
            confusion.index_add_(0, y * CLASSES + preds, torch.ones_like(y))
            confidence_sum += logits.softmax(dim=1).max(dim=1).values.double().mean()
            # a read every step, as the original's: the loss, the accuracy, the confidence
            value, acc, conf = read(torch.stack([loss.detach(), correct.float() / seen,
                                                 (confidence_sum / (step + 1)).float()]))
        if math.isnan(value):
            raise FloatingPointError(f"the loss is NaN at step {step}")
        losses.append(value)
        print(f"step {step:3d}  loss {value:.4f}  accuracy {acc:.3f}  confidence {conf:.3f}")
        out = {"loss": loss.detach()}
        if (step + 1) % cfg.log_every == 0:
            out.update(accuracy=correct.double() / seen, confusion=confusion.view(CLASSES, CLASSES).clone(),
                       confidence=confidence_sum / (step + 1),
                       weights=torch.stack([p.detach().norm() for p in model.parameters()]))
        yield out
