"""The gate's view of train.py: one training step per yield, built from train.py's own functions.

`proflab gate` calls pipeline(cfg) in a fresh process and takes one step per
value it yields (warm-up, timed and profiled steps: pyproject.toml says how
many). It compares the values yielded by the two versions it measures, step
by step, so everything is seeded from cfg.seed. What is measured is
train.py's loader, model, optimizer and train_step: a change to any of them
is gated; train.py's main() (its printing, saving) is not.
"""

import train
from proflab.gatekit import endless, seed_everything


def pipeline(cfg):
    seed_everything(cfg.seed)
    loader = train.make_loader(cfg.data_dir, cfg.batch_size, seed=cfg.seed)
    features, labels = loader.dataset.tensors
    model = train.make_model(features.shape[1], int(labels.max()) + 1).to(cfg.device)
    optimizer = train.make_optimizer(model)
    for x, y in endless(loader):
        loss, logits = train.train_step(model, optimizer, x.to(cfg.device), y.to(cfg.device))
        yield {"loss": loss, "labels": y}
