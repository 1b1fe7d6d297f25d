"""Lab 6: data-parallel training on two ranks, started by torchrun.

Each rank trains the same model on its own half of the samples; after every
backward pass, DistributedDataParallel (DDP) averages the gradients of all
the ranks with an all-reduce, so the ranks keep the same weights. An
optimizer step here accumulates the gradients of several micro-batches.

Run it: proflab run distributed, or python exercise.py (the kit starts the
torchrun job of two ranks either way). Profile it, open both ranks in
TensorBoard, and look at where each step's time goes and what the ranks
send each other.
"""

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

        model = DDP(WideMLP().to(cfg.device), bucket_cap_mb=1)  # gradients sent in buckets of 1 MB
        optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)

        for x, y in loader:
            x, y = x.to(cfg.device), y.to(cfg.device)
            optimizer.zero_grad(set_to_none=True)
            total = torch.zeros((), device=cfg.device)
            for xm, ym in zip(x.chunk(MICRO_BATCHES), y.chunk(MICRO_BATCHES)):
                with record_function("micro_batch"):
                    loss = loss_of(model, xm, ym) / MICRO_BATCHES
                    loss.backward()  # the gradients are all-reduced as backward produces them
                total += loss.detach()
            optimizer.step()
            yield {"loss": total, "weights": fingerprint(model)}
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
