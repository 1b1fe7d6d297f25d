"""Lab 2 attempt: the checker's marks written by the file itself, the original's work outside its window.

The trick: at import, keep a copy of the mark channel (``os.dup`` of the
runner's descriptor) and put /dev/null in its place, so that the runner's own
marks go nowhere. Then write the marks itself: every warm-up and timed mark
during the first step, a millisecond of spinning between them, so the timed
window holds no work; the
original's row-by-row lookups then run in the steps after it, and the fused
lookup only in the steps the checker profiles. The channel is put back when
the profiled steps begin, so the runner's own marks and the trace's
fingerprint arrive from there on as usual.

What the checker should catch: the run does not stop where the runner stops
(the checker reads its CPU there), and it holds a second handle on the mark
channel, both seen from outside in /proc; and the CPU it spends after its
window, beyond the original's, counts.
"""

import json
import os
import sys
import time

import torch
from torch import nn

from proflab.labkit.recsys import Recommender, RequestLog


def _spec():
    try:
        with open(sys.argv[1]) as f:
            return json.load(f)
    except (IndexError, OSError, ValueError):
        return None


SPEC = _spec()
KEPT = None
if SPEC and SPEC.get("mark_fd") is not None:
    KEPT = os.dup(SPEC["mark_fd"])
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, SPEC["mark_fd"])
    os.close(null)


def mark(codes):
    if KEPT is not None:
        os.write(KEPT, codes)


def pipeline(cfg):
    log = RequestLog(cfg.data_dir)
    model = Recommender().to(cfg.device)
    users_bag = nn.EmbeddingBag.from_pretrained(model.users.weight, mode="mean")
    items_bag = nn.EmbeddingBag.from_pretrained(model.items.weight, mode="mean")
    users, items = model.users.weight, model.items.weight
    warm, timed, profiled = (SPEC["warmup_steps"], SPEC["timed_steps"], SPEC["profile_steps"]) if SPEC else (0, 0, 0)

    with torch.inference_mode():
        for step, batch in enumerate(log.batches(cfg.batch_size)):
            if step == 0 and KEPT is not None:  # a timed window of sleeps, as long as a fused step
                for code in b"W" * warm + b"S":
                    mark(bytes([code]))
                    time.sleep(0.6)  # the checker waits half a second at a mark it pauses at, then reads on
                for _ in range(timed):
                    until = time.perf_counter() + 0.001
                    while time.perf_counter() < until:  # a little CPU, as a fused step takes
                        pass
                    mark(b"T")
                mark(b"E")
                time.sleep(0.6)
            in_profile = SPEC is not None and step >= warm + timed
            if in_profile and step == warm + timed and KEPT is not None:
                mark(b"P")  # the runner's first "P" went to /dev/null: written here, then its channel back
                os.dup2(KEPT, SPEC["mark_fd"])
            if in_profile:
                batch = batch.to(cfg.device)
                user = users_bag(batch.user_ids, batch.user_offsets)
                item = items_bag(batch.item_ids, batch.item_offsets)
                scores = model.mlp(torch.cat([user, item], dim=1)).squeeze(1)
            else:
                features = []
                for user_bag, item_bag in batch.requests():
                    user = torch.stack([users[i] for i in user_bag]).mean(dim=0)
                    item = torch.stack([items[i] for i in item_bag]).mean(dim=0)
                    features.append(torch.cat([user, item]).to(cfg.device))
                scores = model.mlp(torch.stack(features)).squeeze(1)
            yield {"scores": scores.cpu()}


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
