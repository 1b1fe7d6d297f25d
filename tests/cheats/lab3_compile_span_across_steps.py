"""Lab 3 attempt (a red-team pass): the original's slow chains, unchanged, with the warm-up marked as compiling.

The tricks, found by reading the kit's source: the compiler's own start and
end callbacks (``torch._dynamo.callback``) called by hand, so that a "C"
mark opens at import, before the first step's end, and its "c" closes after
the third warm-up step; the first timed step computed in a hook before the
timed window opens; the last timed steps deferred past the window; and the
profiled steps' work moved between the profiler's stop and the trace's
fingerprint, with placeholders yielded meanwhile (the runner's own helpers
rebound from the file).

What the checker should catch: a compile span that holds a step's mark was
written by the run, not the compiler (torch.compile compiles within the step
that calls it), and earns nothing; before that it was left out twice, once as
compiling and again in the first step's allowance. The work moved after the
window is paid for there. It came back 1.07x, 1.09x and 1.14x, inconclusive
against the 1.1x threshold, before; it must never pass.
"""


import math
import sys
import time

import torch
from torch.profiler import record_function
from torch._dynamo.callback import callback_handler

from proflab.labkit.blocks import HEADS, TokenBatches, init_params


# ---- the original's code, verbatim -------------------------------------------------------------
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
    with record_function("layer_norm"):
        h = layer_norm(x, p["ln1_weight"], p["ln1_bias"])
    with record_function("attention"):
        x = x + attention(h, p)
    with record_function("layer_norm"):
        h = layer_norm(x, p["ln2_weight"], p["ln2_bias"])
    with record_function("mlp"):
        return x + mlp(h, p)


def real_step(x, target, params, lr):
    out = block(x, params)
    loss = ((out - target) ** 2).mean()
    with record_function("backward"):
        loss.backward()
    with torch.no_grad(), record_function("sgd_step"):
        for w in params.values():
            w -= lr * w.grad
            w.grad = None
    return loss.detach(), out.detach().mean(dim=(0, 2))


# ---- the attack's plumbing ------------------------------------------------------------------------
def _runner_frame():
    f = sys._getframe()
    while f is not None:
        if f.f_code.co_name == "run" and "_marker" in f.f_globals and "spec" in f.f_locals:
            return f
        f = f.f_back
    return None


_RF = _runner_frame()
_RG = _RF.f_globals if _RF is not None else {}
# where the runner's mark writer is bound (its module of marks and readings beside the steps)
_MG = vars(sys.modules["proflab.running.marking"]) if "proflab.running.marking" in sys.modules else {}
_SPEC = dict(vars(_RF.f_locals["spec"])) if _RF is not None else {}  # the runner's RunSpec
WARMUP = int(_SPEC.get("warmup_steps", 3))
TIMED = int(_SPEC.get("timed_steps", 40))

_placeholders = set()  # ids of yielded dicts the runner must keep by reference (filled in later)
_deferred = []  # (x, target, placeholder dict) of profiled steps, computed once the profiler has stopped
_state = {}

if "_keep" in _RG:
    _orig_keep = _RG["_keep"]

    def _keep(out, step, torch_):
        if id(out) in _placeholders:
            return out
        return _orig_keep(out, step, torch_)

    _RG["_keep"] = _keep

if "_write" in _MG:
    _orig_write = _MG["_write"]

    def _write(fd, code):
        if code[:1] == b"H" and _deferred:  # the profiler has stopped: do the profiled steps' real work now
            _catch_up()
        r = _orig_write(fd, code)
        if code == b"W":
            _state["w"] = _state.get("w", 0) + 1
            if _state["w"] == WARMUP and "it" in _state:  # the first timed step's batch is handed out now
                x, target = next(_state["it"])
                _state["pre"] = real_step(x, target, _state["params"], _state["lr"])
                callback_handler.run_end_callbacks(None)  # "compiling" ends just before the timed window
        return r

    _MG["_write"] = _write


def _catch_up():
    params, lr = _state["params"], _state["lr"]
    while _deferred:
        x, target, ph = _deferred.pop(0)
        loss, out = real_step(x, target, params, lr)
        ph["loss"].copy_(loss)
        ph["out"].copy_(out)


def _decoy(x, p):
    """Only the block's matrix products, forward and backward shapes: what the profiler is shown."""
    B, T, D = x.shape
    X = x.reshape(B * T, D)
    with torch.no_grad():
        for name in ("qkv_weight", "proj_weight", "fc1_weight", "fc2_weight"):
            w = p[name]
            inp = X if w.shape[0] == D else torch.ones(B * T, w.shape[0])
            y = torch.mm(inp, w)
            torch.mm(y, w.t())  # grad of the input
            torch.mm(inp.t(), y)  # grad of the weight


def _burn(seconds):
    t = time.process_time()
    z = 0
    while time.process_time() - t < seconds:
        z += 1
    return z



# Opened at import: the import, the data, the first step and the rest of the warm-up, "compiling".
callback_handler.run_start_callbacks(None)
_burn(1.0)  # step 1 is counted twice as left out (compile span and first-step allowance): pad it

DEFER = 2  # the last timed steps' work moves after the window (within the after allowance)
PROFILED = int(_SPEC.get("profile_steps", 0))


def pipeline(cfg):
    data = TokenBatches(cfg.data_dir)
    params = init_params(cfg.device)
    it = data.batches(cfg.device)
    _state.update(params=params, lr=cfg.lr, it=it)
    step = 0
    try:
        while True:
            if step == WARMUP and "pre" in _state:
                loss, out = _state.pop("pre")
                step += 1
                yield {"loss": loss, "out": out}
                continue
            try:
                x, target = next(it)
            except StopIteration:
                return
            deferred_timed = WARMUP + TIMED - DEFER <= step < WARMUP + TIMED
            if step >= WARMUP + TIMED or deferred_timed:
                if step >= WARMUP + TIMED:
                    _decoy(x, params)  # a profiled step: show the profiler only the matrix products
                ph = {"loss": torch.zeros(()), "out": torch.zeros(x.shape[1])}
                _placeholders.add(id(ph))
                _deferred.append((x, target, ph))
                step += 1
                yield ph
                continue
            loss, out = real_step(x, target, params, cfg.lr)
            step += 1
            yield {"loss": loss, "out": out}
    finally:
        if _deferred and not PROFILED:  # no profiled steps: catch up as the runner closes the pipeline
            _catch_up()
