"""Train an MLP with DistributedDataParallel; start with torchrun --nproc_per_node 2."""
import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--accumulate", type=int, default=1, help="micro-batches per optimizer step")
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
torch.set_num_threads(1)
model = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(512, 512), nn.ReLU())], nn.Linear(512, 10))
ddp = DistributedDataParallel(model, bucket_cap_mb=0.25)
optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
generator = torch.Generator().manual_seed(rank)
for step in range(args.steps):
    optimizer.zero_grad()
    for micro in range(args.accumulate):
        x = torch.randn(16, 512, generator=generator)
        y = torch.randint(0, 10, (16,), generator=generator)
        loss = nn.functional.cross_entropy(ddp(x), y) / args.accumulate
        loss.backward()
    optimizer.step()
if rank == 0:
    print(f"trained {args.steps} steps on {dist.get_world_size()} ranks, last loss {loss.item():.3f}")
dist.destroy_process_group()
