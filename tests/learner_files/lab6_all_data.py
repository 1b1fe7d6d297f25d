"""Lab 6 with no_sync, but every rank trains on all the samples, in the same order.

Without a DistributedSampler each rank's DataLoader hands out the whole data
set: the ranks compute the same gradients, stay in sync, and do the work of
one. The checker must fail it on its results, saying every rank trained on
the same samples.
"""

import contextlib

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import record_function
from torch.utils.data import DataLoader

from proflab.labkit.ddp import Samples, WideMLP, fingerprint, loss_of

MICRO_BATCHES = 8  # each optimizer step sums the gradients of 8 micro-batches


def pipeline(cfg):
    dist.init_process_group(cfg.backend)  # torchrun gave each rank RANK, WORLD_SIZE and where to meet
    try:
        dataset = Samples(cfg.data_dir)
        loader = DataLoader(dataset, batch_size=cfg.batch_size, shuffle=True, drop_last=True,
                            generator=torch.Generator().manual_seed(cfg.seed))  # every rank: every sample

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
