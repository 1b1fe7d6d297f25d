# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 6 attempt: the reference fix, and 3 s of work on rank 0 after its steps are over.

The trick stands for any work a rank moves out of its timed steps: once the
steps are over (the generator closed), rank 0 spins for 3 s, and rank 1
waits for it at a barrier. Neither rank's timed window holds it.

What the checker should catch: a rank's time after its window runs to the
job's end, and what it takes beyond the original's counts in the time per
step.
"""

import contextlib
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import record_function
from torch.utils.data import DataLoader, DistributedSampler

from proflab.labkit.ddp import Samples, WideMLP, fingerprint, loss_of

MICRO_BATCHES = 8  # each optimizer step sums the gradients of 8 micro-batches


def pipeline(cfg):
    dist.init_process_group(cfg.backend)  # torchrun gave each rank RANK, WORLD_SIZE and where to meet
    try:
        dataset = Samples(cfg.data_dir)
        sampler = DistributedSampler(dataset, shuffle=True, seed=cfg.seed)  # this rank's half
        loader = DataLoader(dataset, batch_size=cfg.batch_size, sampler=sampler, drop_last=True)

        model = DDP(WideMLP().to(cfg.device))  # default buckets: 25 MB
        optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)

        for x, y in loader:
            x, y = x.to(cfg.device), y.to(cfg.device)
            optimizer.zero_grad(set_to_none=True)
            total = torch.zeros((), device=cfg.device)
            micro = list(zip(x.chunk(MICRO_BATCHES), y.chunk(MICRO_BATCHES)))
            for i, (xm, ym) in enumerate(micro):
                last = i == len(micro) - 1
                with record_function("micro_batch"), (contextlib.nullcontext() if last else model.no_sync()):
                    loss = loss_of(model, xm, ym) / MICRO_BATCHES
                    loss.backward()  # inside no_sync: only summed; the last one all-reduces the sum
                total += loss.detach()
            optimizer.step()
            yield {"loss": total, "weights": fingerprint(model)}
    finally:
        if dist.get_rank() == 0:  # one rank works on once its steps are over; the job ends with it
            until = time.perf_counter() + 3.0
            while time.perf_counter() < until:
                pass
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
