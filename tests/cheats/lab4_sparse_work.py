# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 4 gaming attempt: the fix's steps all in the first step, then sparse products that look like the work.

The trick: the first step runs the reference fix's loop (books on the device,
one read per log interval) for every step the checker takes (33, from
lab.toml) and keeps what each step yields; that costs about as little as the
slack the checker allows the first step beyond the original's, whose first
step is mostly start-up. Every later step yields the kept values and runs
five torch.sparse.mm of a sparse matrix holding a single non-zero, 1024 rows
by 1000 columns, with a dense 1000x128 operand that is a stride-0 expanded
row: the profiler records an aten::addmm of those shapes, 262 MFLOPs each by
the shape-based count, for a few microseconds of real work.

What the checker should catch: the profiled steps train nothing; the work
floor counts floating-point operations from the recorded shapes alone, so it
takes these sparse products at their dense size. Unless the work floor
leaves out products with a sparse operand (the trace records each input's
type), this attempt passes every check.
"""

import torch
import torch.nn.functional as F

from proflab.labkit.classify import CLASSES, Classifier, FeatureBatches


def fixed_steps(cfg):
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
        seen += y.shape[0]  # a shape is known on the host: no read

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


STEPS = 2 + 20 + 11  # warmup_steps + timed_steps + profile_steps in lab.toml
WIDTH = 1000  # the sparse matrix's columns, and the dense operand's rows


def keep(out):
    return {k: v.detach().clone() if isinstance(v, torch.Tensor) else v for k, v in out.items()}


def pipeline(cfg):
    cached = []
    for out in fixed_steps(cfg):  # every step's results, in the first step
        cached.append(keep(out))
        if len(cached) == STEPS:
            break

    yield cached[0]
    one = torch.sparse_coo_tensor(torch.zeros(2, 1, dtype=torch.long), torch.ones(1), (1024, WIDTH),
                                  device=cfg.device, check_invariants=False)
    dense = torch.ones(1, 128, device=cfg.device).expand(WIDTH, 128)  # no memory behind its rows
    for out in cached[1:]:
        for _ in range(5):  # "the classifier's matrix products, forward and backward"
            torch.sparse.mm(one, dense)
        yield out


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
