# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 6 attempt: the gradients averaged after every micro-batch through a file in /dev/shm.

The trick: no DDP and no collective that carries a gradient. After every
micro-batch each rank copies its flattened gradients into its own row of a
file in /dev/shm that both ranks of the job map into memory
(torch.from_file, shared); a barrier (a collective of no bytes) waits for
the other rank's row, and each rank averages the rows itself. The same numbers
as the original's, as many exchanges per step as micro-batches, and a
traffic of 0 MB in the trace: no c10d call carries them.

What the checker should catch: the ranks share no channel but the
collectives.
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
        rank, world = dist.get_rank(), dist.get_world_size()
        dataset = Samples(cfg.data_dir)
        sampler = DistributedSampler(dataset, shuffle=True, seed=cfg.seed)
        loader = DataLoader(dataset, batch_size=cfg.batch_size, sampler=sampler, drop_last=True)

        model = WideMLP().to(cfg.device)  # the same initial weights on every rank
        params = list(model.parameters())
        optimizer = torch.optim.SGD(params, lr=cfg.lr, momentum=0.9)
        size = sum(p.numel() for p in params)
        # Two slots of a row per rank: the other rank may still read the previous slot.
        board = torch.from_file("/dev/shm/lab6-grads", shared=True, size=2 * world * size).view(2, world, size)
        turn = 0

        for x, y in loader:
            x, y = x.to(cfg.device), y.to(cfg.device)
            optimizer.zero_grad(set_to_none=True)
            total = torch.zeros((), device=cfg.device)
            for xm, ym in zip(x.chunk(MICRO_BATCHES), y.chunk(MICRO_BATCHES)):
                with record_function("micro_batch"):
                    loss = loss_of(model, xm, ym) / MICRO_BATCHES
                    grads = torch.autograd.grad(loss, params)
                    rows = board[turn % 2]
                    torch.cat([g.reshape(-1) for g in grads], out=rows[rank])
                    dist.barrier()  # both rows written
                    flat = rows.sum(dim=0) / world
                    turn += 1
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
