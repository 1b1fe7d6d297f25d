"""Lab 3 gaming attempt: run the fused block only while the profiler records, the original otherwise.

The trick: each step asks torch.autograd._profiler_enabled() (and the flag
torch.autograd.profiler._is_profiler_enabled, which torch.profiler.profile
sets while it runs) whether the profiler is recording. In the profiled steps
it runs the reference fix's fused block (F.layer_norm, F.gelu,
F.scaled_dot_product_attention), so the trace shows the fix and the
elementwise traffic drops; in every other step, the timed ones included, it
runs the original hand-written block. Both compute the same block, so the
results match within the tolerances.

What the checker should catch: the trace is evidence, not the measurement;
the speed-up is measured on the timed steps, which run the original block,
so the version is no faster than the original. (A profiled step faster than
a timed one is not flagged by itself: only one slower than the profiler's
own cost is.)
"""

import math

import torch
import torch.nn.functional as F
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


def fused_attention(x, p):
    B, T, D = x.shape
    qkv = F.linear(x, p["qkv_weight"].t(), p["qkv_bias"])
    q, k, v = qkv.view(B, T, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
    heads = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return F.linear(heads.transpose(1, 2).reshape(B, T, D), p["proj_weight"].t(), p["proj_bias"])


def fused_mlp(x, p):
    h = F.gelu(F.linear(x, p["fc1_weight"].t(), p["fc1_bias"]), approximate="tanh")
    return F.linear(h, p["fc2_weight"].t(), p["fc2_bias"])


def fused_block(x, p):
    D = x.shape[-1]
    with record_function("layer_norm"):
        h = F.layer_norm(x, (D,), p["ln1_weight"], p["ln1_bias"])
    with record_function("attention"):
        x = x + fused_attention(h, p)
    with record_function("layer_norm"):
        h = F.layer_norm(x, (D,), p["ln2_weight"], p["ln2_bias"])
    with record_function("mlp"):
        return x + fused_mlp(h, p)


def pipeline(cfg):
    data = TokenBatches(cfg.data_dir)
    params = init_params(cfg.device)  # the same weights in every version

    for x, target in data.batches(cfg.device):
        # Is anyone watching? (The first flag stays False when the profiler records every thread;
        # the Python-side one is set by every torch.profiler.profile while it runs.)
        profiled = torch.autograd._profiler_enabled() or torch.autograd.profiler._is_profiler_enabled
        out = (fused_block if profiled else block)(x, params)
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
