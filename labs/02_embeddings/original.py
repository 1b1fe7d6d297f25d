"""Lab 2: a recommendation service that scores batches of requests.

A real-time recommendation service scores batches of requests: for each
request, how likely is this user to click this item? A request carries two
bags of ids of varying length, the user's features and the item's. Each bag
goes through an embedding table and is pooled into one vector (the mean of its
rows); an MLP turns the two vectors into a score. The model is small and runs
in inference mode. Yet every batch takes a long time to answer. Why?

    proflab run embeddings       profile this file (or: python exercise.py)
    proflab tensorboard          look at the trace
    proflab check embeddings     measure your fix against the original

The checker calls pipeline(cfg) and serves one batch of requests for each value
it yields; the time between two yields is the latency of a batch. cfg carries
the device, the batch size, the seed and the data folder. What a batch holds,
field by field: help(proflab.labkit.recsys.Batch).
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
                user = torch.stack([users[i] for i in user_bag]).mean(dim=0)
                item = torch.stack([items[i] for i in item_bag]).mean(dim=0)
                features.append(torch.cat([user, item]).to(cfg.device))
            scores = model.mlp(torch.stack(features)).squeeze(1)
            yield {"scores": scores.cpu()}  # the answer goes back to the clients


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
