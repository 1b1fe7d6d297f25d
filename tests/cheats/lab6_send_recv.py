# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 6 attempt: the original's traffic, sent by point-to-point messages.

The trick: no DDP and no collective of the all-* kind. After every
micro-batch, each rank sends its gradients of that micro-batch to the other
with isend/irecv (a two-rank job: the peer is 1 - rank) and averages the two
itself: the same numbers as the original's, a message each way per
micro-batch, and as many bytes. A count of all-reduce calls and bytes reads
none of it.

What the checker should catch: the traffic counts the bytes of every
collective and point-to-point call, whichever it is.
"""

import torch
import torch.distributed as dist
from torch.profiler import record_function
from torch.utils.data import DataLoader, DistributedSampler

from proflab.labkit.ddp import Samples, WideMLP, fingerprint, loss_of

MICRO_BATCHES = 8  # each optimizer step sums the gradients of 8 micro-batches


def pipeline(cfg):
    dist.init_process_group(cfg.backend)
    try:
        world = dist.get_world_size()
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
                    flat = torch.cat([g.reshape(-1) for g in grads])
                    theirs = torch.empty_like(flat)
                    peer = 1 - dist.get_rank()  # the job's other rank
                    for request in (dist.isend(flat, peer), dist.irecv(theirs, peer)):  # after every micro-batch
                        request.wait()
                    flat = (flat + theirs) / world
                    offset = 0
                    for p in params:
                        g = flat[offset:offset + p.numel()].view_as(p)
                        p.grad = g.clone() if p.grad is None else p.grad + g
                        offset += p.numel()
                total += loss.detach()
            optimizer.step()
            yield {"loss": total, "weights": fingerprint(model)}
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
