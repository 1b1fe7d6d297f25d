"""Write a small table to train on: data/train.csv, 32 numeric features and a class (0-7) per row.

    python make_data.py data

2048 rows, drawn from a fixed random teacher network, so the model has
something to learn. Use a few thousand rows of your own data instead: the gate
needs enough rows for its steps (a DataLoader starts a new epoch when it runs
out), not the whole dataset.
"""

import sys
from pathlib import Path

import numpy as np

ROWS, FEATURES, CLASSES = 2048, 32, 8


def make(root: Path, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(ROWS, FEATURES)).astype(np.float32)
    teacher = rng.normal(size=(FEATURES, CLASSES))
    y = np.argmax(np.tanh(x @ teacher) + 0.3 * rng.normal(size=(ROWS, CLASSES)), axis=1)
    root.mkdir(parents=True, exist_ok=True)
    path = root / "train.csv"
    header = ",".join([f"f{i}" for i in range(FEATURES)] + ["label"])
    rows = np.column_stack([x, y]).astype(object)
    rows[:, -1] = y
    np.savetxt(path, rows, delimiter=",", header=header, comments="", fmt=["%.5f"] * FEATURES + ["%d"])
    return path


if __name__ == "__main__":
    print(make(Path(sys.argv[1] if len(sys.argv) > 1 else "data")))
