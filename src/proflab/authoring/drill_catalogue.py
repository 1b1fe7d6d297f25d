"""The bottlenecks a diagnosis drill is drawn from (``drills``): the ones the labs teach, each in a model of its
own, with the lines that fix it, the evidence it is graded on and where its profile shows it.

A bottleneck is data: its pipeline's source (``original``: imports, two blank lines, then the rest; ``$name``
fields filled from ``choices`` by the learner's seed), the lines its fix changes (``fix``: each a line of the
original and what it becomes), the manifest's tables for it (``manifest``: workload, results, evidence,
speed-up, timing), and what a right diagnosis names: a part of the step as the Overview names it (``parts``),
or an operator whose name holds one of ``operator_words``. Adding one: a new entry here (its tests find it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Bottleneck:
    key: str
    title: str
    story: str  # the drill's first line after "Drill for <who>:"
    original: str
    fix: tuple[tuple[str, str], ...]
    manifest: str
    parts: tuple[str, ...] = ()
    operator_words: tuple[str, ...] = ()
    choices: dict[str, tuple] = None  # type: ignore[assignment]  # a dict among them: several words at once
    top: str = ""  # the manifest's top-level keys of this bottleneck (before any table): its data


def workload(batch_size: int | str, timed_steps: int = 10, warmup_steps: int = 2, **more: object) -> str:
    """A drill's [workload] table: one thread, four profiled steps, two rounds at least; ``more`` keys after."""
    lines = [f"batch_size = {batch_size}", "seed = 0", "threads = 1", f"warmup_steps = {warmup_steps}",
             f"timed_steps = {timed_steps}", "profile_steps = 4", "rounds = 2", "timeout_s = 120",
             *(f"{key} = {value}" for key, value in more.items())]
    return "[workload]\n" + "\n".join(lines) + "\n"


TRAIN_RESULTS = """
[results.loss]
what = "the training loss"
rtol = 1e-4
atol = 1e-5
hint = "The same model, the same batches and the same optimizer steps as the original."
"""

LOOKUPS = Bottleneck(
    key="lookups",
    title="a scorer of $things",
    story="a scorer learns a number for each $thing from the $items it holds.",
    choices={"story": ({"thing": "basket", "items": "products", "things": "baskets"},
                       {"thing": "playlist", "items": "songs", "things": "playlists"},
                       {"thing": "session", "items": "pages", "things": "sessions"}),
             "rows": (3000, 4000, 5000), "width": (24, 32, 48), "bag": (6, 8, 10), "hidden": (32, 64)},
    original='''import torch
from torch import nn
from torch.nn import functional as F


ROWS, WIDTH, BAG = $rows, $width, $bag


class Scorer(nn.Module):
    """A $thing's score: the mean of its $items' rows of a table, then two layers."""

    def __init__(self):
        super().__init__()
        self.table = nn.Embedding(ROWS, WIDTH)
        self.head = nn.Sequential(nn.Linear(WIDTH, $hidden), nn.ReLU(), nn.Linear($hidden, 1))

    def forward(self, ids):
        pooled = torch.stack([torch.stack([self.table.weight[i] for i in row]).mean(0) for row in ids])
        return self.head(pooled).squeeze(1)


def pipeline(cfg):
    torch.manual_seed(cfg.seed)
    model = Scorer().to(cfg.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(cfg.seed)
    while True:
        ids = torch.randint(0, ROWS, (cfg.batch_size, BAG), generator=g).to(cfg.device)
        target = torch.randn(cfg.batch_size, generator=g).to(cfg.device)
        loss = F.mse_loss(model(ids), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        yield {"loss": loss.detach()}
''',
    fix=(("        pooled = torch.stack([torch.stack([self.table.weight[i] for i in row]).mean(0) for row in ids])",
          "        pooled = self.table(ids).mean(1)"),),
    manifest="""
""" + workload(32) + """""" + TRAIN_RESULTS + """
[evidence]
metric = "indexing_ops"
label = "rows looked up one at a time, per step"
unit = "ops"
max_vs_original = 0.1
where = "the Operators table: the indexing operators' calls per step"

[speedup]
cpu = 2.0
cuda = 2.0

[timing]
cpu = "cpu_time"
cuda = "wall_time"
why = "the work the lookups cost, which other jobs on a shared machine move far less than the clock"
""",
    operator_words=("select", "index", "embedding", "stack", "fill", "zero", "copy", "as_strided", "add"),
)

ELEMENTWISE = Bottleneck(
    key="elementwise",
    title="a regressor of $what",
    story="a network predicts $what from $n measurements.",
    choices={"what": ("the load of a server", "a river's level", "a sensor's drift"), "n": (48, 64),
             "hidden": (384, 512)},
    original='''import torch
from torch import nn
from torch.nn import functional as F


FEATURES, HIDDEN = $n, $hidden


def swish(x):
    return x * (1.0 / (1.0 + torch.exp(-x)))


def normalise(x, weight, bias, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(FEATURES, HIDDEN)
        self.weight, self.bias = nn.Parameter(torch.ones(HIDDEN)), nn.Parameter(torch.zeros(HIDDEN))
        self.mid = nn.Linear(HIDDEN, HIDDEN)
        self.out = nn.Linear(HIDDEN, 1)

    def forward(self, x):
        h = swish(normalise(self.inp(x), self.weight, self.bias))
        h = swish(normalise(self.mid(h), self.weight, self.bias))
        return self.out(h).squeeze(1)


def pipeline(cfg):
    torch.manual_seed(cfg.seed)
    model = Regressor().to(cfg.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(cfg.seed)
    while True:
        x = torch.randn(cfg.batch_size, FEATURES, generator=g).to(cfg.device)
        target = torch.randn(cfg.batch_size, generator=g).to(cfg.device)
        loss = F.mse_loss(model(x), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        yield {"loss": loss.detach()}
''',
    fix=(("    return x * (1.0 / (1.0 + torch.exp(-x)))", "    return F.silu(x)"),
         ("""    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias""",
          "    return F.layer_norm(x, x.shape[-1:], weight, bias, eps)")),
    manifest="""
""" + workload(512) + """""" + TRAIN_RESULTS + """
[evidence]
metric = "elementwise_traffic"
label = "elements read per step outside matrix products"
unit = "M elements"
max_vs_original = 0.6
where = "the Operators table: the elementwise operators (aten::mul, aten::add, aten::exp, ...) and their calls"

[speedup]
cpu = 1.3
cuda = 1.3

[timing]
cpu = "cpu_time"
cuda = "wall_time"
why = "the memory traffic of elementwise operators, as CPU work: other jobs on a machine move it far less than the clock"
""",
    operator_words=("mul", "add", "sub", "div", "exp", "pow", "sqrt", "mean", "neg", "reciprocal", "rsub", "sum",
                    "sigmoid"),
)

READS = Bottleneck(
    key="reads",
    title="a classifier that keeps its books",
    story="a classifier of $what learns, and says how well it does.",
    choices={"what": ("transactions", "emails", "images of digits"), "features": (64, 96), "classes": (10, 20),
             "batch": (1024, 1536)},
    original='''import torch
from torch import nn
from torch.nn import functional as F


FEATURES, CLASSES = $features, $classes


def pipeline(cfg):
    torch.manual_seed(cfg.seed)
    model = nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, CLASSES)).to(cfg.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(cfg.seed)
    correct = seen = 0
    while True:
        x = torch.randn(cfg.batch_size, FEATURES, generator=g).to(cfg.device)
        y = torch.randint(0, CLASSES, (cfg.batch_size,), generator=g).to(cfg.device)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        for p, t in zip(logits.argmax(1), y):
            correct += int(p.item() == t.item())
        seen += len(y)
        yield {"loss": loss.detach(), "accuracy": correct / seen}
''',
    fix=(("        for p, t in zip(logits.argmax(1), y):\n            correct += int(p.item() == t.item())",
          "        correct += int((logits.argmax(1) == y).sum())"),),
    manifest="""
""" + workload("$batch") + """""" + TRAIN_RESULTS + """
[results.accuracy]
what = "the accuracy over every sample so far"
rtol = 0
atol = 1e-9
hint = "Count the same correct predictions: the argmax of the logits against the labels, every step."

[evidence]
metric = "host_syncs"
label = "host round trips per step"
unit = "per step"
max_vs_original = 0.1
where = "the Operators table: aten::item and aten::_local_scalar_dense, calls per step"

[speedup]
cpu = 1.5
cuda = 1.5

[timing]
cpu = "cpu_time"
cuda = "wall_time"
why = "the host's work for each value read into Python, which other jobs on a machine move far less than the clock"
""",
    parts=("host reads and syncs", "Python between operators"),
    operator_words=("item", "_local_scalar_dense", "eq", "select"),
)

HOST_WORK = Bottleneck(
    key="host_work",
    title="a model that keeps a snapshot of itself",
    story="a $what model learns from generated examples.",
    choices={"what": ("forecasting", "ranking", "tagging"), "hidden": (768, 1024), "features": (256,)},
    original='''import io

import torch
from torch import nn
from torch.nn import functional as F


FEATURES, HIDDEN = $features, $hidden


def pipeline(cfg):
    torch.manual_seed(cfg.seed)
    model = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                          nn.Linear(HIDDEN, 1)).to(cfg.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(cfg.seed)
    snapshot = io.BytesIO()
    for step in range(10**9):
        x = torch.randn(cfg.batch_size, FEATURES, generator=g).to(cfg.device)
        target = torch.randn(cfg.batch_size, generator=g).to(cfg.device)
        loss = F.mse_loss(model(x).squeeze(1), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 1 == 0:
            snapshot.seek(0)
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, snapshot)
        yield {"loss": loss.detach()}
''',
    fix=(("        if step % 1 == 0:", "        if step % 1000 == 0:"),),
    manifest="""
""" + workload(64) + """""" + TRAIN_RESULTS + """
[evidence]
metric = "host_gap"
label = "time per step no operator covers"
unit = "ms"
max_vs_original = 0.5
where = "the Profile tab's Overview: Python between operators; the Trace timeline: the gaps inside each ProfilerStep#"

[speedup]
cpu = 1.2
cuda = 1.2

[timing]
cpu = "wall_time"
cuda = "wall_time"
why = "the step's whole time, its host work outside the operators included, as the clock sees it"
""",
    parts=("Python between operators",),
    operator_words=(),
)

BATCH_NORM = Bottleneck(
    key="batch_norm",
    title="a network serving $what",
    story="a deep, narrow network, trained already, answers small batches of $what.",
    choices={"what": ("price quotes", "fraud scores", "route estimates"), "width": (48, 64), "depth": (10, 12)},
    original='''import torch
from torch import nn


FEATURES, WIDTH, DEPTH = 32, $width, $depth


def block(n_in, n_out):
    return nn.Sequential(nn.Linear(n_in, n_out), nn.BatchNorm1d(n_out), nn.ReLU())


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(block(FEATURES, WIDTH), *[block(WIDTH, WIDTH) for _ in range(DEPTH - 1)])
        self.head = nn.Linear(WIDTH, 1)

    def forward(self, x):
        return self.head(self.body(x)).squeeze(1)


def trained(seed):
    torch.manual_seed(seed)
    net = Net()
    for m in net.modules():  # statistics and scales as training would leave them
        if isinstance(m, nn.BatchNorm1d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    return net.eval()


def pipeline(cfg):
    model = trained(cfg.seed).to(cfg.device)
    g = torch.Generator().manual_seed(cfg.seed)
    with torch.inference_mode():
        while True:
            batches = [torch.randn(cfg.batch_size, FEATURES, generator=g).to(cfg.device) for _ in range(8)]
            yield {"scores": torch.stack([model(x) for x in batches])}
''',
    fix=(("    model = trained(cfg.seed).to(cfg.device)",
          "    model = trained(cfg.seed)\n"
          "    for b in model.body:\n"
          "        b[0] = torch.nn.utils.fusion.fuse_linear_bn_eval(b[0], b[1])\n"
          "        b[1] = nn.Identity()\n"
          "    model = model.to(cfg.device)"),),
    manifest="""
""" + workload(8, timed_steps=12) + """
[results.scores]
what = "the scores of each batch"
rtol = 1e-4
atol = 1e-4
hint = "The same model, with the same weights and statistics, on the same batches."

[evidence]
metric = "batchnorm_calls"
label = "batch norm operators per step"
unit = "per step"
max_vs_original = 0.2
where = "the Operators table: aten::batch_norm and its calls per step"

[speedup]
cpu = 1.3
cuda = 1.3

[timing]
cpu = "cpu_time"
cuda = "wall_time"
why = "the operators' own work, which other jobs on a machine move far less than the clock"
""",
    operator_words=("batch_norm",),
)

LOADER = Bottleneck(
    key="loader",
    title="a photo classifier",
    story="a $model learns to tell photos apart.",
    choices={"model": ("two-layer network on shrunk photos", "small network on shrunk photos"),
             "hidden": (64, 96, 128)},
    original='''import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader

from proflab.labkit.photos import NUM_CLASSES, PhotoDataset


HIDDEN = $hidden


def pipeline(cfg):
    data = PhotoDataset(cfg.data_dir)
    loader = DataLoader(data, batch_size=cfg.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(cfg.seed))
    torch.manual_seed(cfg.seed)
    model = nn.Sequential(nn.AvgPool2d(4), nn.Flatten(), nn.LazyLinear(HIDDEN), nn.ReLU(),
                          nn.Linear(HIDDEN, NUM_CLASSES)).to(cfg.device)
    model(torch.zeros(1, 3, 56, 56, device=cfg.device))  # the lazy layer's shape, before the optimizer
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for images, labels in loader:
        images, labels = images.to(cfg.device), labels.to(cfg.device)
        loss = F.cross_entropy(model(images), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        yield {"loss": loss.detach(), "labels": labels}
''',
    fix=(("                        generator=torch.Generator().manual_seed(cfg.seed))",
          "                        generator=torch.Generator().manual_seed(cfg.seed), num_workers=4,\n"
          "                        persistent_workers=True)"),),
    top='data = "proflab.labkit.photos:ensure_photos"\n',
    manifest="""
""" + workload(16, timed_steps=8, warmup_steps=3, background_workers="true", startup_s=0.5) + """
[storage]
folder = "photos"
latency_ms = 8

[audit]
allow = ["threads"]
""" + TRAIN_RESULTS + """
[results.labels]
what = "the labels of the batch"
exact = true
hint = "The same samples in the same order: keep the batch size, the shuffle and its generator."

[evidence]
metric = "dataloader_wait"
label = "time each step waits on the DataLoader"
unit = "ms"
max_vs_original = 0.5
where = "the Profile tab's Overview: DataLoader wait; the Trace timeline: enumerate(DataLoader)#…__next__"

[speedup]
cpu = 1.5
cuda = 1.5

[timing]
cpu = "wall_time"
cuda = "wall_time"
why = "time spent waiting on storage, which only the clock sees"
""",
    parts=("DataLoader wait",),
    operator_words=("DataLoader",),
)

CATALOGUE: tuple[Bottleneck, ...] = (LOADER, LOOKUPS, ELEMENTWISE, READS, HOST_WORK, BATCH_NORM)
