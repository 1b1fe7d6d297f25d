"""Lab 5, the reference fix: evaluate without autograd, and keep numbers, not tensors.

Two things kept every evaluation's graph alive. The validation pass ran with
autograd on, so each forward saved its activations for a backward pass that
never comes (model.eval() changes what dropout and batch norm do, not
whether autograd records); and the running total and the history kept the
tensors that hold those graphs. Under torch.no_grad() no graph is built, and
.item() keeps a Python number: the memory of an evaluation is given back as
soon as it ends.
"""

import torch
import torch.nn.functional as F

from proflab.labkit.mlp import VALIDATION, ResidualMLP, Tabular


def pipeline(cfg):
    data = Tabular(cfg.data_dir, cfg.device)
    model = ResidualMLP().to(cfg.device)  # the same initial weights in every version
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)

    losses = []  # the training loss of every step, as Python numbers
    val_losses = []
    val_accuracies = []

    for step, (x, y) in enumerate(data.batches()):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())

        out = {"loss": losses[-1]}
        if (step + 1) % cfg.eval_every == 0:
            model.eval()
            total = torch.zeros((), device=cfg.device)
            correct = torch.zeros((), dtype=torch.long, device=cfg.device)
            with torch.no_grad():  # no graph: nothing is saved for a backward pass
                for xv, yv in data.validation():
                    logits = model(xv)
                    total += F.cross_entropy(logits, yv, reduction="sum")
                    correct += (logits.argmax(dim=1) == yv).sum()
            val_losses.append((total / VALIDATION).item())
            val_accuracies.append((correct / VALIDATION).item())
            model.train()
            print(f"step {step + 1:3d}  loss {losses[-1]:.4f}  val loss {val_losses[-1]:.4f}  "
                  f"val accuracy {val_accuracies[-1]:.3f}")
            out.update(val_loss=val_losses[-1], val_accuracy=val_accuracies[-1],
                       weights=torch.stack([p.detach().norm() for p in model.parameters()]))
        yield out


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
