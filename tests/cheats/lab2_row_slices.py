# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 2 attempt: the original's row-by-row pooling, each row taken as a one-row slice.

The trick: `items[i:i + 1]` instead of `items[i]`. The same rows, one call per
row, thousands per batch; but a slice runs aten::slice, not aten::select, so
a count of indexing operators that leaves slices out reads almost none.

What the checker should catch: every spelling of a row lookup counts (a
slice, narrow, a view made by hand, a table cut into rows).
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
                user = torch.cat([users[i:i + 1] for i in user_bag]).mean(dim=0)
                item = torch.cat([items[i:i + 1] for i in item_bag]).mean(dim=0)
                features.append(torch.cat([user, item]).to(cfg.device))
            scores = model.mlp(torch.stack(features)).squeeze(1)
            yield {"scores": scores.cpu()}  # the answer goes back to the clients

