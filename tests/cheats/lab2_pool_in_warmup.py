# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 2 gaming attempt: pool every request of every batch in the first step, then only run the MLP.

The trick: the original's lookups, Python loop and all, but run for every
batch the checker will ask for (2 warm-up + 16 timed + 4 profiled, from
lab.toml) inside the first step, keeping each batch's pooled feature vectors.
Every step then runs the MLP on its batch's kept vectors, so the trace shows
the MLP's three aten::addmm and none of the thousands of aten::select, and
the scores are the original's.

What the checker should catch: the first step is left out of the timing only
up to the original's first step plus a little slack; the pooling of 22
batches done there counts as work moved out of the timed steps, and overall
the version is no faster than the original.
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
        pooled = []  # every batch's feature vectors, in the first step
        for batch in log.batches(cfg.batch_size):
            features = []
            for user_bag, item_bag in batch.requests():
                user = torch.stack([users[i] for i in user_bag]).mean(dim=0)
                item = torch.stack([items[i] for i in item_bag]).mean(dim=0)
                features.append(torch.cat([user, item]).to(cfg.device))
            pooled.append(torch.stack(features))
            if len(pooled) == STEPS:
                break

        for features in pooled:
            scores = model.mlp(features).squeeze(1)
            yield {"scores": scores.cpu()}


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
