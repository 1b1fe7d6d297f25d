# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 3 gaming attempt: train every step up front, then run twelve 2x2 matrix products per step.

The trick: the first step trains the original hand-written block for every
step the checker takes (3 warm-up + 40 timed + 3 profiled, from lab.toml) and
keeps each step's loss and mean outputs. Every later step runs twelve
torch.mm on 2x2 tensors, as many as the block's four products forward and
backward, so the trace shows aten::mm and hardly any elementwise traffic,
and yields the kept values.

What the checker should catch: the work floor counts the products'
floating-point operations from their recorded shapes; twelve 2x2 products are
a vanishing share of the block's. The 46 steps trained in the first step
also count against the speed-up.
"""

import math

import torch
from torch.profiler import record_function

from proflab.labkit.blocks import HEADS, TokenBatches, init_params

STEPS = 3 + 40 + 3  # warmup_steps + timed_steps + profile_steps in lab.toml


def layer_norm(x, weight, bias, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def softmax(scores):
    scores = scores - scores.max(dim=-1, keepdim=True).values
    e = torch.exp(scores)
    return e / e.sum(dim=-1, keepdim=True)


def attention(x, p):
    B, T, D = x.shape
    qkv = x @ p["qkv_weight"] + p["qkv_bias"]
    q, k, v = qkv.view(B, T, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(D // HEADS)
    causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    heads = softmax(scores) @ v
    return heads.transpose(1, 2).reshape(B, T, D) @ p["proj_weight"] + p["proj_bias"]


def mlp(x, p):
    return gelu(x @ p["fc1_weight"] + p["fc1_bias"]) @ p["fc2_weight"] + p["fc2_bias"]


def block(x, p):
    x = x + attention(layer_norm(x, p["ln1_weight"], p["ln1_bias"]), p)
    return x + mlp(layer_norm(x, p["ln2_weight"], p["ln2_bias"]), p)


def pipeline(cfg):
    data = TokenBatches(cfg.data_dir)
    params = init_params(cfg.device)  # the same weights in every version

    results = []
    for x, target in data.batches(cfg.device):  # every step's training, in the first one
        out = block(x, params)
        loss = ((out - target) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            for w in params.values():
                w -= cfg.lr * w.grad
                w.grad = None
        results.append({"loss": loss.detach(), "out": out.detach().mean(dim=(0, 2))})
        if len(results) == STEPS:
            break

    yield results[0]
    a = torch.randn(2, 2, device=cfg.device)
    for result in results[1:]:
        with record_function("backward"):
            h = a
            for _ in range(12):  # "the block's four products, forward and backward"
                h = torch.mm(h, a)
        yield result


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
