"""Lab 6 without DDP: each parameter's gradient all-reduced by hand, once per optimizer step.

Each rank sums its micro-batches' gradients alone; after the last micro-batch every parameter's
gradient is all-reduced on its own (a sum over the ranks) and divided by the number of ranks: the
average DDP computes, in one message per parameter and step, with no flattening."""

import torch
import torch.distributed as dist
from torch.profiler import record_function
from torch.utils.data import DataLoader, DistributedSampler

from proflab.labkit.ddp import Samples, WideMLP, fingerprint, loss_of

MICRO_BATCHES = 8  # each optimizer step sums the gradients of 8 micro-batches


def pipeline(cfg):
    dist.init_process_group(cfg.backend)
    try:
        world = dist.get_world_size()
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
                    loss.backward()  # summed into .grad, on this rank only
                total += loss.detach()
            with record_function("all_reduce"):
                for p in params:  # one message per parameter, once per step: the sum over the ranks
                    dist.all_reduce(p.grad)
                    p.grad /= world
            optimizer.step()
            yield {"loss": total, "weights": fingerprint(model)}
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
