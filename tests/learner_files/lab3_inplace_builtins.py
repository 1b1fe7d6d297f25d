"""Lab 3, fixed in place: each hand-written chain swapped for its fused built-in, line for line.

The original's block, with the three chains the trace shows filled with small
operators replaced where they stand: the LayerNorm's mean, variance and
square root by F.layer_norm (the same eps); GELU's tanh formula by
F.gelu(approximate="tanh"), the same formula in one operator; the softmax's
max, subtract, exp, sum and divide by F.softmax. Attention keeps its shape as
written: the scores as a matmul, the scale, the causal mask by masked_fill,
the fused softmax, then the second matmul.
"""

import math

import torch
import torch.nn.functional as F
from torch.profiler import record_function

from proflab.labkit.blocks import HEADS, TokenBatches, init_params


def layer_norm(x, weight, bias, eps=1e-5):
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def gelu(x):
    return F.gelu(x, approximate="tanh")


def softmax(scores):
    return F.softmax(scores, dim=-1)


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
