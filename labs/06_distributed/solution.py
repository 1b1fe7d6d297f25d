"""Lab 6, the reference fix: all-reduce once per optimizer step, in buckets of a sensible size.

DDP all-reduces the gradients at every backward pass: with gradient
accumulation over 8 micro-batches, the original averaged them 8 times per
optimizer step, and the first 7 averages were only summed into the next.
Inside model.no_sync(), a backward pass only adds to the gradients; the last
micro-batch's backward, outside it, all-reduces the sum once. The average of
the sums is the sum of the averages: the same gradients, an eighth of the
traffic. DDP's default buckets (25 MB) send the 7.5 MB of gradients in 2
messages (its first bucket is kept small, to start early) instead of 8.
"""

import contextlib

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
        dist.destroy_process_group()


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
