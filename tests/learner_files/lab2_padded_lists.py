"""Lab 2, a sound fix as a learner new to tensors writes it: the bags padded in Python, then one gather.

batch.requests() gives each request's bags as Python lists; each side is padded with id 0 to the longest
bag, turned into one id matrix and one mask, looked up in one gather, masked, summed and divided by the
bags' lengths. The per-id Python work stays (building the lists), the per-id operators are gone."""

import torch

from proflab.labkit.recsys import Recommender, RequestLog


def pooled(table, bags, device):
    width = max(len(bag) for bag in bags)
    ids = torch.tensor([bag + [0] * (width - len(bag)) for bag in bags], device=device)
    lengths = torch.tensor([len(bag) for bag in bags], device=device)
    mask = torch.arange(width, device=device) < lengths[:, None]
    return (table[ids] * mask[..., None]).sum(dim=1) / lengths[:, None]


def pipeline(cfg):
    log = RequestLog(cfg.data_dir)
    model = Recommender().to(cfg.device)
    users, items = model.users.weight, model.items.weight

    with torch.inference_mode():
        for batch in log.batches(cfg.batch_size):
            user_bags, item_bags = zip(*batch.requests())
            user = pooled(users, list(user_bags), cfg.device)
            item = pooled(items, list(item_bags), cfg.device)
            scores = model.mlp(torch.cat([user, item], dim=1)).squeeze(1)
            yield {"scores": scores.cpu()}
