"""Lab 2 attempt: a lookup per request (not per batch), spelled in numpy so the profiler never sees it.

A partial fix: each request's bag is gathered with one fancy-indexing call,
512 lookups a batch where the lesson asks for one (or a handful). Spelled
with torch (users[ids]) it reads 512 aten::index a step, 7.5% of the
original's 6784, and fails the evidence (at most 1%). Spelled with numpy on
a view of the same table, the trace shows no lookup at all (indexing_ops
counts aten:: operators only). The checker should catch that the per-request
lookups are still there.
"""

import numpy as np
import torch

from proflab.labkit.recsys import Recommender, RequestLog


def pipeline(cfg):
    log = RequestLog(cfg.data_dir)
    model = Recommender()
    model.mlp.to(cfg.device)
    users = model.users.weight.detach().numpy()
    items = model.items.weight.detach().numpy()
    d = users.shape[1]

    with torch.inference_mode():
        for batch in log.batches(cfg.batch_size):
            features = np.empty((len(batch), d + items.shape[1]), dtype=np.float32)
            for r, (user_bag, item_bag) in enumerate(batch.requests()):
                features[r, :d] = np.add.reduce(users[user_bag]) / len(user_bag)
                features[r, d:] = np.add.reduce(items[item_bag]) / len(item_bag)
            scores = model.mlp(torch.from_numpy(features).to(cfg.device)).squeeze(1)
            yield {"scores": scores.cpu()}
