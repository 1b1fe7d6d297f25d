"""Train a small classifier on a table of numbers: an ordinary PyTorch training script.

    python make_data.py data                 # once, if you have no data of your own
    python train.py --data data --epochs 10

It reads data/train.csv (numeric feature columns, then a class label), trains
an MLP with AdamW, prints the loss and accuracy per epoch and saves the
weights. It knows nothing of proflab: pipeline.py gates one training step in
CI by calling the functions it is made of (make_loader, make_model,
make_optimizer, train_step).
"""

import argparse
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def load_table(data_dir):
    table = np.loadtxt(Path(data_dir) / "train.csv", delimiter=",", skiprows=1, dtype=np.float32)
    features = torch.from_numpy(table[:, :-1])
    labels = torch.from_numpy(table[:, -1]).long()
    return TensorDataset(features, labels)


def make_loader(data_dir, batch_size, seed=0):
    return DataLoader(load_table(data_dir), batch_size=batch_size, shuffle=True, drop_last=True,
                      generator=torch.Generator().manual_seed(seed))


def make_model(features, classes, hidden=256):
    return nn.Sequential(
        nn.Linear(features, hidden), nn.ReLU(),
        nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, classes),
    )


def make_optimizer(model, lr=1e-3):
    return torch.optim.AdamW(model.parameters(), lr=lr)


def train_step(model, optimizer, features, labels):
    """One step: forward, backward, update. Returns the loss and the logits, as tensors (reading a value
    out of one, with .item(), waits for the device)."""
    logits = model(features)
    loss = F.cross_entropy(logits, labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss, logits


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="data")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="model.pt")
    args = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(args.seed)
    loader = make_loader(args.data, args.batch_size, args.seed)
    features, labels = loader.dataset.tensors
    model = make_model(features.shape[1], int(labels.max()) + 1).to(device)
    optimizer = make_optimizer(model)
    for epoch in range(args.epochs):
        total_loss = torch.zeros((), device=device)
        correct = torch.zeros((), device=device, dtype=torch.long)
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss, logits = train_step(model, optimizer, x, y)
            total_loss += loss.detach()
            correct += (logits.argmax(dim=1) == y).sum()
        seen = len(loader) * args.batch_size
        print(f"epoch {epoch + 1}: loss {total_loss.item() / len(loader):.3f}, "
              f"accuracy {correct.item() / seen:.1%}")
    torch.save(model.state_dict(), args.out)


if __name__ == "__main__":
    main()
