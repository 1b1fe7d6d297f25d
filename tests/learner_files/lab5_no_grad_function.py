"""Lab 5, fixed as many training scripts are written: the evaluation in a function of its own.

evaluate() runs under the @torch.no_grad() decorator and returns Python numbers; the loop keeps its
histories as tensors, detached, so that nothing they hold refers to a graph."""

import torch
import torch.nn.functional as F

from proflab.labkit.mlp import VALIDATION, ResidualMLP, Tabular


@torch.no_grad()
def evaluate(model, data):
    model.eval()
    total, correct = 0.0, 0
    for xv, yv in data.validation():
        logits = model(xv)
        total += F.cross_entropy(logits, yv, reduction="sum").item()
        correct += (logits.argmax(dim=1) == yv).sum().item()
    model.train()
    return total / VALIDATION, correct / VALIDATION


def pipeline(cfg):
    data = Tabular(cfg.data_dir, cfg.device)
    model = ResidualMLP().to(cfg.device)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    losses, val_losses, val_accuracies = [], [], []

    for step, (x, y) in enumerate(data.batches()):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())

        out = {"loss": losses[-1]}
        if (step + 1) % cfg.eval_every == 0:
            val_loss, val_accuracy = evaluate(model, data)
            val_losses.append(val_loss)
            val_accuracies.append(val_accuracy)
            out.update(val_loss=val_loss, val_accuracy=val_accuracy,
                       weights=torch.stack([p.detach().norm() for p in model.parameters()]))
        yield out
