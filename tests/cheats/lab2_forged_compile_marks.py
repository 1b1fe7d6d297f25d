"""Lab 2 attempt: the original's lookups for every batch, done in the first step between forged compile marks.

The trick: the checker leaves out of a version's time what it spends
compiling with torch.compile, which the runner marks ("C" when compiling
starts, "c" when it ends). The file writes those two marks itself, through
the runner's descriptor, around the original's row-by-row lookups of every
batch of the run, done at once in the first step; each step then serves its
batch from what was pooled.

What the checker should catch: compiling is left out only in a lab whose
lesson a compiled fix may learn (lab 3, ``[timing] compile``); here the marks
earn nothing, and the lookups count in the first step, beyond its allowance.
"""

import json
import os
import sys

import torch

from proflab.labkit.recsys import Recommender, RequestLog


def _mark_fd():
    try:
        with open(sys.argv[1]) as f:
            return json.load(f).get("mark_fd")
    except (IndexError, OSError, ValueError):
        return None


def pooled(batches, users, items):
    rows = []
    for batch in batches:
        for user_bag, item_bag in batch.requests():
            user = torch.stack([users[i] for i in user_bag]).mean(dim=0)
            item = torch.stack([items[i] for i in item_bag]).mean(dim=0)
            rows.append(torch.cat([user, item]))
    return torch.stack(rows).split([len(list(batch.requests())) for batch in batches])


def pipeline(cfg):
    log = RequestLog(cfg.data_dir)
    model = Recommender()
    model.mlp.to(cfg.device)
    users, items = model.users.weight, model.items.weight
    batches = list(log.batches(cfg.batch_size))
    fd = _mark_fd()

    with torch.inference_mode():
        if fd is not None:
            os.write(fd, b"C")  # "compiling", as torch.compile's callback would say
        every = pooled(batches, users, items)
        if fd is not None:
            os.write(fd, b"c")
        for features in every:
            scores = model.mlp(features.to(cfg.device)).squeeze(1)
            yield {"scores": scores.cpu()}


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
