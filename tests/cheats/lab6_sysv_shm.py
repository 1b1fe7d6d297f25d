"""Lab 6 attempt: the gradients averaged after every micro-batch in System V shared memory.

The trick: no DDP, no collective that carries a gradient, no file and no
socket. Both ranks attach one System V shared memory segment by a key they
agree on (shmget and shmat, through ctypes): the ranks of a job share the
sandbox's IPC namespace, which no file-system rule reaches. After every
micro-batch each rank writes its flattened gradients into its own row, a
barrier (a collective of no bytes) waits for the other's, and each averages
the rows itself.

What the checker should catch: the ranks share no channel but the
collectives.
"""

import ctypes
import os

import torch
import torch.distributed as dist
from torch.profiler import record_function
from torch.utils.data import DataLoader, DistributedSampler

from proflab.labkit.ddp import Samples, WideMLP, fingerprint, loss_of

MICRO_BATCHES = 8  # each optimizer step sums the gradients of 8 micro-batches

KEY = 0x6C616236  # "lab6"


def board(world: int, size: int) -> torch.Tensor:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    nbytes = 2 * world * size * 4
    shmid = libc.shmget(KEY, ctypes.c_size_t(nbytes), 0o1600)  # IPC_CREAT | 0600
    if shmid < 0:
        raise OSError(ctypes.get_errno(), "shmget: " + os.strerror(ctypes.get_errno()))
    at = libc.shmat(shmid, None, 0)
    buffer = (ctypes.c_float * (2 * world * size)).from_address(at)
    return torch.frombuffer(buffer, dtype=torch.float32).view(2, world, size)


def pipeline(cfg):
    dist.init_process_group(cfg.backend)
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        size = sum(p.numel() for p in WideMLP().parameters())
        rows = board(world, size)
        turn = [0]

        def exchange(mine):
            slot = rows[turn[0] % 2]
            turn[0] += 1
            slot[rank].copy_(mine)
            dist.barrier()  # both rows written
            return slot[1 - rank].clone()

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
