"""Lab 5: a training loop whose memory climbs at every evaluation.

A residual MLP learns 10 classes. Every cfg.eval_every steps the loop measures
the loss and accuracy on a validation set, and it keeps the history of every
figure, as real training code does, to plot it later. The model and its data
are small, yet the memory allocated grows at every evaluation and is never
given back: run it long enough and it dies out of memory. How much does each
evaluation keep, and why?

    proflab run memory           profile this file, memory included (or: python exercise.py)
    proflab tensorboard          look at the memory curve (Profile tab, Memory)
    proflab check memory         measure your fix against the original

The checker calls pipeline(cfg) and takes one training step for each value it
yields. Every cfg.eval_every steps the pipeline also yields the validation
figures and the norms of the weights; they must stay exactly what they are.
cfg carries the device, the data folder, the learning rate (cfg.lr) and
cfg.eval_every.
"""

import torch
import torch.nn.functional as F

from proflab.labkit.mlp import VALIDATION, ResidualMLP, Tabular


def pipeline(cfg):
    data = Tabular(cfg.data_dir, cfg.device)
    model = ResidualMLP().to(cfg.device)  # the same initial weights in every version
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)

    losses = []  # the training loss of every step
    val_losses = []  # the validation loss of every evaluation
    val_accuracies = []  # and its accuracy

    for step, (x, y) in enumerate(data.batches()):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss)

        out = {"loss": losses[-1]}
        if (step + 1) % cfg.eval_every == 0:  # evaluate on the held-out set
            model.eval()
            total, correct = 0.0, 0
            for xv, yv in data.validation():
                logits = model(xv)
                total = total + F.cross_entropy(logits, yv, reduction="sum")
                correct = correct + (logits.argmax(dim=1) == yv).sum()
            val_losses.append(total / VALIDATION)
            val_accuracies.append(correct / VALIDATION)
            model.train()
            print(f"step {step + 1:3d}  loss {losses[-1]:.4f}  val loss {val_losses[-1]:.4f}  "
                  f"val accuracy {val_accuracies[-1]:.3f}")
            out.update(val_loss=val_losses[-1], val_accuracy=val_accuracies[-1],
                       weights=torch.stack([p.detach().norm() for p in model.parameters()]))
        yield out


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
