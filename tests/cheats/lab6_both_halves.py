# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 6 attempt: each rank does the whole job's work, and never talks to the other.

The trick: no collective at all. Each rank loads its own half of the samples
and the other rank's half too (a second DistributedSampler, for the other
rank's number), and runs the forward and backward passes of both halves'
micro-batches, on the original's micro-batch shapes. Its gradients are the
average DDP computes, without a byte sent: the ranks keep the same weights,
each yields its own half's loss, and the traffic reads 0 MB. Twice the work
of a rank, in place of the lesson's no_sync().

What the checker should catch: a rank does its own share of the work, not
the job's.
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
        loaders = [DataLoader(dataset, batch_size=cfg.batch_size, drop_last=True,
                              sampler=DistributedSampler(dataset, num_replicas=world, rank=r, shuffle=True,
                                                         seed=cfg.seed))
                   for r in range(world)]  # every rank's half, this rank's among them

        model = WideMLP().to(cfg.device)
        optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)

        for batches in zip(*loaders):
            optimizer.zero_grad(set_to_none=True)
            total = torch.zeros((), device=cfg.device)
            for r, (x, y) in enumerate(batches):
                x, y = x.to(cfg.device), y.to(cfg.device)
                for xm, ym in zip(x.chunk(MICRO_BATCHES), y.chunk(MICRO_BATCHES)):
                    with record_function("micro_batch"):
                        loss = loss_of(model, xm, ym) / MICRO_BATCHES
                        (loss / world).backward()  # the average over the ranks, computed here
                    if r == rank:
                        total += loss.detach()
            optimizer.step()
            yield {"loss": total, "weights": fingerprint(model)}
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
