import torch

from proflab.labkit.recsys import Recommender, RequestLog


def pipeline(cfg):
    log = RequestLog(cfg.data_dir)
    model = Recommender().to(cfg.device)
    users, items = model.users.weight, model.items.weight
    with torch.inference_mode():
        for batch in log.batches(cfg.batch_size):
            features = []
            for user_bag, item_bag in batch.requests():
                # one lookup per bag instead of one per id: better, but still a loop over requests
                user = users[torch.tensor(user_bag, device=cfg.device)].mean(dim=0)
                item = items[torch.tensor(item_bag, device=cfg.device)].mean(dim=0)
                features.append(torch.cat([user, item]))
            scores = model.mlp(torch.stack(features)).squeeze(1)
            yield {"scores": scores.cpu()}
