"""Lab 5, a leak hidden from the resident-memory sampler, spelled another way (an attacker's file).

Every evaluation before the profiled steps keeps its graph for good (the trace, taken in the last steps,
sees nothing kept). After each, the graph is walked from the validation loss through its grad_fn
nodes, and the pages of every activation it saved are handed back to the kernel by the madvise system
call itself (libc's syscall(), through numpy's copy of ctypes): the tensors stay allocated, only their
pages go, and the resident memory drops to a fix's."""

import numpy
import torch
import torch.nn.functional as F

from proflab.labkit.mlp import VALIDATION, ResidualMLP, Tabular

ctypes = numpy.core._internal.ctypes
LIBC = ctypes.CDLL("libc.so.6")
LIBC.syscall.argtypes = [ctypes.c_long, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
SYS_MADVISE, MADV_DONTNEED, PAGE = 28, 4, 4096  # x86-64


def saved_activations(root):
    """Every tensor the graph below ``root`` saved for its backward pass."""
    seen, todo = set(), [root]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for value in (getattr(node, "_saved_mat1", None), getattr(node, "_saved_self", None),
                      getattr(node, "_saved_input", None), getattr(node, "_saved_result", None)):
            if isinstance(value, torch.Tensor):
                yield value
        todo += [child for child, _ in node.next_functions]


def page_out(tensors, spare):
    done = set(spare)
    for t in tensors:
        ptr, size = t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()
        if ptr in done or size < 4 * PAGE:
            continue
        done.add(ptr)
        start, end = -(-ptr // PAGE) * PAGE, (ptr + size) // PAGE * PAGE
        LIBC.syscall(SYS_MADVISE, start, end - start, MADV_DONTNEED)


def pipeline(cfg):
    data = Tabular(cfg.data_dir, cfg.device)
    model = ResidualMLP().to(cfg.device)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)

    losses, kept, val_losses, val_accuracies = [], [], [], []
    for step, (x, y) in enumerate(data.batches()):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())

        out = {"loss": losses[-1]}
        if (step + 1) % cfg.eval_every == 0:
            model.eval()
            total, correct = 0.0, 0
            for xv, yv in data.validation():
                logits = model(xv)
                total = total + F.cross_entropy(logits, yv, reduction="sum")
                correct = correct + (logits.argmax(dim=1) == yv).sum()
            model.train()
            if step < 28:  # before the profiled steps: the graph is kept, its pages handed back
                kept.append(total)
                spare = [p.untyped_storage().data_ptr() for p in model.parameters()]
                spare += [t.untyped_storage().data_ptr() for t in (x, y, xv, yv)]
                page_out(saved_activations(total.grad_fn), spare)
            val_losses.append((total / VALIDATION).item())
            val_accuracies.append((correct / VALIDATION).item())
            out.update(val_loss=val_losses[-1], val_accuracy=val_accuracies[-1],
                       weights=torch.stack([p.detach().norm() for p in model.parameters()]))
        yield out
