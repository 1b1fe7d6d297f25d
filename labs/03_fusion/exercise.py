"""Lab 3: a transformer block written by hand, one small operator at a time.

A small transformer-style block (attention, then an MLP, each after a
LayerNorm) learns to map token embeddings to targets. Every piece is written
out of elementwise primitives, as a textbook would: LayerNorm as a mean, a
variance and a square root; GELU as its tanh formula; attention as a matmul, a
scale, a causal mask, a softmax made of exp, sum and divide, then a second
matmul. Each piece is correct. Yet a training step takes far longer than the
few matrix products in it. Why?

    proflab run fusion           profile this file (or: python exercise.py)
    proflab tensorboard          look at the trace
    proflab check fusion         measure your fix against the original

The checker calls pipeline(cfg) and takes one training step (forward, loss,
backward, SGD update) for each value it yields. cfg carries the device, the
seed, the data folder and the learning rate (cfg.lr).
"""

import math

import torch
from torch.profiler import record_function

from proflab.labkit.blocks import HEADS, TokenBatches, init_params


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
    q, k, v = qkv.view(B, T, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)  # each (B, heads, T, D // heads)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(D // HEADS)
    causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()  # a token sees itself and earlier ones
    scores = scores.masked_fill(~causal, float("-inf"))
    heads = softmax(scores) @ v
    return heads.transpose(1, 2).reshape(B, T, D) @ p["proj_weight"] + p["proj_bias"]


def mlp(x, p):
    return gelu(x @ p["fc1_weight"] + p["fc1_bias"]) @ p["fc2_weight"] + p["fc2_bias"]


def block(x, p):
    with record_function("layer_norm"):
        h = layer_norm(x, p["ln1_weight"], p["ln1_bias"])
    with record_function("attention"):
        x = x + attention(h, p)
    with record_function("layer_norm"):
        h = layer_norm(x, p["ln2_weight"], p["ln2_bias"])
    with record_function("mlp"):
        return x + mlp(h, p)


def pipeline(cfg):
    data = TokenBatches(cfg.data_dir)
    params = init_params(cfg.device)  # the same weights in every version

    for x, target in data.batches(cfg.device):
        out = block(x, params)
        loss = ((out - target) ** 2).mean()
        with record_function("backward"):
            loss.backward()
        with torch.no_grad(), record_function("sgd_step"):
            for w in params.values():
                w -= cfg.lr * w.grad
                w.grad = None
        yield {"loss": loss.detach(), "out": out.detach().mean(dim=(0, 2))}  # the mean output at each position


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
