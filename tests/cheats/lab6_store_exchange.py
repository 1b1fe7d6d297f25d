# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 6 attempt: the gradients averaged after every micro-batch through the job's own key-value store.

The trick: no DDP and no collective that carries a gradient. The process
group's store (the TCPStore torchrun's rendezvous made, which every rank
already reaches) takes each rank's flattened gradients under a key of its
own after every micro-batch; each rank reads the other's key and averages
the two itself. The original's numbers, as many exchanges per step as
micro-batches, and a traffic of 0 MB in the trace: a store's get and set
are no collective.

What the checker should catch: every byte the ranks send each other is
traffic, whichever channel it takes.
"""

from torch.distributed import distributed_c10d

import torch
import torch.distributed as dist
from torch.profiler import record_function
from torch.utils.data import DataLoader, DistributedSampler

from proflab.labkit.ddp import Samples, WideMLP, fingerprint, loss_of

MICRO_BATCHES = 8  # each optimizer step sums the gradients of 8 micro-batches


def pipeline(cfg):
    dist.init_process_group(cfg.backend)
    try:
        rank = dist.get_rank()
        store = distributed_c10d._get_default_store()
        turn = [0]

        def exchange(mine):
            turn[0] += 1
            store.set(f"grads-{turn[0]}-{rank}", mine.numpy().tobytes())
            theirs = store.get(f"grads-{turn[0]}-{1 - rank}")  # waits until the other rank has set it
            return torch.frombuffer(bytearray(theirs), dtype=mine.dtype)

        dataset = Samples(cfg.data_dir)
        sampler = DistributedSampler(dataset, shuffle=True, seed=cfg.seed)
        loader = DataLoader(dataset, batch_size=cfg.batch_size, sampler=sampler, drop_last=True)

        model = WideMLP().to(cfg.device)  # the same initial weights on every rank
        params = list(model.parameters())
        optimizer = torch.optim.SGD(params, lr=cfg.lr, momentum=0.9)

        for x, y in loader:
            x, y = x.to(cfg.device), y.to(cfg.device)
            optimizer.zero_grad(set_to_none=True)
            total = torch.zeros((), device=cfg.device)
            for xm, ym in zip(x.chunk(MICRO_BATCHES), y.chunk(MICRO_BATCHES)):
                with record_function("micro_batch"):
                    loss = loss_of(model, xm, ym) / MICRO_BATCHES
                    grads = torch.autograd.grad(loss, params)
                    mine = torch.cat([g.reshape(-1) for g in grads])
                    flat = (mine + exchange(mine)) / 2
                    offset = 0
                    for p in params:
                        g = flat[offset:offset + p.numel()].view_as(p)
                        p.grad = g if p.grad is None else p.grad + g
                        offset += p.numel()
                total += loss.detach()
            optimizer.step()
            yield {"loss": total, "weights": fingerprint(model)}
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
