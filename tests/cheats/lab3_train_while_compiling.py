"""Lab 3 attempt: every step's training done by torch.compile itself, while it compiles in the first step.

The trick: ``torch.compiler.assume_constant_result`` marks a function that
Dynamo calls once, while it traces, baking what it returns into the graph.
Here that function trains the original hand-written block for every step the
checker takes (46, from lab.toml), over the stored batches in their order,
and keeps each step's loss and mean outputs. Lab 3 leaves the time spent
compiling in the warm-up out of the figure (a compiled fix is sound there),
so all of that training sits inside a real compilation, between the runner's
own compile marks. Every later step runs the block's four matrix products at
their real sizes on data drawn once (the trace shows the full floating-point
work, no elementwise traffic) and yields the kept values.

What the checker should catch: no mark tells the compiler's work from the
file's own. In a check of this lab the checker hands out each step's batch
only as the step begins (``labkit.handout``), so a step's training cannot be
done before its batch is known: the kept values are for batches the checker
never handed out, and the results differ from the original's.
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

    @torch.compiler.assume_constant_result
    def every_step_trained():
        results, p = [], {k: w.detach().clone().requires_grad_() for k, w in params.items()}  # per call
        for x, target in zip(data.inputs, data.targets):  # every step's training, in order, while compiling
            x, target = x.to(cfg.device), target.to(cfg.device)
            out = block(x, p)
            loss = ((out - target) ** 2).mean()
            loss.backward()
            with torch.no_grad():
                for w in p.values():
                    w -= cfg.lr * w.grad
                    w.grad = None
            results.append(torch.cat([loss.detach().reshape(1), out.detach().mean(dim=(0, 2))]))
            if len(results) == STEPS:
                break
        return torch.stack(results)

    with torch.enable_grad():
        kept = torch.compile(lambda: every_step_trained() + 0, backend="eager")()
    results = [{"loss": row[0], "out": row[1:]} for row in kept]
    x = data.inputs[0].to(cfg.device)
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
