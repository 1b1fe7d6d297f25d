"""Lab 2 gaming attempt: stop the clock, so every batch seems to take no time.

The trick: the original, untouched, plus one line at import that replaces
time.perf_counter with a function that always returns 0.0, through setattr
on the time module (so that no assignment to time.perf_counter appears in
the file).

What the checker should catch: the runner bound its clock before the lab
file was imported, and the checker times the steps from its own stamps of
the runner's marks, in its own process; the patched clock changes nothing it
measures, and the original's slow lookups are as slow as ever. The source
audit refuses setattr and __import__ in a lab file.
"""

import torch

from proflab.labkit.recsys import Recommender, RequestLog

setattr(__import__("time"), "perf_counter", lambda: 0.0)


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
