# audit: plain Python, which the source audit lets through; what the checker measures must catch it
"""Lab 3 gaming attempt: train every step up front, then run the block's matrix products on random data.

The trick: the first step trains the original hand-written block for every
step the checker takes (46, from lab.toml) and keeps each step's loss and
mean outputs. Every later step runs the block's four matrix products at
their real sizes, forward and backward (twelve torch.mm on data drawn once),
so the trace shows the block's full floating-point work and no elementwise
traffic at all, and yields the kept values.

What the checker should catch: the work floor and the elementwise traffic
both look right here; what gives it away is the first step, which is left
out of the timing only up to the original's first step plus a little slack.
The 46 steps of the original trained there count, and the version is slower
than the original overall.
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
    # The block's four products at their real sizes, forward (x @ w) and backward (g @ w.T, x.T @ g),
    # on data drawn once: the same floating-point work, none of it for the results.
    rows = x.shape[0] * x.shape[1]  # batch x tokens
    sizes = [(name, w.shape) for name, w in params.items() if name.endswith("_weight") and w.dim() == 2]
    operands = [(torch.randn(rows, n_in, device=cfg.device), torch.randn(n_in, n_out, device=cfg.device),
                 torch.randn(rows, n_out, device=cfg.device)) for _, (n_in, n_out) in sizes]
    for result in results[1:]:
        with record_function("backward"):
            for inp, w, grad in operands:
                torch.mm(inp, w)  # forward
                torch.mm(grad, w.t())  # gradient of the input
                torch.mm(inp.t(), grad)  # gradient of the weight
        yield result


if __name__ == "__main__":
    import proflab

    proflab.profile_file(__file__)
