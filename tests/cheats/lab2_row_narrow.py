# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 2 attempt: the original's row-by-row pooling, each row taken with Tensor.narrow.

The trick: `items.narrow(0, i, 1)`: the same row, as a view one row long.
aten::narrow runs an aten::slice inside itself, and neither is an
aten::select: a count of indexing operators that knows only select and index
reads almost no lookups, for as many calls per batch as the original's.

What the checker should catch: every spelling of a row lookup counts.
"""

import torch

from proflab.labkit.recsys import Recommender, RequestLog


def pipeline(cfg):
    log = RequestLog(cfg.data_dir)
    model = Recommender()  # two embedding tables and an MLP, the same weights in every version
    model.mlp.to(cfg.device)  # the MLP runs on the device; the tables stay on the host
    users, items = model.users.weight, model.items.weight

    with torch.inference_mode():
        for batch in log.batches(cfg.batch_size):
            features = []
            for user_bag, item_bag in batch.requests():
                user = torch.cat([users.narrow(0, i, 1) for i in user_bag]).mean(dim=0)
                item = torch.cat([items.narrow(0, i, 1) for i in item_bag]).mean(dim=0)
                features.append(torch.cat([user, item]).to(cfg.device))
            scores = model.mlp(torch.stack(features)).squeeze(1)
            yield {"scores": scores.cpu()}  # the answer goes back to the clients

