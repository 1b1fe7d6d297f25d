"""Lab 4 gaming attempt: pause the profiler's recording around each step's reads, through torch._C.

The trick: the reference fix's book-keeping on the device, but the original's
per-step NaN check and log line kept, read with .item() every step. Around
those reads the lab file switches the profiler's collection off and on again
with the private _toggle_collection_dynamic of torch._C._autograd (what
torch.profiler.profile.toggle_collection_dynamic calls), so the trace holds
no aten::item or aten::_local_scalar_dense. torch._C is reached with
getattr(torch, "_C") and the profiler's activity type through
().__class__.__base__.__subclasses__(), so that neither name appears as an
attribute access or an import in the file.

What the checker should catch: the source audit refuses reaching private
torch internals (getattr with a private name, __subclasses__, _C) in a lab
file. Without the audit the reads vanish from the trace: on the CPU they cost
little, so the version is fast and its evidence clean, and nothing else in
the checker tells the difference.
"""

import math

import torch
import torch.nn.functional as F

from proflab.labkit.classify import CLASSES, Classifier, FeatureBatches


def _activity_type():
    """torch.profiler.ProfilerActivity, found by walking object's subclasses."""
    todo, seen = list(().__class__.__base__.__subclasses__()), set()
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        if cls.__name__ == "ProfilerActivity" and hasattr(cls, "CPU"):
            return cls
        try:
            todo.extend(cls.__subclasses__())
        except TypeError:  # type.__subclasses__ needs an argument
            pass
    return None


_autograd = getattr(getattr(torch, "_C"), "_autograd")
_toggle = getattr(_autograd, "_toggle_collection_dynamic", None)
_ACTIVITY = _activity_type()


def unseen(read):
    """``read()``, with the profiler's collection paused while it runs (when a profiler is recording)."""
    if _toggle is None or _ACTIVITY is None:
        return read()
    activities = {_ACTIVITY.CPU, _ACTIVITY.CUDA} if torch.cuda.is_available() else {_ACTIVITY.CPU}
    try:
        _toggle(False, activities)
    except RuntimeError:  # no profiler recording right now: nothing to hide from
        return read()
    try:
        return read()
    finally:
        _toggle(True, activities)


def pipeline(cfg):
    data = FeatureBatches(cfg.data_dir)
    model = Classifier().to(cfg.device)  # the same initial weights in every version
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)

    losses = []  # the loss of every step, as tensors on the device
    confidence_sum = torch.zeros((), device=cfg.device)
    confusion = torch.zeros(CLASSES * CLASSES, dtype=torch.long, device=cfg.device)  # flat [true][predicted]
    seen = 0

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
        seen += y.shape[0]

        # The original's per-step NaN check and log line, read where the profiler does not look.
        step_loss, correct, step_confidence = unseen(lambda: (
            loss.item(), confusion.view(CLASSES, CLASSES).diagonal().sum().item(), confidence.item()))
        if math.isnan(step_loss):
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
