# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 6 attempt: the other rank's half computed here too, its products spelled with einsum.

The trick: no collective at all, as in lab6_both_halves.py, but only this
rank's half runs through the model's layers (aten::addmm, the lab's work
operators, on the original's shapes). The other rank's half, read through a
second DistributedSampler, runs through the same weights with torch.einsum,
whose products are batched matrix products (aten::bmm): a count of the
lab's own operators sees one rank's work. The gradients are the job's
average, the weights stay the same on both ranks, and no byte is sent.

What the checker should catch: a rank's work is its own share however its
products are written.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.profiler import record_function
from torch.utils.data import DataLoader, DistributedSampler

from proflab.labkit.ddp import Samples, WideMLP, fingerprint, loss_of

MICRO_BATCHES = 8  # each optimizer step sums the gradients of 8 micro-batches


def by_einsum(model, x, y):
    """The model's loss for ``x``, every layer's product written as an einsum."""
    layers = [m for m in model if isinstance(m, torch.nn.Linear)]
    h = x.unsqueeze(0)
    for i, layer in enumerate(layers):
        h = torch.einsum("bni,oi->bno", h, layer.weight) + layer.bias
        if i < len(layers) - 1:
            h = F.gelu(h)
    return F.cross_entropy(h.squeeze(0), y)


def pipeline(cfg):
    dist.init_process_group(cfg.backend)
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        dataset = Samples(cfg.data_dir)
        loaders = [DataLoader(dataset, batch_size=cfg.batch_size, drop_last=True,
                              sampler=DistributedSampler(dataset, num_replicas=world, rank=r, shuffle=True,
                                                         seed=cfg.seed))
                   for r in range(world)]

        model = WideMLP().to(cfg.device)
        optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)

        for batches in zip(*loaders):
            optimizer.zero_grad(set_to_none=True)
            total = torch.zeros((), device=cfg.device)
            for r, (x, y) in enumerate(batches):
                x, y = x.to(cfg.device), y.to(cfg.device)
                for xm, ym in zip(x.chunk(MICRO_BATCHES), y.chunk(MICRO_BATCHES)):
                    with record_function("micro_batch"):
                        if r == rank:
                            loss = loss_of(model, xm, ym) / MICRO_BATCHES
                            total += loss.detach()
                        else:
                            loss = by_einsum(model, xm, ym) / MICRO_BATCHES
                        (loss / world).backward()
            optimizer.step()
            yield {"loss": total, "weights": fingerprint(model)}
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
