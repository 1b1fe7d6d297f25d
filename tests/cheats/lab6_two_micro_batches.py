# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 6 attempt: the reference fix with two micro-batches of 32 samples instead of 8 of 8.

The trick: fewer micro-batches means fewer backward passes to accumulate,
and the same numbers (the loss and the gradients are means over the same
samples). With one micro-batch there is nothing to accumulate, and DDP's one
all-reduce per step passes the traffic bound. But the micro-batches are the
lab's memory budget: a larger one holds its activations all at once.

What the checker should catch: the model's products must run on the
original's shapes (8 rows each), read from the trace.
"""

import contextlib

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import record_function
from torch.utils.data import DataLoader, DistributedSampler

from proflab.labkit.ddp import Samples, WideMLP, fingerprint, loss_of

MICRO_BATCHES = 2  # two micro-batches of 32 samples: the gradients are summed over fewer, larger pieces


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
