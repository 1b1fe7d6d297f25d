"""Lab 2 attempt: the original's lookups in a forked helper that is never reaped.

The trick: every batch's row-by-row lookups run in one child process, forked
in the first step, which sends the pooled vectors back through a pipe and
exits. The parent never waits for it, so it stays a zombie: it is in no live
process's CPU figure, and its operators are in no trace of the run's own
process. The parent only waits on the pipe, which costs no CPU, then serves
each batch from what came back.

What the checker should catch: every process a run starts lives in the run's
cgroup, whose CPU the kernel counts whether the process was reaped or not.
"""

import os

import torch

from proflab.labkit.recsys import Recommender, RequestLog


def pooled_in_child(batches, users, items):
    read, write = os.pipe()
    if os.fork() == 0:  # the helper: the original's loop for every batch, the answer through the pipe, gone
        os.close(read)
        rows = []
        for batch in batches:
            for user_bag, item_bag in batch.requests():
                user = torch.stack([users[i] for i in user_bag]).mean(dim=0)
                item = torch.stack([items[i] for i in item_bag]).mean(dim=0)
                rows.append(torch.cat([user, item]))
        view = memoryview(torch.stack(rows).numpy().tobytes())
        while view:
            view = view[os.write(write, view):]
        os._exit(0)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 1 << 20):
        chunks.append(chunk)
    os.close(read)  # the child is never waited for: a zombie until the run ends
    pooled = torch.frombuffer(bytearray(b"".join(chunks)), dtype=users.dtype).view(-1, 2 * users.shape[1])
    return pooled.split([len(list(batch.requests())) for batch in batches])


def pipeline(cfg):
    log = RequestLog(cfg.data_dir)
    model = Recommender()
    model.mlp.to(cfg.device)
    users, items = model.users.weight.detach(), model.items.weight.detach()
    batches = list(log.batches(cfg.batch_size))

    with torch.inference_mode():
        for batch, features in zip(batches, pooled_in_child(batches, users, items)):
            scores = model.mlp(features.to(cfg.device)).squeeze(1)
            yield {"scores": scores.cpu()}


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
