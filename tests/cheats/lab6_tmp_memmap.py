# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 6 attempt: every micro-batch's gradients summed in a memory-mapped file under /tmp.

The trick: no DDP, and the gradients never pass through torch.distributed.
Each rank writes its flattened gradients of a micro-batch into its own row
of a numpy memmap in /tmp, shared by the ranks of the job; a barrier (no
bytes) says both rows are written, and each rank sums the rows itself. The
file is written and read through memory, not with read and write: nothing
counts its bytes. The original's exchanges, one per micro-batch, with none
of its traffic in the trace.

What the checker should catch: the ranks share no channel but the
collectives, whichever file they would use and however they would read it.
"""

import numpy as np
import torch
import torch.distributed as dist
from torch.profiler import record_function
from torch.utils.data import DataLoader, DistributedSampler

from proflab.labkit.ddp import Samples, WideMLP, fingerprint, loss_of

MICRO_BATCHES = 8  # each optimizer step sums the gradients of 8 micro-batches
BOARD = "/tmp/lab6-board.f32"


def pipeline(cfg):
    dist.init_process_group(cfg.backend)
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        dataset = Samples(cfg.data_dir)
        sampler = DistributedSampler(dataset, shuffle=True, seed=cfg.seed)
        loader = DataLoader(dataset, batch_size=cfg.batch_size, sampler=sampler, drop_last=True)

        model = WideMLP().to(cfg.device)
        params = list(model.parameters())
        optimizer = torch.optim.SGD(params, lr=cfg.lr, momentum=0.9)
        size = sum(p.numel() for p in params)
        if rank == 0:
            np.lib.format.open_memmap(BOARD, mode="w+", dtype=np.float32, shape=(2, world, size)).flush()
        dist.barrier()
        board = np.lib.format.open_memmap(BOARD, mode="r+")
        turn = 0

        for x, y in loader:
            x, y = x.to(cfg.device), y.to(cfg.device)
            optimizer.zero_grad(set_to_none=True)
            total = torch.zeros((), device=cfg.device)
            for xm, ym in zip(x.chunk(MICRO_BATCHES), y.chunk(MICRO_BATCHES)):
                with record_function("micro_batch"):
                    loss = loss_of(model, xm, ym) / MICRO_BATCHES
                    grads = torch.autograd.grad(loss, params)
                    rows = torch.from_numpy(board[turn % 2])  # a view of the shared pages
                    rows[rank].copy_(torch.cat([g.reshape(-1) for g in grads]))
                    dist.barrier()
                    flat = rows.sum(dim=0) / world
                    turn += 1
                    offset = 0
                    for p in params:
                        g = flat[offset:offset + p.numel()].view_as(p).clone()
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
