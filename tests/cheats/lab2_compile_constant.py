"""Lab 2 attempt: the original's lookups run by torch.compile itself, while it compiles.

The trick: ``torch.compiler.assume_constant_result`` marks a function whose
result the compiler takes as a constant: Dynamo calls it once, while it
traces, and bakes what it returned into the graph. Here that function is the
original's row-by-row pooling of every batch of the run, so all the lookups
happen inside a real compilation in the first step, between the runner's own
compile marks; the compiled function then hands out the pooled vectors.

What the checker should catch: the compiler runs the file's own code while it
compiles, which no mark tells from its own work. Compiling is left out only
in a lab whose lesson a compiled fix may learn (lab 3); here it counts, and
the lookups with it.
"""

import torch

from proflab.labkit.recsys import Recommender, RequestLog


def pipeline(cfg):
    log = RequestLog(cfg.data_dir)
    model = Recommender()
    model.mlp.to(cfg.device)
    users, items = model.users.weight.detach(), model.items.weight.detach()
    batches = list(log.batches(cfg.batch_size))
    sizes = [len(list(batch.requests())) for batch in batches]

    @torch.compiler.assume_constant_result
    def every_batch_pooled():
        rows = []
        for batch in batches:
            for user_bag, item_bag in batch.requests():
                user = torch.stack([users[i] for i in user_bag]).mean(dim=0)
                item = torch.stack([items[i] for i in item_bag]).mean(dim=0)
                rows.append(torch.cat([user, item]))
        return torch.stack(rows)

    pooled = torch.compile(lambda: every_batch_pooled() + 0, backend="eager")()
    with torch.inference_mode():
        for features in pooled.split(sizes):
            scores = model.mlp(features.to(cfg.device)).squeeze(1)
            yield {"scores": scores.cpu()}


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
