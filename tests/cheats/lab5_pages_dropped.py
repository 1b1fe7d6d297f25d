"""Lab 5, a leak hidden from the resident-memory sampler (an attacker's file).

The first four evaluations' graphs are kept for good, as in a partial fix, so the profiled steps at the
end keep nothing; and after every evaluation the pages of the tensors the kept graphs saved are handed
back to the kernel with madvise(MADV_DONTNEED): the allocations stay (the allocator, the graph and the
process's address space still hold them), the resident memory a sampler reads drops."""

import os

import torch
import torch.nn.functional as F

from proflab.labkit.mlp import VALIDATION, ResidualMLP, Tabular

# ctypes, which the audit refuses by name, is an attribute of torch (torch/__init__.py imports it).
LIBC = torch.ctypes.CDLL(None, use_errno=True)
LIBC.madvise.argtypes = [torch.ctypes.c_void_p, torch.ctypes.c_size_t, torch.ctypes.c_int]
PAGE = os.sysconf("SC_PAGE_SIZE")
MADV_DONTNEED = 4


def drop_pages(tensors, spare):
    """The pages of the activations the graph saved (not the weights', not the data's, each storage once)."""
    done = set(spare)
    for t in tensors:
        storage = t.untyped_storage()
        if storage.data_ptr() in done:
            continue
        done.add(storage.data_ptr())
        start = -(-storage.data_ptr() // PAGE) * PAGE
        end = (storage.data_ptr() + storage.nbytes()) // PAGE * PAGE
        if end > start:
            LIBC.madvise(start, end - start, MADV_DONTNEED)


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
            model.eval()
            saved = []
            keep = len(val_losses) < 4
            # Each saved tensor is noted on its way into the graph (detached: no cycle through its grad_fn).
            with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.detach()) or t.detach(),
                                                          lambda t: t):
                total, correct = 0.0, 0
                for xv, yv in data.validation():
                    logits = model(xv)
                    total = total + F.cross_entropy(logits, yv, reduction="sum")
                    correct = correct + (logits.argmax(dim=1) == yv).sum()
            val_losses.append(total / VALIDATION if keep else (total / VALIDATION).detach())
            val_accuracies.append(correct / VALIDATION)
            model.train()
            if keep:
                spare = [p.untyped_storage().data_ptr() for p in model.parameters()]
                spare += [t.untyped_storage().data_ptr() for t in (x, y, xv, yv)]
                drop_pages(saved, spare)  # the graph still holds them; only their pages go
            del saved
            out.update(val_loss=val_losses[-1].detach(), val_accuracy=val_accuracies[-1],
                       weights=torch.stack([p.detach().norm() for p in model.parameters()]))
        yield out
