# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 2 gaming attempt: score every batch up front, then run three tiny addmm per step.

The trick: the first step scores every batch the checker will ask for (22,
from lab.toml) with the original code and keeps the scores. Every later step
runs three torch.addmm on 1x1 tensors, so the trace still shows the MLP's
three aten::addmm and no aten::select at all, and yields the kept scores.

What the checker should catch: the work floor counts the floating-point
operations of aten::addmm from the recorded shapes; three 1x1 products are a
vanishing share of the MLP's. The scoring of 22 batches in the first step
also counts against the speed-up.
"""

import torch

from proflab.labkit.recsys import Recommender, RequestLog

STEPS = 2 + 16 + 4  # warmup_steps + timed_steps + profile_steps in lab.toml


def pipeline(cfg):
    log = RequestLog(cfg.data_dir)
    model = Recommender()  # two embedding tables and an MLP, the same weights in every version
    model.mlp.to(cfg.device)  # the MLP runs on the device; the tables stay on the host
    users, items = model.users.weight, model.items.weight

    with torch.inference_mode():
        cached = []
        for batch in log.batches(cfg.batch_size):
            features = []
            for user_bag, item_bag in batch.requests():
                user = torch.stack([users[i] for i in user_bag]).mean(dim=0)
                item = torch.stack([items[i] for i in item_bag]).mean(dim=0)
                features.append(torch.cat([user, item]).to(cfg.device))
            scores = model.mlp(torch.stack(features)).squeeze(1)
            cached.append(scores.cpu())
            if len(cached) == STEPS:
                break

        yield {"scores": cached[0]}
        one = torch.ones(1, 1, device=cfg.device)
        for scores in cached[1:]:
            h = one
            for _ in range(3):  # "the MLP's three linear layers"
                h = torch.addmm(one, h, one)
            yield {"scores": scores}


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
